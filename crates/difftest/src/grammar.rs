//! The scenario grammar: from a seed, a VCL (common statements, every
//! return action of every subroutine, restarts (to another URL too) and
//! retries, header operations, TTL/grace/ESI/gzip switches, bans, and now
//! and then a statement the compiler must reject), a backend script
//! (cache-control variants, validators, Vary, `Age`, gzip, ESI markup,
//! every framing, delays past the timeouts, truncated and malformed
//! responses) and a client script (methods, ranges, conditional and
//! encoding headers, pipelining, early close, malformed and hostile
//! requests, now and then a pause past a short TTL). Error paths have
//! their own pool ([`FAILURES`]): statuses out of range set from VCL,
//! restarts and retries past their limits, and workspace overflow through
//! the `vtc` vmod, which varnishd answers with 500 or 503. [`crate::axes`]
//! adds request bodies, unknown methods, Vary variants, VCL bans and
//! purges, `std.*` conversions and odd framing on both sides.

use crate::rng::Rng;
use crate::scenario::{BeResp, Framing, Scenario, Step};

/// Paths the client asks for; the backend scripts `/a`, `/b` and `/inc`.
const URLS: &[&str] = &["/a", "/a", "/b", "/a?q=1", "/inc", "/esi", "/c"];

const CLIENT_CONDS: &[&str] = &[
    "req.url ~ \"^/a\"",
    "req.url ~ \"q=\"",
    "req.method == \"HEAD\"",
    "req.method == \"POST\"",
    "req.http.X-T",
    "!req.http.X-T",
    "req.restarts == 0",
    "req.restarts > 0",
    "req.http.Range",
    "req.http.Accept-Encoding ~ \"gzip\"",
    "req.esi_level > 0",
];

const BACKEND_CONDS: &[&str] = &[
    "bereq.url ~ \"^/a\"",
    "bereq.retries == 0",
    "bereq.retries > 0",
    "bereq.method == \"HEAD\"",
    "bereq.http.X-T",
    "bereq.uncacheable",
    "bereq.is_bgfetch",
];

const RESP_CONDS: &[&str] = &[
    "beresp.status == 200",
    "beresp.status >= 500",
    "beresp.http.Content-Encoding",
    "beresp.http.ETag",
    "beresp.ttl > 0s",
    "beresp.http.Cache-Control ~ \"private\"",
];

fn returns(sub: &str) -> &'static [&'static str] {
    match sub {
        "vcl_recv" => &[
            "hash",
            "hash",
            "pass",
            "pipe",
            "synth(200, \"Recv\")",
            "synth(404)",
            "synth(750, \"Odd\")",
            "purge",
            "restart",
            "fail",
        ],
        "vcl_pipe" => &["pipe", "synth(503, \"NoPipe\")", "fail"],
        "vcl_pass" => &["fetch", "synth(204, \"P\")", "restart", "fail"],
        "vcl_hash" => &["lookup", "fail"],
        "vcl_purge" => &["synth(200, \"Purged\")", "restart", "fail"],
        "vcl_miss" => &["fetch", "pass", "synth(302, \"Moved\")", "restart", "fail"],
        "vcl_hit" => &["deliver", "pass", "synth(203)", "restart", "fail"],
        "vcl_deliver" => &["deliver", "restart", "synth(299, \"D\")", "fail"],
        "vcl_synth" => &["deliver", "restart", "fail"],
        "vcl_backend_fetch" => &[
            "fetch",
            "abandon",
            "error(503, \"BF\")",
            "error(200)",
            "fail",
        ],
        "vcl_backend_response" => &[
            "deliver",
            "deliver",
            "abandon",
            "retry",
            "pass(5s)",
            "error(502, \"BR\")",
            "fail",
        ],
        "vcl_backend_error" => &["deliver", "retry", "abandon", "fail"],
        _ => &[],
    }
}

