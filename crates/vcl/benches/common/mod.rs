//! What the executor benchmark runs, shared by the criterion benchmark
//! (`benches/exec.rs`) and the instruction-count driver
//! (`examples/exec_profile.rs`): builtin.vcl alone, and builtin.vcl behind
//! the production-style VCL in `typical.vcl` (about 300 lines, 38 regex
//! uses), each run through the subroutines one request runs (a hit: recv,
//! hash, hit, deliver; a miss: recv, hash, miss, backend_fetch,
//! backend_response, deliver) against the mock context with a browser-like
//! request (14 headers, a 300-byte cookie).

use lacquer_vcl::compile::{CompileOptions, compile_str};
use lacquer_vcl::exec::code::Program;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{Action, HttpWhich, NoVmods, Scratch, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;
use lacquer_vcl::vmod::VmodRegistry;

/// The production-style VCL.
pub const TYPICAL: &str = include_str!("typical.vcl");

/// A VCL with no code of its own: only builtin.vcl runs.
pub const BUILTIN_ONLY: &str = "vcl 4.1;\nbackend default { .host = \"127.0.0.1\"; }\n";

/// Compiles and lowers a VCL (with builtin.vcl appended).
pub fn build(text: &str) -> Program {
    let opts = CompileOptions {
        err_unref: false,
        ..CompileOptions::default()
    };
    let (sm, r) = compile_str("bench.vcl", text, &opts, &VmodRegistry::new());
    let ir = r.unwrap_or_else(|d| panic!("{}", d.render(&sm)));
    Program::from_ir(&ir).expect("lowering")
}

/// A 300-byte cookie header: analytics cookies, a session, a consent flag.
const COOKIE: &str = "_ga=GA1.2.1234567890.1700000000; _gid=GA1.2.987654321.1700000000; \
    _fbp=fb.1.1700000000000.1234567890; session=3f2a9c0e8b7d4f61a5c2e9d8b7a6f5e4; \
    _hjSessionUser_123456=eyJpZCI6IjEyMzQ1Njc4OTAiLCJjcmVhdGVkIjoxNzAwMDAwMDAwMDAwfQ==; \
    cookie_consent=accepted; _gat=1; lang=en; theme=dark; recently_viewed=1842,1711,1530";

/// The headers of the stored object a hit delivers (and of the response a
/// miss delivers), as vcl_backend_response left them.
const RESP_HEADERS: [(&str, &str); 16] = [
    ("Date", "Tue, 14 Nov 2023 22:13:20 GMT"),
    ("Server", "nginx/1.24.0"),
    ("Content-Type", "text/html; charset=utf-8"),
    ("Content-Length", "48213"),
    ("Cache-Control", "public, max-age=300"),
    ("Last-Modified", "Tue, 14 Nov 2023 21:50:02 GMT"),
    ("ETag", "\"5f2a-60a1c3b2e4d80\""),
    ("Vary", "Accept-Encoding"),
    ("X-Powered-By", "PHP/8.2.12"),
    ("X-Url", "/articles/2024/some-story?id=42"),
    ("X-Host", "example.com"),
    ("X-TTL", "300.000"),
    ("X-Varnish-Backend", "default"),
    ("X-Varnish", "32770 3"),
    ("Age", "42"),
    ("Via", "1.1 varnish (Varnish/7.1)"),
];

/// A browser request for an article, with the state the server gives VCL.
pub fn request() -> MockContext {
    let req = HttpWhich::Req;
    let mut c = MockContext::new(
        "GET",
        "/articles/2024/some-story?utm_source=newsletter&utm_medium=email&id=42",
    )
    .with_header(req, "Host", "www.example.com")
    .with_header(
        req,
        "User-Agent",
        "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 \
         (KHTML, like Gecko) Chrome/120.0.6099.43 Mobile Safari/537.36",
    )
    .with_header(
        req,
        "Accept",
        "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8",
    )
    .with_header(req, "Accept-Encoding", "gzip, deflate, br")
    .with_header(req, "Accept-Language", "en-US,en;q=0.9,de;q=0.8")
    .with_header(req, "Cookie", COOKIE)
    .with_header(req, "Referer", "https://www.example.com/")
    .with_header(req, "Connection", "keep-alive")
    .with_header(req, "Upgrade-Insecure-Requests", "1")
    .with_header(req, "Sec-Fetch-Dest", "document")
    .with_header(req, "Sec-Fetch-Mode", "navigate")
    .with_header(req, "Sec-Fetch-Site", "same-origin")
    .with_header(req, "X-Forwarded-Proto", "https")
    .with_header(req, "Cache-Control", "max-age=0");
    for (n, v) in RESP_HEADERS {
        c = c.with_header(HttpWhich::Resp, n, v);
    }
    // The backend request as vcl_recv left it, and the origin's response.
    let bereq = HttpWhich::Bereq;
    c = c
        .with_header(bereq, "Host", "example.com")
        .with_header(bereq, "User-Agent", "Mozilla/5.0 (Linux; Android 14)")
        .with_header(bereq, "Accept", "text/html,application/xhtml+xml")
        .with_header(bereq, "Accept-Encoding", "gzip")
        .with_header(bereq, "Accept-Language", "en-US,en;q=0.9,de;q=0.8")
        .with_header(
            bereq,
            "Cookie",
            "session=3f2a9c0e8b7d4f61a5c2e9d8b7a6f5e4; lang=en",
        )
        .with_header(bereq, "X-Forwarded-For", "203.0.113.9")
        .with_header(bereq, "X-Forwarded-Proto", "https")
        .with_header(bereq, "X-Device", "mobile")
        .with_header(bereq, "X-Request-Start", "t=Tue, 14 Nov 2023 22:13:20 GMT")
        .with_header(bereq, "X-Varnish", "32770");
    for (n, v) in &RESP_HEADERS[..9] {
        c = c.with_header(HttpWhich::Beresp, n, v);
    }
    c.vars.insert(VarId::ReqEsiLevel, Value::Int(0));
    c.vars.insert(VarId::ReqRestarts, Value::Int(0));
    c.vars.insert(
        VarId::ClientIp,
        Value::Ip("203.0.113.9:40000".parse().expect("address")),
    );
    c.vars.insert(VarId::ObjHits, Value::Int(3));
    c.vars.insert(VarId::ObjTtl, Value::Duration(100.0));
    c.vars.insert(VarId::ObjGrace, Value::Duration(10.0));
    c.vars.insert(VarId::BerespStatus, Value::Int(200));
    c.vars.insert(VarId::BerespTtl, Value::Duration(300.0));
    c.vars.insert(VarId::BereqRetries, Value::Int(0));
    c.vars.insert(VarId::BereqUncacheable, Value::Bool(false));
    c.strings.insert(VarId::BereqMethod, b"GET".to_vec());
    c.strings
        .insert(VarId::BereqUrl, b"/articles/2024/some-story?id=42".to_vec());
    c
}

/// The same request without its cookie (builtin.vcl passes requests with
/// cookies, so the builtin-only case would never reach a hit).
pub fn request_no_cookie() -> MockContext {
    let mut c = request();
    c.http[0].headers.remove("cookie");
    c
}

/// A cache hit: recv, hash, hit, deliver.
pub fn hit(p: &Program, c: &mut MockContext, s: &mut Scratch) {
    assert_eq!(p.run(BuiltinSub::Recv, c, &NoVmods, s), Action::Hash);
    assert_eq!(p.run(BuiltinSub::Hash, c, &NoVmods, s), Action::Lookup);
    assert_eq!(p.run(BuiltinSub::Hit, c, &NoVmods, s), Action::Deliver);
    assert_eq!(p.run(BuiltinSub::Deliver, c, &NoVmods, s), Action::Deliver);
}

/// A cache miss: recv, hash, miss, backend_fetch, backend_response,
/// deliver.
pub fn miss(p: &Program, c: &mut MockContext, s: &mut Scratch) {
    assert_eq!(p.run(BuiltinSub::Recv, c, &NoVmods, s), Action::Hash);
    assert_eq!(p.run(BuiltinSub::Hash, c, &NoVmods, s), Action::Lookup);
    assert_eq!(p.run(BuiltinSub::Miss, c, &NoVmods, s), Action::Fetch);
    assert_eq!(
        p.run(BuiltinSub::BackendFetch, c, &NoVmods, s),
        Action::Fetch
    );
    assert_eq!(
        p.run(BuiltinSub::BackendResponse, c, &NoVmods, s),
        Action::Deliver
    );
    assert_eq!(p.run(BuiltinSub::Deliver, c, &NoVmods, s), Action::Deliver);
}

/// One request flow through the methods of a program.
pub type Flow = fn(&Program, &mut MockContext, &mut Scratch);
/// Builds the request a flow starts from.
pub type Setup = fn() -> MockContext;

/// A benchmark case: name, which VCL, the request, the flow.
pub struct Case {
    pub name: &'static str,
    pub typical: bool,
    pub setup: Setup,
    pub flow: Flow,
}

/// Every case, builtin-only first.
pub const CASES: [Case; 4] = [
    Case {
        name: "builtin_hit",
        typical: false,
        setup: request_no_cookie,
        flow: hit,
    },
    Case {
        name: "builtin_miss",
        typical: false,
        setup: request_no_cookie,
        flow: miss,
    },
    Case {
        name: "typical_hit",
        typical: true,
        setup: request,
        flow: hit,
    },
    Case {
        name: "typical_miss",
        typical: true,
        setup: request,
        flow: miss,
    },
];
