//! Axes the base grammar ([`crate::grammar`]) does not reach, laid over
//! its scenario from a second random stream (so the base draws of a seed
//! stay what they were): request bodies (length, chunked, `Expect:
//! 100-continue`) with `std.cache_req_body` and `bodyaccess`, methods the
//! built-in VCL does not know (OPTIONS, DELETE, PATCH, an invented one)
//! sent through pass, pipe and hash, Vary with several variants and the
//! request header that selects them, bans and purges from VCL between
//! requests, `std.*` conversions with their fallbacks on odd input,
//! `resp.status`/`resp.reason` set where a response exists, backend
//! responses with odd framing (a length twice, a 1xx before the final
//! status, 204/304 carrying a body, no reason phrase, HTTP/1.0 keep-alive,
//! a header past `http_resp_hdr_len`, more fields than `http_max_hdr`) and
//! client requests with odd framing (too many fields, a line past
//! `http_req_hdr_len`, folded and absolute-form requests with bodies).
//!
//! Each axis is applied with its own probability, so a batch mixes them
//! with the base grammar's statements rather than testing one at a time.

use crate::rng::Rng;
use crate::scenario::{BeResp, Framing, Scenario};

/// Requests with a body, and methods varnishd's built-in VCL pipes or
/// passes. `{u}` is replaced by a URL.
const BODY_REQUESTS: &[&str] = &[
    "POST {u} HTTP/1.1\r\nHost: test\r\nContent-Length: 11\r\n\r\nhello=world",
    "POST {u} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n=world\r\n0\r\n\r\n",
    "POST {u} HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello",
    "PUT {u} HTTP/1.1\r\nHost: test\r\nContent-Length: 3\r\n\r\nput",
    "GET {u} HTTP/1.1\r\nHost: test\r\nContent-Length: 4\r\n\r\nbody",
    "POST {u} HTTP/1.1\r\nHost: test\r\nContent-Length: 0\r\n\r\n",
    "POST {u} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "POST {u} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n",
    "POST {u} HTTP/1.0\r\nHost: test\r\nContent-Length: 4\r\n\r\nbody",
    "POST {u} HTTP/1.1\r\nHost: test\r\n\r\n",
    "OPTIONS {u} HTTP/1.1\r\nHost: test\r\n\r\n",
    "DELETE {u} HTTP/1.1\r\nHost: test\r\n\r\n",
    "PATCH {u} HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\n\r\npa",
    "FROB {u} HTTP/1.1\r\nHost: test\r\n\r\n",
    "TRACE {u} HTTP/1.1\r\nHost: test\r\n\r\n",
    "HEAD {u} HTTP/1.1\r\nHost: test\r\nX-T: 2\r\n\r\n",
    "GET {u} HTTP/1.1\r\nHost: test\r\nX-T: 2\r\nAccept-Language: fr\r\n\r\n",
    "GET {u} HTTP/1.1\r\nHost: test\r\nAccept-Language: en\r\n\r\n",
    "GET {u} HTTP/1.1\r\nHost: test\r\nX-Ban: e1\r\n\r\n",
    "GET {u} HTTP/1.1\r\nHost: test\r\nX-T: 1.5\r\n\r\n",
    "GET {u} HTTP/1.1\r\nHost: test\r\nX-T: -3\r\n\r\n",
    "GET {u} HTTP/1.1\r\nHost: test\r\nX-T: 0x1f\r\n\r\n",
    "GET {u} HTTP/1.1\r\nHost: test\r\nX-T: 10s\r\n\r\n",
    "GET {u} HTTP/1.1\r\nHost: test\r\nX-T: 1e3\r\n\r\n",
    "GET {u} HTTP/1.1\r\nHost: test\r\nX-T: ::1\r\n\r\n",
    "GET {u} HTTP/1.1\r\nHost: test\r\nX-T: Tue, 01 Jan 2030 00:00:00 GMT\r\n\r\n",
];

/// Client requests with odd framing; `{many}` becomes more header fields
/// than `http_max_hdr` allows, `{long}` a value past `http_req_hdr_len`.
const ODD_REQUESTS: &[&str] = &[
    "GET /a HTTP/1.1\r\nHost: test\r\n{many}\r\n",
    "GET /a HTTP/1.1\r\nHost: test\r\nX-Long: {long}\r\n\r\n",
    "GET http://test/a HTTP/1.1\r\nHost: other\r\n\r\n",
    "GET http://test/a?q=1 HTTP/1.0\r\n\r\n",
    "POST http://test/a HTTP/1.1\r\nContent-Length: 2\r\n\r\nab",
    "POST /a HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab",
    "POST /a HTTP/1.1\r\nHost: test\r\nContent-Length: +2\r\n\r\nab",
    "POST /a HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\n\r\nabGET /b HTTP/1.1\r\nHost: test\r\n\r\n",
    "POST /a HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    "POST /a HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: Chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: test\r\nX-Sp : v\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: test\r\nX-Ctl: a\x01b\r\n\r\n",
    "GET /a?x=%20y#frag HTTP/1.1\r\nHost: test\r\n\r\n",
    "GET /a HTTP/1.1\r\nhost: test\r\nHOST: test\r\n\r\n",
];