fn statements(sub: &str) -> &'static [&'static str] {
    match sub {
        "vcl_recv" => &[
            "set req.http.X-T = \"t\";",
            "unset req.http.Accept-Encoding;",
            "set req.http.Accept-Encoding = \"gzip\";",
            "unset req.http.Cookie;",
            "unset req.http.Range;",
            "set req.http.Range = \"bytes=1-3\";",
            "set req.url = regsub(req.url, \"\\?.*$\", \"\");",
            "set req.url = req.url + \"x\";",
            "set req.hash_always_miss = true;",
            "set req.hash_ignore_busy = true;",
            "set req.esi = false;",
            "set req.http.host = \"example.com\";",
            "set req.method = \"GET\";",
            "set req.http.X-R = req.restarts;",
            "set req.grace = 0s;",
            "set req.ttl = 1s;",
            "std.log(\"recv \" + req.url);",
            "std.collect(req.http.X-T);",
            "set req.http.X-Int = std.integer(req.http.X-T, 3);",
            "set req.grace = 10s;",
            "ban(\"req.url ~ ^/a\");",
            "ban(\"obj.http.ETag ~ e1\");",
        ],
        "vcl_hash" => &[
            "hash_data(req.url);",
            "hash_data(req.http.X-T);",
            "hash_data(req.http.host);",
        ],
        "vcl_hit" | "vcl_miss" | "vcl_pass" | "vcl_purge" | "vcl_pipe" => &[
            "set req.http.X-Sub = \"s\";",
            "unset req.http.X-T;",
            "set req.http.X-Hits = req.restarts;",
        ],
        "vcl_backend_fetch" => &[
            "set bereq.http.X-B = \"b\";",
            "unset bereq.http.Range;",
            "unset bereq.http.Accept-Encoding;",
            "set bereq.url = bereq.url + \"?bf\";",
            "set bereq.method = \"GET\";",
            "set bereq.http.X-Retries = bereq.retries;",
            "set bereq.first_byte_timeout = 1s;",
            "unset bereq.http.X-T;",
        ],
        "vcl_backend_response" => &[
            "set beresp.ttl = 10s;",
            "set beresp.ttl = 0s;",
            "set beresp.ttl = -1s;",
            "set beresp.grace = 5s;",
            "set beresp.keep = 10s;",
            "set beresp.ttl = 1s;",
            "set beresp.ttl = 1s;",
            "set beresp.grace = 0s;",
            "set beresp.uncacheable = true;",
            "set beresp.do_esi = true;",
            "set beresp.do_esi = true;",
            "set beresp.do_gzip = true;",
            "set beresp.do_gunzip = true;",
            "set beresp.do_stream = false;",
            "set beresp.status = 203;",
            "set beresp.status = 1000;",
            "set beresp.reason = \"Changed\";",
            "set beresp.http.Cache-Control = \"max-age=5\";",
            "unset beresp.http.ETag;",
            "unset beresp.http.Last-Modified;",
            "set beresp.http.X-S = beresp.status;",
            "set beresp.http.Vary = \"X-T\";",
            "unset beresp.http.Vary;",
            "set beresp.filters = \"\";",
            "set beresp.http.Content-Encoding = \"gzip\";",
            "unset beresp.http.Content-Encoding;",
        ],
        "vcl_backend_error" => &[
            "set beresp.http.X-E = \"e\";",
            "synthetic(\"backend error \" + beresp.status);",
            "set beresp.status = 502;",
            "set beresp.ttl = 5s;",
            "set beresp.reason = \"BE\";",
        ],
        "vcl_deliver" => &[
            "set resp.http.X-Hits = obj.hits;",
            "set resp.http.X-Uncacheable = obj.uncacheable;",
            "unset resp.http.ETag;",
            "unset resp.http.Accept-Ranges;",
            "set resp.status = 299;",
            "set resp.status = 99;",
            "set resp.reason = \"Dl\";",
            "unset resp.http.Content-Length;",
            "set resp.http.Connection = \"close\";",
            "set resp.do_esi = false;",
            "set resp.http.Content-Range = \"bytes 0-0/1\";",
            "set resp.filters = \"\";",
            "set resp.http.X-Restarts = req.restarts;",
            "unset resp.http.Via;",
            "set req.url = \"/b\";",
        ],
        "vcl_synth" => &[
            "synthetic(\"synth \" + resp.status + \" \" + resp.reason);",
            "set resp.http.X-Sy = resp.reason;",
            "set resp.status = 200;",
            "set resp.http.Connection = \"close\";",
            "set resp.reason = \"Sy\";",
            "set resp.http.Content-Type = \"text/plain\";",
            "set req.url = \"/b\";",
        ],
        _ => &[],
    }
}

