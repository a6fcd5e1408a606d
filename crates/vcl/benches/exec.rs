//! Executor benchmark: builtin.vcl alone, and builtin.vcl behind a typical
//! production-style VCL of about 300 lines, run for a cache hit
//! (recv + hash + hit + deliver) and a miss (adds miss, backend_fetch and
//! backend_response) against the mock context. The context is rebuilt
//! outside the timed section, so the figures are VCL time only.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use lacquer_vcl::compile::{CompileOptions, compile_str};
use lacquer_vcl::exec::code::Program;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{Action, HttpWhich, NoVmods, Scratch, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;
use lacquer_vcl::vmod::VmodRegistry;

const TYPICAL: &str = r##"
vcl 4.1;

probe healthcheck {
    .url = "/health";
    .timeout = 2s;
    .interval = 5s;
    .window = 5;
    .threshold = 3;
}

backend default {
    .host = "127.0.0.1";
    .port = "8080";
    .probe = healthcheck;
    .connect_timeout = 1s;
    .first_byte_timeout = 30s;
}

backend api {
    .host = "127.0.0.1";
    .port = "8081";
    .probe = healthcheck;
}

backend media {
    .host = "127.0.0.1";
    .port = "8082";
}

acl purgers {
    "127.0.0.1";
    "10.0.0.0"/8;
    "192.168.0.0"/16;
    ! "10.66.0.0"/16;
}

acl internal {
    "172.16.0.0"/12;
    "10.0.0.0"/8;
}

sub pick_backend {
    if (req.url ~ "^/api/") {
        set req.backend_hint = api;
    } elseif (req.url ~ "^/(media|images|video)/") {
        set req.backend_hint = media;
    } else {
        set req.backend_hint = default;
    }
}

sub normalize_host {
    if (req.http.host ~ ":[0-9]+$") {
        set req.http.host = regsub(req.http.host, ":[0-9]+$", "");
    }
    if (req.http.host ~ "^www\.") {
        set req.http.host = regsub(req.http.host, "^www\.", "");
    }
}

sub normalize_url {
    # Strip tracking parameters and empty query strings.
    if (req.url ~ "[?&](utm_[a-z]+|gclid|fbclid|mc_[a-z]+)=") {
        set req.url = regsuball(req.url, "(utm_[a-z]+|gclid|fbclid|mc_[a-z]+)=[^&]*&?", "");
        set req.url = regsub(req.url, "[?&]+$", "");
    }
    if (req.url ~ "\?$") {
        set req.url = regsub(req.url, "\?$", "");
    }
    if (req.url ~ "#") {
        set req.url = regsub(req.url, "#.*$", "");
    }
}

sub normalize_encoding {
    if (req.http.Accept-Encoding) {
        if (req.url ~ "\.(jpg|jpeg|png|gif|webp|gz|tgz|bz2|mp3|mp4|ogg|woff2)$") {
            unset req.http.Accept-Encoding;
        } elseif (req.http.Accept-Encoding ~ "br") {
            set req.http.Accept-Encoding = "br";
        } elseif (req.http.Accept-Encoding ~ "gzip") {
            set req.http.Accept-Encoding = "gzip";
        } else {
            unset req.http.Accept-Encoding;
        }
    }
}

sub clean_cookies {
    if (req.http.Cookie) {
        set req.http.Cookie = regsuball(req.http.Cookie, "(^|;\s*)(_ga|_gid|_gat|__utm[a-z]+|_fbp|_hj[a-zA-Z]+)=[^;]*", "");
        set req.http.Cookie = regsub(req.http.Cookie, "^;\s*", "");
        if (req.http.Cookie ~ "^\s*$") {
            unset req.http.Cookie;
        }
    }
}

sub device_detect {
    set req.http.X-Device = "desktop";
    if (req.http.User-Agent ~ "(?i)ipad|tablet|kindle|playbook") {
        set req.http.X-Device = "tablet";
    } elseif (req.http.User-Agent ~ "(?i)mobile|android|iphone|ipod|blackberry|opera mini") {
        set req.http.X-Device = "mobile";
    } elseif (req.http.User-Agent ~ "(?i)bot|crawl|spider|slurp") {
        set req.http.X-Device = "bot";
    }
}

sub vcl_recv {
    if (req.restarts == 0) {
        if (req.http.X-Forwarded-For) {
            set req.http.X-Forwarded-For = req.http.X-Forwarded-For + ", " + client.ip;
        } else {
            set req.http.X-Forwarded-For = client.ip;
        }
    }

    call normalize_host;
    call normalize_url;
    call pick_backend;

    if (req.method == "PURGE") {
        if (client.ip !~ purgers) {
            return (synth(405, "Purging not allowed for " + client.ip));
        }
        return (purge);
    }
    if (req.method == "BAN") {
        if (client.ip !~ purgers) {
            return (synth(405, "Banning not allowed"));
        }
        ban("obj.http.x-url ~ " + req.url);
        return (synth(200, "Ban added"));
    }

    if (req.http.Upgrade ~ "(?i)websocket") {
        return (pipe);
    }

    if (req.url ~ "^/(admin|login|logout|cart|checkout|account)") {
        return (pass);
    }
    if (req.url ~ "^/internal/" && client.ip !~ internal) {
        return (synth(403, "Forbidden"));
    }

    if (req.http.Authorization && req.url !~ "^/public/") {
        return (pass);
    }

    call normalize_encoding;

    if (req.url ~ "\.(css|js|jpg|jpeg|png|gif|ico|svg|webp|woff|woff2|ttf|eot|mp4|mp3|pdf)(\?.*)?$") {
        unset req.http.Cookie;
        set req.http.X-Static = "1";
        return (hash);
    }

    call clean_cookies;
    call device_detect;

    if (req.http.Cache-Control ~ "no-cache" && client.ip ~ internal) {
        set req.hash_always_miss = true;
    }

    set req.http.X-Request-Start = "t=" + now;
    set req.grace = 10s;
    return (hash);
}

sub vcl_hash {
    hash_data(req.url);
    if (req.http.host) {
        hash_data(req.http.host);
    } else {
        hash_data(server.ip);
    }
    if (req.http.X-Device) {
        hash_data(req.http.X-Device);
    }
    if (req.http.X-Forwarded-Proto) {
        hash_data(req.http.X-Forwarded-Proto);
    }
    return (lookup);
}

sub vcl_hit {
    if (obj.ttl >= 0s) {
        return (deliver);
    }
    if (obj.ttl + obj.grace > 0s) {
        return (deliver);
    }
    return (pass);
}

sub vcl_miss {
    if (req.http.X-Static) {
        unset req.http.Cookie;
    }
    return (fetch);
}

sub vcl_pass {
    return (fetch);
}

sub vcl_backend_fetch {
    if (bereq.http.X-Static) {
        unset bereq.http.Cookie;
    }
    set bereq.http.X-Varnish-Backend = bereq.backend;
    unset bereq.http.X-Request-Start;
    return (fetch);
}

sub vcl_backend_response {
    set beresp.http.X-Url = bereq.url;
    set beresp.http.X-Host = bereq.http.host;

    if (beresp.status >= 500 && bereq.retries < 2 && bereq.method == "GET") {
        return (retry);
    }
    if (beresp.status == 404) {
        set beresp.ttl = 60s;
    }
    if (bereq.url ~ "\.(css|js|jpg|jpeg|png|gif|ico|svg|webp|woff|woff2)(\?.*)?$") {
        unset beresp.http.Set-Cookie;
        set beresp.ttl = 7d;
        set beresp.http.Cache-Control = "public, max-age=604800";
    }
    if (beresp.http.Content-Type ~ "^(text/|application/(json|javascript|xml))") {
        set beresp.do_gzip = true;
    }
    if (beresp.http.Surrogate-Control ~ "ESI/1.0") {
        unset beresp.http.Surrogate-Control;
        set beresp.do_esi = true;
    }
    if (beresp.ttl <= 0s || beresp.http.Set-Cookie || beresp.http.Vary == "*") {
        set beresp.ttl = 120s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    set beresp.grace = 6h;
    set beresp.keep = 1d;
    set beresp.http.X-TTL = beresp.ttl;
    return (deliver);
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
        set resp.http.X-Cache-Hits = obj.hits;
    } else {
        set resp.http.X-Cache = "MISS";
    }
    if (client.ip !~ internal) {
        unset resp.http.X-Url;
        unset resp.http.X-Host;
        unset resp.http.X-TTL;
        unset resp.http.X-Varnish-Backend;
        unset resp.http.Via;
        unset resp.http.Server;
        unset resp.http.X-Powered-By;
    }
    if (resp.http.Content-Type ~ "^text/html") {
        set resp.http.X-Frame-Options = "SAMEORIGIN";
        set resp.http.X-Content-Type-Options = "nosniff";
        set resp.http.Referrer-Policy = "strict-origin-when-cross-origin";
    }
    return (deliver);
}

sub vcl_purge {
    return (synth(200, "Purged " + req.url));
}

sub vcl_synth {
    if (resp.status == 720) {
        set resp.http.Location = resp.reason;
        set resp.status = 301;
        return (deliver);
    }
    set resp.http.Content-Type = "text/plain; charset=utf-8";
    synthetic("Error " + resp.status + ": " + resp.reason);
    return (deliver);
}

sub vcl_backend_error {
    set beresp.http.Content-Type = "text/plain; charset=utf-8";
    synthetic("Backend fetch failed");
    return (deliver);
}
"##;

fn build(text: &str) -> Program {
    let opts = CompileOptions {
        err_unref: false,
        ..CompileOptions::default()
    };
    let (sm, r) = compile_str("bench.vcl", text, &opts, &VmodRegistry::new());
    let ir = r.unwrap_or_else(|d| panic!("{}", d.render(&sm)));
    Program::from_ir(&ir).expect("lowering")
}

/// The same request without cookies (builtin.vcl passes requests with
/// cookies).
fn request_no_cookie() -> MockContext {
    let mut c = request();
    c.http[0]
        .headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case("cookie"));
    c
}