/// Backend responses with odd framing, sent as they are (two different
/// lengths are left out: a deliberate deviation, tests/diff/DEVIATIONS.md).
const ODD_RESPONSES: &[&str] = &[
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 204 No Content\r\nContent-Length: 4\r\n\r\nbody",
    "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "HTTP/1.1 304 Not Modified\r\nETag: \"e1\"\r\nContent-Length: 4\r\n\r\nbody",
    "HTTP/1.1 200 \r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 200 OK\r\nX-Long: {long}\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 200 OK\r\n{many}Content-Length: 2\r\n\r\nok",
    "HTTP/1.1 200 OK\r\nContent-Length: 2 \r\n\r\nok",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nok\r\n0\r\nX-Tr: 1\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 2\r\nCache-Control: max-age=10\r\nVary: X-T, Accept-Language\r\n\r\nok",
    "HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\nCache-Control: max-age=10\r\n\r\nnot",
];

/// Statements of the new axes, by subroutine.
const STATEMENTS: &[(&str, &str)] = &[
    ("vcl_recv", "std.cache_req_body(1KB);"),
    ("vcl_recv", "std.cache_req_body(1KB);"),
    ("vcl_recv", "std.cache_req_body(3B);"),
    (
        "vcl_recv",
        "if (!std.cache_req_body(100B)) {\n  return (synth(413, \"Big\"));\n}",
    ),
    (
        "vcl_recv",
        "if (req.method == \"POST\") {\n  return (hash);\n}",
    ),
    (
        "vcl_recv",
        "if (req.method != \"GET\" && req.method != \"HEAD\") {\n  return (pass);\n}",
    ),
    (
        "vcl_recv",
        "if (req.method == \"FROB\" || req.method == \"OPTIONS\") {\n  return (pipe);\n}",
    ),
    (
        "vcl_recv",
        "if (req.method == \"DELETE\") {\n  return (purge);\n}",
    ),
    (
        "vcl_recv",
        "if (req.http.X-Ban) {\n  ban(\"obj.http.ETag ~ \" + req.http.X-Ban);\n}",
    ),
    ("vcl_recv", "ban(\"req.url == \" + req.url);"),
    (
        "vcl_recv",
        "set req.http.X-I = std.integer(req.http.X-T, -1);",
    ),
    (
        "vcl_recv",
        "set req.http.X-R = std.real(req.http.X-T, 0.5);",
    ),
    (
        "vcl_recv",
        "set req.http.X-D = std.duration(req.http.X-T, 7s);",
    ),
    (
        "vcl_recv",
        "set req.http.X-P = std.ip(req.http.X-T, \"192.0.2.1\");",
    ),
    (
        "vcl_recv",
        "set req.http.X-Tm = std.time(req.http.X-T, now) < now;",
    ),
    (
        "vcl_recv",
        "set req.http.X-Bool = std.integer(req.http.X-T, 0) > 1;",
    ),
    ("vcl_recv", "set req.ttl = std.duration(req.http.X-T, 1s);"),
    ("vcl_recv", "set req.http.X-L = bodyaccess.len_req_body();"),
    (
        "vcl_recv",
        "if (bodyaccess.rematch_req_body(\"hello\") == 1) {\n  return (synth(200, \"Matched\"));\n}",
    ),
    ("vcl_recv", "set req.http.Accept-Language = \"de\";"),
    ("vcl_recv", "unset req.http.X-T;"),
    ("vcl_hash", "bodyaccess.hash_req_body();"),
    ("vcl_hash", "hash_data(req.http.Accept-Language);"),
    ("vcl_deliver", "set resp.http.X-L = req.http.X-L;"),
    ("vcl_deliver", "set resp.http.X-I = req.http.X-I;"),
    ("vcl_deliver", "set resp.http.X-D = req.http.X-D;"),
    ("vcl_deliver", "set resp.http.X-R = req.http.X-R;"),
    ("vcl_deliver", "set resp.http.X-P = req.http.X-P;"),
    ("vcl_deliver", "set resp.http.X-Tm = req.http.X-Tm;"),
    ("vcl_deliver", "set resp.status = 404;"),
    ("vcl_deliver", "set resp.reason = \"\";"),
    ("vcl_deliver", "set resp.status = 304;"),
    ("vcl_deliver", "set resp.status = 204;"),
    ("vcl_deliver", "set resp.http.X-Method = req.method;"),
    ("vcl_synth", "set resp.status = 304;"),
    ("vcl_synth", "set resp.status = 204;"),
    ("vcl_synth", "set resp.reason = \"\";"),
    ("vcl_synth", "set resp.body = req.method + \" \" + req.url;"),
    ("vcl_backend_fetch", "set bereq.method = \"POST\";"),
    ("vcl_backend_fetch", "unset bereq.body;"),
    ("vcl_backend_fetch", "set bereq.http.X-M = bereq.method;"),
    (
        "vcl_backend_response",
        "set beresp.http.Vary = \"X-T, Accept-Language\";",
    ),
    ("vcl_backend_response", "set beresp.uncacheable = true;"),
    ("vcl_backend_response", "return (pass(2s));"),
    ("vcl_backend_response", "set beresp.status = 204;"),
    ("vcl_backend_response", "set beresp.status = 304;"),
    ("vcl_backend_response", "set beresp.reason = \"\";"),
    (
        "vcl_backend_response",
        "set beresp.ttl = std.duration(\"x\", 3s);",
    ),
    ("vcl_backend_error", "set beresp.status = 204;"),
    ("vcl_backend_error", "set beresp.reason = \"\";"),
    ("vcl_pipe", "set bereq.http.X-Pipe = req.method;"),
    ("vcl_pass", "set req.http.X-Pass = req.method;"),
    ("vcl_miss", "set req.http.X-Miss = req.method;"),
];