/// Statements a subroutine must not contain: the compiler rejects them.
const INVALID: &[(&str, &str)] = &[
    ("vcl_recv", "set obj.ttl = 1s;"),
    ("vcl_recv", "return (deliver);"),
    ("vcl_recv", "synthetic(\"x\");"),
    ("vcl_recv", "set req.url = ;"),
    ("vcl_recv", "unset req.url;"),
    ("vcl_recv", "set req.http.X = 1 +;"),
    ("vcl_deliver", "set beresp.ttl = 1s;"),
    ("vcl_deliver", "return (pass);"),
    ("vcl_backend_response", "set req.url = \"/\";"),
    ("vcl_backend_response", "set beresp.ttl = \"a\";"),
    ("vcl_backend_response", "return (lookup);"),
    ("vcl_backend_fetch", "set bereq.http.X = req.url;"),
    ("vcl_synth", "set resp.status = \"x\";"),
    ("vcl_hit", "set obj.http.X = \"y\";"),
    ("vcl_hash", "hash_data();"),
    ("vcl_recv", "set req.http.X = std.nonexistent();"),
    ("vcl_recv", "if (req.url) { }"),
    ("vcl_recv", "set req.ttl = 1;"),
    ("vcl_recv", "set req.http.X-A = req.http.X-B + ;"),
    ("vcl_miss", "return (hash);"),
];

/// Corners of the VCL grammar and type rules, valid and invalid, that the
/// compilers must agree on (arithmetic on strings and durations, compound
/// assignments, odd literals, restricted variables, misplaced returns).
const EDGE: &[(&str, &str)] = &[
    ("vcl_recv", "set req.http.X = \"a\" + 1;"),
    ("vcl_recv", "set req.http.X = 1 + \"a\";"),
    ("vcl_recv", "set req.ttl = 1s * 2;"),
    ("vcl_recv", "set req.ttl = 2 * 1s;"),
    ("vcl_recv", "if (req.ttl > 1) { }"),
    ("vcl_recv", "if (req.http.X == 1) { }"),
    ("vcl_recv", "if (req.url ~ \"(\") { }"),
    (
        "vcl_recv",
        "set req.http.X = regsuball(req.url, \"a\", \"\\1\");",
    ),
    (
        "vcl_recv",
        "set req.http.X = std.integer(s=req.http.Y, fallback=1);",
    ),
    ("vcl_recv", "set req.http.X = now + 1;"),
    ("vcl_recv", "if (client.ip == \"127.0.0.1\") { }"),
    ("vcl_recv", "set req.http.X = {\"long\"};"),
    ("vcl_recv", "set req.http.X = \"\"\"a\"\"\";"),
    ("vcl_recv", "set req.http.X += \"a\";"),
    ("vcl_recv", "set req.ttl *= 2;"),
    ("vcl_recv", "unset req.http;"),
    ("vcl_recv", "set req.esi_level = 1;"),
    ("vcl_recv", "set req.backend_hint = nosuch;"),
    ("vcl_recv", "return (synth(200, \"a\", \"b\"));"),
    ("vcl_recv", "return (synth(99));"),
    ("vcl_recv", "return (fail(\"x\"));"),
    ("vcl_recv", "return;"),
    ("vcl_recv", "return (hash); set req.http.X = \"a\";"),
    ("vcl_recv", "call vcl_hash;"),
    ("vcl_recv", "ban(\"req.url ~ a\");"),
    (
        "vcl_recv",
        "if (req.http.X) { } elsif (req.http.Z) { } elseif (req.url) { }",
    ),
    ("vcl_recv", "if (req.http.X) set req.http.Y = \"a\";"),
    ("vcl_recv", "set req.http.X = \"a\";;"),
    ("vcl_recv", "if (req.http.Y ~ \"a\" ~ \"b\") { }"),
    ("vcl_recv", "if (1) { }"),
    ("vcl_recv", "if (req.restarts !~ \"1\") { }"),
    ("vcl_recv", "std.rollback(bereq);"),
    (
        "vcl_backend_response",
        "set beresp.storage = storage.nosuch;",
    ),
    ("vcl_backend_response", "set beresp.was_304 = true;"),
    ("vcl_backend_response", "return (pass(1));"),
    ("vcl_backend_response", "return (error(\"x\"));"),
    ("vcl_backend_fetch", "unset bereq.body;"),
    ("vcl_deliver", "set resp.body = \"x\";"),
    ("vcl_deliver", "set resp.http.X = obj.ttl;"),
    ("vcl_hit", "return (miss);"),
    ("vcl_hash", "hash_data(req.url, req.http.host);"),
    ("vcl_purge", "return (purge);"),
];