fn request() -> MockContext {
    let req = HttpWhich::Req;
    let mut c = MockContext::new("GET", "/articles/2024/some-story?utm_source=x&id=42")
        .with_header(req, "Host", "www.example.com")
        .with_header(
            req,
            "User-Agent",
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148",
        )
        .with_header(req, "Accept-Encoding", "gzip, deflate, br")
        .with_header(req, "Accept", "text/html,application/xhtml+xml")
        .with_header(req, "Cookie", "_ga=GA1.2.3; session=abc; _gid=GA1.5")
        .with_header(HttpWhich::Resp, "Content-Type", "text/html; charset=utf-8")
        .with_header(HttpWhich::Resp, "Server", "origin")
        .with_header(HttpWhich::Bereq, "Host", "example.com")
        .with_header(HttpWhich::Beresp, "Content-Type", "text/html")
        .with_header(HttpWhich::Beresp, "Cache-Control", "max-age=300");
    c.vars.insert(VarId::ReqEsiLevel, Value::Int(0));
    c.vars.insert(VarId::ReqRestarts, Value::Int(0));
    c.vars.insert(
        VarId::ClientIp,
        Value::Ip("203.0.113.9:40000".parse().unwrap()),
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

fn hit(p: &Program, c: &mut MockContext, s: &mut Scratch) {
    assert_eq!(p.run(BuiltinSub::Recv, c, &NoVmods, s), Action::Hash);
    assert_eq!(p.run(BuiltinSub::Hash, c, &NoVmods, s), Action::Lookup);
    assert_eq!(p.run(BuiltinSub::Hit, c, &NoVmods, s), Action::Deliver);
    assert_eq!(p.run(BuiltinSub::Deliver, c, &NoVmods, s), Action::Deliver);
}

fn miss(p: &Program, c: &mut MockContext, s: &mut Scratch) {
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
type Flow = fn(&Program, &mut MockContext, &mut Scratch);
/// Builds the request a flow starts from.
type Setup = fn() -> MockContext;

fn bench(cr: &mut Criterion) {
    let builtin = build("vcl 4.1;\nbackend default { .host = \"127.0.0.1\"; }\n");
    let typical = build(TYPICAL);
    let mut scratch = Scratch::default();
    let cases: [(&str, &Program, Setup, Flow); 3] = [
        ("builtin_hit", &builtin, request_no_cookie, hit),
        ("typical_hit", &typical, request, hit),
        ("typical_miss", &typical, request, miss),
    ];
    for (name, prog, setup, f) in cases {
        cr.bench_function(name, |b| {
            b.iter_batched_ref(setup, |c| f(prog, c, &mut scratch), BatchSize::SmallInput)
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