fn expand(s: &str, url: &str) -> String {
    let many: String = (0..70).map(|i| format!("X-H{i}: {i}\r\n")).collect();
    s.replace("{u}", url)
        .replace("{many}", &many)
        .replace("{long}", &"x".repeat(9000))
}

/// Lays the new axes over `sc` (from its own random stream for `sc.seed`).
pub fn widen(sc: &mut Scenario) {
    let mut r = Rng::new(sc.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5EED_A7E5);
    // VCL statements of the new axes.
    if r.chance(70) {
        let n = 1 + r.below(3);
        for _ in 0..n {
            let (sub, st) = *r.pick(STATEMENTS);
            if st.contains("bodyaccess.") && !sc.decls.iter().any(|d| d == "import bodyaccess;") {
                sc.decls.push("import bodyaccess;".to_string());
            }
            match sc.subs.iter_mut().find(|(n, _)| n == sub) {
                // Before the body's own statements, which may return.
                Some((_, b)) => b.insert(0, st.to_string()),
                None => sc.subs.push((sub.to_string(), vec![st.to_string()])),
            }
        }
    }
    // Requests of the new axes replace some of the base requests.
    for step in sc.steps.iter_mut() {
        if r.chance(35) {
            let url = *r.pick(&["/a", "/a", "/b", "/c"]);
            step.raw = expand(r.pick::<&str>(BODY_REQUESTS), url);
        } else if r.chance(6) {
            step.raw = expand(r.pick::<&str>(ODD_REQUESTS), "/a");
        }
    }
    // Vary with several variants: the same URL asked with each variant.
    if r.chance(12) {
        let conn = sc.steps.last().map_or(0, |s| s.conn);
        for v in ["", "X-T: 1\r\n", "X-T: 2\r\n", "", "X-T: 1\r\n"] {
            sc.steps.push(crate::scenario::Step {
                conn,
                raw: format!("GET /a HTTP/1.1\r\nHost: test\r\n{v}\r\n"),
                pipeline: false,
                close_early: false,
                wait_ms: 0,
            });
        }
        sc.backend.insert(
            0,
            BeResp {
                url: "/a".into(),
                status: 200,
                reason: "OK".into(),
                headers: vec![
                    ("Vary".into(), "X-T".into()),
                    ("Cache-Control".into(), "max-age=30".into()),
                ],
                body: "variant".into(),
                gzip: false,
                framing: Framing::Length,
                delay_ms: 0,
                stall_ms: 0,
                truncate: false,
                raw: None,
            },
        );
    }
    // Backend responses with odd framing, first in their path's script.
    if r.chance(30) {
        let url = *r.pick(&["/a", "/a", "/b", "*"]);
        let raw = expand(r.pick::<&str>(ODD_RESPONSES), url);
        sc.backend.insert(0, BeResp::raw(url, raw));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar;

    #[test]
    fn widening_is_reproducible_and_imports_what_it_uses() {
        let mut bodies = 0;
        for s in 0..500 {
            let a = grammar::scenario(s);
            assert_eq!(a, grammar::scenario(s));
            let vcl = a.vcl(1);
            if vcl.contains("bodyaccess.") {
                assert!(a.decls.iter().any(|d| d == "import bodyaccess;"), "{s}");
            }
            bodies += a
                .steps
                .iter()
                .filter(|st| st.raw.contains("Transfer-Encoding: chunked\r\n\r\n5"))
                .count();
        }
        assert!(bodies > 0, "no chunked request body in 500 seeds");
    }

    #[test]
    fn placeholders_are_expanded() {
        for s in BODY_REQUESTS
            .iter()
            .chain(ODD_REQUESTS)
            .chain(ODD_RESPONSES)
        {
            let e = expand(s, "/a");
            assert!(!e.contains('{') || e.contains("{\""), "{e}");
        }
        assert!(expand("{many}", "/a").lines().count() > 64);
    }
}