/// Statements that drive a request or fetch down an error branch: a status
/// VCL may not set (below 100, above 999 in a response line, above 65535),
/// a restart or retry loop past `max_restarts`/`max_retries`, a workspace
/// exhausted or flagged overflowed (`vtc.workspace_alloc`,
/// `vtc.workspace_overflow`; the scenario then imports `vtc`), a string
/// built past the workspace.
const FAILURES: &[(&str, &str)] = &[
    ("vcl_recv", "return (synth(1000));"),
    ("vcl_recv", "return (synth(1404, \"Big\"));"),
    ("vcl_recv", "return (synth(65536));"),
    ("vcl_recv", "return (synth(100));"),
    ("vcl_recv", "return (synth(-1));"),
    ("vcl_deliver", "set resp.status = 1000;"),
    ("vcl_deliver", "set resp.status = 1299;"),
    ("vcl_deliver", "set resp.status = 100;"),
    ("vcl_deliver", "set resp.status = 65536;"),
    ("vcl_deliver", "return (restart);"),
    ("vcl_synth", "set resp.status = 1000;"),
    ("vcl_synth", "set resp.status = 99;"),
    ("vcl_synth", "return (restart);"),
    ("vcl_miss", "return (restart);"),
    ("vcl_backend_response", "set beresp.status = 99;"),
    ("vcl_backend_response", "set beresp.status = 1302;"),
    ("vcl_backend_response", "set beresp.status = 65536;"),
    ("vcl_backend_response", "return (retry);"),
    ("vcl_backend_error", "return (retry);"),
    ("vcl_backend_fetch", "return (error(1000));"),
    ("vcl_backend_fetch", "return (error(99));"),
    ("vcl_recv", "vtc.workspace_alloc(client, -10);"),
    ("vcl_recv", "vtc.workspace_alloc(client, -300);"),
    ("vcl_hash", "vtc.workspace_alloc(client, -10);"),
    ("vcl_deliver", "vtc.workspace_alloc(client, -10);"),
    ("vcl_deliver", "vtc.workspace_alloc(client, -300);"),
    ("vcl_synth", "vtc.workspace_alloc(client, -10);"),
    ("vcl_backend_fetch", "vtc.workspace_alloc(backend, -10);"),
    ("vcl_backend_response", "vtc.workspace_alloc(backend, -10);"),
    ("vcl_backend_error", "vtc.workspace_alloc(backend, -10);"),
    ("vcl_recv", "vtc.workspace_overflow(client);"),
    ("vcl_deliver", "vtc.workspace_overflow(client);"),
    ("vcl_synth", "vtc.workspace_overflow(client);"),
    ("vcl_backend_fetch", "vtc.workspace_overflow(backend);"),
    ("vcl_backend_response", "vtc.workspace_overflow(backend);"),
    ("vcl_backend_error", "vtc.workspace_overflow(backend);"),
    (
        "vcl_recv",
        "set req.http.X-Big = regsuball(\"0123456789abcdef\", \".\", \"0123456789abcdef0123456789abcdef0123456789abcdef\");\nset req.http.X-Big = req.http.X-Big + req.http.X-Big + req.http.X-Big + req.http.X-Big;\nset req.http.X-Big = req.http.X-Big + req.http.X-Big + req.http.X-Big + req.http.X-Big;\nset req.http.X-Big = req.http.X-Big + req.http.X-Big + req.http.X-Big + req.http.X-Big;",
    ),
];

const SUBS: &[&str] = &[
    "vcl_recv",
    "vcl_hash",
    "vcl_hit",
    "vcl_miss",
    "vcl_pass",
    "vcl_pipe",
    "vcl_purge",
    "vcl_deliver",
    "vcl_synth",
    "vcl_backend_fetch",
    "vcl_backend_response",
    "vcl_backend_error",
];

fn cond(r: &mut Rng, sub: &str) -> &'static str {
    let pool = if sub.starts_with("vcl_backend_response") && r.chance(50) {
        RESP_CONDS
    } else if sub.starts_with("vcl_backend") {
        BACKEND_CONDS
    } else {
        CLIENT_CONDS
    };
    pool[r.below(pool.len())]
}

fn gen_sub(r: &mut Rng, sub: &str) -> Vec<String> {
    let mut body = Vec::new();
    let pool = statements(sub);
    let n = r.below(4);
    for _ in 0..n {
        let st = r.pick(pool).to_string();
        if r.chance(30) {
            body.push(format!("if ({}) {{\n  {st}\n}}", cond(r, sub)));
        } else {
            body.push(st);
        }
    }
    let rets = returns(sub);
    if r.chance(35) {
        let ret = r.pick(rets);
        if r.chance(60) {
            body.push(format!("if ({}) {{\n  return ({ret});\n}}", cond(r, sub)));
        } else {
            body.push(format!("return ({ret});"));
        }
    }
    body
}

fn gen_vcl(r: &mut Rng) -> (Vec<(String, Vec<String>)>, Vec<String>) {
    let mut subs = Vec::new();
    let k = 1 + r.below(5);
    for _ in 0..k {
        let s = *r.pick(SUBS);
        if subs.iter().any(|(n, _): &(String, Vec<String>)| n == s) {
            continue;
        }
        let b = gen_sub(r, s);
        if !b.is_empty() {
            subs.push((s.to_string(), b));
        }
    }
    if r.chance(6) {
        let (s, st) = *r.pick(EDGE);
        match subs.iter_mut().find(|(n, _)| n == s) {
            Some((_, b)) => b.insert(0, st.to_string()),
            None => subs.push((s.to_string(), vec![st.to_string()])),
        }
    }
    if r.chance(8) {
        let (s, st) = *r.pick(INVALID);
        match subs.iter_mut().find(|(n, _)| n == s) {
            Some((_, b)) => b.insert(0, st.to_string()),
            None => subs.push((s.to_string(), vec![st.to_string()])),
        }
    }
    let mut decls = Vec::new();
    if r.chance(20) {
        let (s, st) = *r.pick(FAILURES);
        let st = if r.chance(40) {
            format!("if ({}) {{\n  {st}\n}}", cond(r, s))
        } else {
            st.to_string()
        };
        if st.contains("vtc.") {
            decls.push("import vtc;".to_string());
        }
        match subs.iter_mut().find(|(n, _)| n == s) {
            Some((_, b)) => b.insert(0, st),
            None => subs.push((s.to_string(), vec![st])),
        }
    }
    (subs, decls)
}

const CACHE_CONTROL: &[&str] = &[
    "max-age=60",
    "max-age=0",
    "s-maxage=30, max-age=0",
    "no-cache",
    "no-store",
    "private",
    "max-age=60, stale-while-revalidate=10",
    "must-revalidate, max-age=1",
    "max-age=abc",
];

/// Malformed backend responses. Ambiguous framing (two lengths, a length
/// with chunking) is left out: Lacquer fails such a fetch on purpose
/// (tests/diff/DEVIATIONS.md).
const RAW_RESPONSES: &[&str] = &[
    "HTTP/1.1 abc OK\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nBad header line\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 099 Low\r\nContent-Length: 2\r\n\r\nok",
    "garbage\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
    "HTTP/1.0 200 OK\r\n\r\nhttp10 body",
    "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 5\r\n\r\nnotgz",
    "",
    "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA",
    "HTTP/1.1 304 Not Modified\r\nETag: \"e1\"\r\n\r\n",
    "HTTP/1.1 1000 Big\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n folded\r\n\r\nok",
];

const BODIES: &[&str] = &[
    "hello world, this is the body",
    "",
    "x",
    "0123456789abcdefghijklmnopqrstuvwxyz0123456789",
    "<html><esi:include src=\"/inc\"/> after</html>",
    "a<esi:include src=\"/inc\"/>b<esi:remove>gone</esi:remove>c<!--esi d-->",
    "<esi:include src=\"/missing\"/>x",
    "<esi:include src=\"/inc\" onerror=\"continue\"/>",
    "<esi:bogus/>text",
    "<esi:include src=\"/a\"/>|<esi:include src=\"/inc\"/>|<esi:include src=\"/inc\"/>",
    "x<esi:include src=\"/esi\"/>y",
    "<esi:include src=\"http://test/inc\"/><esi:comment text=\"c\"/>",
];

fn gen_resp(r: &mut Rng, url: &str) -> BeResp {
    if r.chance(6) {
        return BeResp::raw(url, r.pick(RAW_RESPONSES).to_string());
    }
    let status = *r.pick(&[
        200, 200, 200, 200, 200, 201, 204, 206, 301, 304, 404, 500, 503,
    ]);
    let reason = match status {
        200 => *r.pick(&["OK", "OK", "Fine"]),
        204 => "No Content",
        304 => "Not Modified",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Other",
    }
    .to_string();
    let mut headers = Vec::new();
    if r.chance(50) {
        headers.push(("Cache-Control".into(), r.pick(CACHE_CONTROL).to_string()));
    }
    if r.chance(40) {
        headers.push((
            "ETag".into(),
            r.pick(&["\"e1\"", "W/\"w1\"", "\"e2\""]).to_string(),
        ));
    }
    if r.chance(25) {
        headers.push((
            "Last-Modified".into(),
            "Tue, 01 Jan 2030 00:00:00 GMT".into(),
        ));
    }
    if r.chance(15) {
        headers.push((
            "Vary".into(),
            r.pick(&["Accept-Encoding", "X-T", "*"]).to_string(),
        ));
    }
    if r.chance(10) {
        headers.push(("Set-Cookie".into(), "s=1".into()));
    }
    if r.chance(10) {
        headers.push(("Expires".into(), "Thu, 01 Jan 1970 00:00:00 GMT".into()));
    }
    if r.chance(10) {
        headers.push(("Connection".into(), "close".into()));
    }
    if r.chance(8) {
        headers.push(("Content-Range".into(), "bytes 0-1/10".into()));
    }
    if r.chance(8) {
        headers.push(("Accept-Ranges".into(), "none".into()));
    }
    if r.chance(8) {
        headers.push(("Surrogate-Control".into(), "content=\"ESI/1.0\"".into()));
    }
    if r.chance(8) {
        headers.push(("Age".into(), r.pick(&["30", "100", "x"]).to_string()));
    }
    if r.chance(10) {
        // Hop-by-hop and varnish-owned fields: which reach the client.
        let (k, v) = *r.pick(&[
            ("Keep-Alive", "timeout=5"),
            ("Connection", "X-Drop"),
            ("Upgrade", "foo"),
            ("Trailer", "X-Tr"),
            ("Proxy-Authenticate", "Basic"),
            ("Via", "1.1 upstream"),
            ("X-Varnish", "1234"),
            ("Accept-Ranges", "bytes"),
        ]);
        headers.push((k.into(), v.into()));
        if v == "X-Drop" {
            headers.push(("X-Drop".into(), "1".into()));
        }
    }
    if r.chance(60) {
        headers.push(("Content-Type".into(), "text/html".into()));
    }
    let body = if url == "/inc" {
        r.pick(&["INC", "included text", ""]).to_string()
    } else if url == "/esi" {
        r.pick(&BODIES[4..]).to_string()
    } else {
        r.pick(BODIES).to_string()
    };
    let framing = if matches!(status, 204 | 304) {
        Framing::None
    } else {
        *r.pick(&[
            Framing::Length,
            Framing::Length,
            Framing::Chunked,
            Framing::Chunked,
            Framing::Close,
        ])
    };
    BeResp {
        url: url.into(),
        status,
        reason,
        headers,
        body,
        gzip: framing != Framing::None && r.chance(25),
        framing,
        delay_ms: if r.chance(3) {
            2600
        } else if r.chance(5) {
            30
        } else {
            0
        },
        stall_ms: if r.chance(2) { 2600 } else { 0 },
        truncate: framing != Framing::None && r.chance(4),
        raw: None,
    }
}

const HOSTILE: &[&str] = &[
    "GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost x\r\n\r\n",
    "GET  /a HTTP/1.1\r\nHost: x\r\n\r\n",
    "GET /a HTTP/1.1\nHost: x\n\n",
    "GET /a HTTP/9.9\r\nHost: x\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    "GET /a\r\n\r\n",
    "GET a HTTP/1.1\r\nHost: x\r\n\r\n",
    "GET http://x/a HTTP/1.1\r\nHost: x\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: x\r\nX-F: a\r\n b\r\n\r\n",
    "\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n",
    "get /a HTTP/1.1\r\nHost: x\r\n\r\n",
    "GET /a HTTP/1.0\r\n\r\n",
    "GET /a HTTP/1.1\r\n\r\n",
    "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\nbody",
    "POST /a HTTP/1.1\r\nHost: x\r\nExpect: 101-whatever\r\nContent-Length: 0\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab",
    "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: x\r\n: empty\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
];

const RANGES: &[&str] = &[
    "bytes=0-3",
    "bytes=5-",
    "bytes=-3",
    "bytes=10-2",
    "bytes=0-0,2-3",
    "bytes=100-200",
    "bytes=0-",
    "bytes=-0",
    "items=0-1",
    "bytes=a-b",
    "bytes=0-1000",
    "bytes=3-3",
    "bytes=0-1,0-1",
    "bytes= 0-3",
    "bytes=0-3 ",
    "bytes=1-2,",
    "bytes=-",
    "bytes=00-03",
    "bytes=4-3",
    "bytes=0-3, 5-6",
    "Bytes=0-3",
];

fn gen_request(r: &mut Rng) -> String {
    if r.chance(8) {
        return r.pick(HOSTILE).to_string();
    }
    let method = *r.pick(&["GET", "GET", "GET", "GET", "HEAD", "POST", "PURGE", "PUT"]);
    let url = *r.pick(URLS);
    let proto = if r.chance(8) { "HTTP/1.0" } else { "HTTP/1.1" };
    let mut s = format!("{method} {url} {proto}\r\nHost: test\r\n");
    if r.chance(40) {
        s.push_str("Accept-Encoding: gzip\r\n");
    }
    if r.chance(25) {
        s.push_str(&format!("Range: {}\r\n", r.pick(RANGES)));
    }
    if r.chance(15) {
        s.push_str(&format!(
            "If-None-Match: {}\r\n",
            r.pick(&["\"e1\"", "W/\"e1\"", "*", "\"nope\"", "\"e1\", \"e2\""])
        ));
    }
    if r.chance(10) {
        s.push_str("If-Modified-Since: Tue, 01 Jan 2030 00:00:00 GMT\r\n");
    }
    if r.chance(10) {
        s.push_str("If-Range: \"e1\"\r\n");
    }
    if r.chance(15) {
        s.push_str("X-T: 1\r\n");
    }
    if r.chance(10) {
        s.push_str("Cookie: c=1\r\n");
    }
    if r.chance(8) {
        s.push_str("Connection: close\r\n");
    } else if proto == "HTTP/1.0" && r.chance(40) {
        s.push_str("Connection: keep-alive\r\n");
    }
    if r.chance(5) {
        s.push_str("Cache-Control: no-cache\r\n");
    }
    if method == "POST" || method == "PUT" {
        s.push_str("Content-Length: 4\r\n\r\nbody");
    } else {
        s.push_str("\r\n");
    }
    s
}

/// The scenario for `seed`.
pub fn scenario(seed: u64) -> Scenario {
    let mut r = Rng::new(seed);
    let (subs, decls) = gen_vcl(&mut r);
    let mut backend = Vec::new();
    for url in ["/a", "/b", "/inc", "/esi", "*"] {
        let n = if url == "*" { 1 } else { r.below(3) };
        for _ in 0..n {
            backend.push(gen_resp(&mut r, url));
        }
    }
    let mut steps = Vec::new();
    let n = 1 + r.below(4);
    let mut conn = 0;
    for i in 0..n {
        if i > 0 && r.chance(25) {
            conn += 1;
        }
        steps.push(Step {
            conn,
            raw: gen_request(&mut r),
            pipeline: false,
            close_early: r.chance(4),
            // Past a 1 s TTL: grace, keep, background fetches and
            // conditional refreshes of what the earlier steps stored.
            wait_ms: if i > 0 && r.chance(10) { 1100 } else { 0 },
        });
    }
    // Pipelining: flag a step whose successor shares its connection.
    for i in 0..steps.len().saturating_sub(1) {
        if steps[i].conn == steps[i + 1].conn && !steps[i].close_early && r.chance(15) {
            steps[i].pipeline = true;
        }
    }
    let mut sc = Scenario {
        seed,
        subs,
        backend,
        steps,
        backend_attrs: Vec::new(),
        decls,
        params: Vec::new(),
    };
    crate::axes::widen(&mut sc);
    crate::cond::family(&mut sc);
    sc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_makes_the_same_scenario() {
        for s in 0..50 {
            assert_eq!(scenario(s), scenario(s));
        }
        assert_ne!(scenario(1), scenario(2));
    }

    #[test]
    fn failure_statements_name_known_subroutines_and_import_vtc() {
        for (s, _) in FAILURES {
            assert!(SUBS.contains(s), "{s}");
        }
        let with_vtc = (0..2000)
            .map(scenario)
            .filter(|sc| sc.vcl(1).contains("vtc."))
            .collect::<Vec<_>>();
        assert!(!with_vtc.is_empty());
        for sc in with_vtc {
            assert!(sc.decls.iter().any(|d| d == "import vtc;"), "{}", sc.seed);
        }
    }

    #[test]
    fn every_subroutine_has_returns_and_statements() {
        for s in SUBS {
            assert!(!returns(s).is_empty(), "{s}");
            assert!(!statements(s).is_empty(), "{s}");
        }
    }
}
