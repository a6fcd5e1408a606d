//! Scenario families for the delivery edge cases the base grammar and
//! [`crate::axes`] reach only by accident: conditional requests from the
//! client (`If-None-Match` strong, weak, lists and `*`; `If-Modified-Since`
//! before, equal to, after the object's date, in the future or unparsable;
//! both together) on hits, misses, passes, synthetic, ESI and gzip objects
//! (the weak-ETag rule of a body gunzipped at delivery), `Range` with
//! `If-Range`; backend revalidation of an object kept past its TTL (the
//! `If-None-Match`/`If-Modified-Since` of the backend request, a 304
//! merged into the stale object, a 304 with new headers, another ETag or a
//! body, a 200 instead, `beresp.was_304`); TTL, grace and keep from
//! `Cache-Control`, `Expires` and `Age` (parse errors too), as VCL reads
//! them in `vcl_backend_response` and `vcl_hit`, stale hits with
//! background fetches and `req.grace`; ranges on every kind of object
//! (ESI, gzip, pass, chunked, close-delimited; several ranges, suffixes,
//! bad syntax, out of bounds, `http_range_support` off) asked by GET and
//! HEAD; and the filter lists (`beresp.filters`, `resp.filters` read and
//! set, valid and not), the ESI `feature` flags, `Accept-Encoding` forms and
//! `http_gzip_support` off; Vary naming one header or several, in
//! several spellings, against request headers spelt in several ways.
//!
//! A family replaces a quarter of the generated scenarios whole (drawn
//! from its own random stream for the seed), so a batch mixes them with
//! the base grammar without making a batch longer: a family scenario has
//! two to four requests, at most one pause of half a second and one of
//! a tenth.

use crate::rng::Rng;
use crate::scenario::{BeResp, Framing, Scenario, Step};

/// The object's `Last-Modified`, and dates around it.
const LM: &str = "Sat, 01 Jan 2000 00:00:00 GMT";

const IMS: &[&str] = &[
    "Fri, 31 Dec 1999 23:59:59 GMT",
    LM,
    LM,
    "Mon, 01 Jan 2001 00:00:00 GMT",
    "Tue, 01 Jan 2030 00:00:00 GMT",
    "yesterday",
    "Sat, 01 Jan 2000 00:00:00",
    "Saturday, 01-Jan-00 00:00:00 GMT",
    "Sat Jan  1 00:00:00 2000",
    "",
];

const INM: &[&str] = &[
    "\"e1\"",
    "\"e1\"",
    "W/\"e1\"",
    "*",
    "\"x\", \"e1\"",
    "\"x\",\"e1\"",
    "\"x\"",
    "W/\"x\", W/\"e1\"",
    "e1",
    "\"e2\"",
    "",
];

const IF_RANGE: &[&str] = &[
    "\"e1\"",
    "W/\"e1\"",
    "\"x\"",
    LM,
    "Mon, 01 Jan 2001 00:00:00 GMT",
];

const RANGES: &[&str] = &[
    "bytes=0-4",
    "bytes=-5",
    "bytes=5-",
    "bytes=0-0,3-4",
    "bytes=15-100",
    "bytes=100-",
    "bytes=-100",
    "bytes=5-2",
    "bytes=abc",
    "bytes=0-4,",
    "bytes=",
    "bytes=-0",
    "bytes=19-19",
    "bytes=20-",
    "bytes=0--1",
    "bytes=0-4 ",
    "bytes=0-99999999999999999999",
];

const ACCEPT_ENCODING: &[&str] = &[
    "gzip",
    "gzip",
    "deflate",
    "gzip;q=0",
    "x-gzip",
    "GZIP",
    "br, gzip",
    "identity",
    "gzip, deflate;q=0.5",
];

/// 20 bytes, so ranges can fall inside, on and past its end.
const BODY: &str = "0123456789abcdefghij";

/// An ESI page of 20 bytes once its include is in.
const ESI_BODY: &str = "01234<esi:include src=\"/inc\"/>fghij";

/// The kinds of object a request meets.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Plain,
    Chunked,
    CloseDelimited,
    BackendGzip,
    VclGzip,
    Esi,
    EsiGzip,
    Pass,
    Synth,
}

const KINDS: &[Kind] = &[
    Kind::Plain,
    Kind::Plain,
    Kind::Chunked,
    Kind::CloseDelimited,
    Kind::BackendGzip,
    Kind::VclGzip,
    Kind::Esi,
    Kind::EsiGzip,
    Kind::Pass,
    Kind::Synth,
];

fn resp(url: &str, status: u16, headers: Vec<(String, String)>, body: &str) -> BeResp {
    BeResp {
        url: url.into(),
        status,
        reason: match status {
            200 => "OK",
            304 => "Not Modified",
            404 => "Not Found",
            _ => "Other",
        }
        .into(),
        headers,
        body: body.into(),
        gzip: false,
        framing: if matches!(status, 204 | 304) {
            Framing::None
        } else {
            Framing::Length
        },
        delay_ms: 0,
        stall_ms: 0,
        truncate: false,
        raw: None,
    }
}

/// One of `xs`.
fn pk<'a>(r: &mut Rng, xs: &[&'a str]) -> &'a str {
    xs[r.below(xs.len())]
}

fn h(n: &str, v: &str) -> (String, String) {
    (n.to_string(), v.to_string())
}

/// Adds `st` to subroutine `sub` (after what is there).
fn add(sc: &mut Scenario, sub: &str, st: &str) {
    match sc.subs.iter_mut().find(|(n, _)| n == sub) {
        Some((_, b)) => b.push(st.to_string()),
        None => sc.subs.push((sub.to_string(), vec![st.to_string()])),
    }
}

fn step(raw: String) -> Step {
    Step {
        conn: 0,
        raw,
        pipeline: false,
        close_early: false,
        wait_ms: 0,
    }
}

/// A request for `url` with `extra` header lines.
fn request(method: &str, url: &str, extra: &[String]) -> String {
    let mut s = format!("{method} {url} HTTP/1.1\r\nHost: test\r\n");
    for e in extra {
        s.push_str(e);
        s.push_str("\r\n");
    }
    s.push_str("\r\n");
    s
}

/// Validators of the object: an ETag (strong, weak or none) and now and
/// then a `Last-Modified`.
fn validators(r: &mut Rng) -> Vec<(String, String)> {
    let mut v = Vec::new();
    match r.below(4) {
        0 | 1 => v.push(h("ETag", "\"e1\"")),
        2 => v.push(h("ETag", "W/\"e1\"")),
        _ => {}
    }
    if r.chance(50) {
        v.push(h("Last-Modified", LM));
    }
    v
}

/// Scripts an object of `kind` at `/a` (and `/inc` for ESI) with the
/// validators given; returns nothing, the scenario carries it all.
fn object(sc: &mut Scenario, r: &mut Rng, kind: Kind, mut hdrs: Vec<(String, String)>) {
    hdrs.push(h("Content-Type", "text/html"));
    let body = if matches!(kind, Kind::Esi | Kind::EsiGzip) {
        ESI_BODY
    } else {
        BODY
    };
    let mut a = resp("/a", 200, hdrs, body);
    match kind {
        Kind::Chunked => a.framing = Framing::Chunked,
        Kind::CloseDelimited => a.framing = Framing::Close,
        Kind::BackendGzip => a.gzip = true,
        Kind::VclGzip => add(sc, "vcl_backend_response", "set beresp.do_gzip = true;"),
        Kind::Esi => add(sc, "vcl_backend_response", "set beresp.do_esi = true;"),
        Kind::EsiGzip => {
            add(sc, "vcl_backend_response", "set beresp.do_esi = true;");
            add(sc, "vcl_backend_response", "set beresp.do_gzip = true;");
        }
        Kind::Pass => add(sc, "vcl_recv", "return (pass);"),
        Kind::Synth => {
            add(sc, "vcl_recv", "return (synth(200, \"S\"));");
            for (n, v) in &a.headers {
                if n != "Content-Type" {
                    add(
                        sc,
                        "vcl_synth",
                        &format!("set resp.http.{n} = {};", vcl_string(v)),
                    );
                }
            }
            add(sc, "vcl_synth", &format!("synthetic(\"{BODY}\");"));
            add(sc, "vcl_synth", "return (deliver);");
        }
        Kind::Plain => {}
    }
    if r.chance(20) && kind != Kind::Synth {
        // A second copy for the second fetch (pass, or a refetch).
        let b = a.clone();
        sc.backend.push(a);
        sc.backend.push(b);
    } else {
        sc.backend.push(a);
    }
    sc.backend.push(resp("/inc", 200, vec![], "56789abcde"));
}

/// A VCL string literal for `v` (long-string form when it has quotes).
fn vcl_string(v: &str) -> String {
    if v.contains('"') {
        format!("{{\"{v}\"}}")
    } else {
        format!("\"{v}\"")
    }
}

/// Conditional header lines, one kind or both; `Range` with `If-Range`
/// only when `ranged` (not on a miss: whether a Range applies to a body
/// still being fetched is a race in varnishd, DEVIATIONS.md).
fn conditionals(r: &mut Rng, ranged: bool) -> Vec<String> {
    let mut c = Vec::new();
    match r.below(if ranged { 4 } else { 3 }) {
        0 => c.push(format!("If-None-Match: {}", pk(r, INM))),
        1 => c.push(format!("If-Modified-Since: {}", pk(r, IMS))),
        2 => {
            c.push(format!("If-None-Match: {}", pk(r, INM)));
            c.push(format!("If-Modified-Since: {}", pk(r, IMS)));
        }
        _ => {
            c.push(format!("Range: {}", pk(r, RANGES)));
            c.push(format!("If-Range: {}", pk(r, IF_RANGE)));
        }
    }
    if r.chance(40) {
        c.push(format!("Accept-Encoding: {}", pk(r, ACCEPT_ENCODING)));
    }
    c
}

/// What delivery may change on the way out.
const DELIVER_TWEAKS: &[&str] = &[
    "unset resp.http.ETag;",
    "set resp.http.ETag = {\"\"e1\"\"};",
    "set resp.http.ETag = {\"W/\"e1\"\"};",
    "unset resp.http.Last-Modified;",
    "set resp.http.Last-Modified = \"Sat, 01 Jan 2000 00:00:00 GMT\";",
    "set resp.status = 203;",
    "set resp.http.X-F = \"[\" + resp.filters + \"]\";",
    "set resp.filters = \"\";",
    "set resp.filters = \"gunzip\";",
    "set resp.filters = \"range\";",
    "set resp.do_esi = false;",
    "set resp.http.X-Obj-Hits = obj.hits;",
];

/// Client conditionals on hits, misses, passes and synthetic responses.
fn client_cond(sc: &mut Scenario, r: &mut Rng) {
    let kind = *r.pick(KINDS);
    let v = validators(r);
    object(sc, r, kind, v);
    if r.chance(50) {
        add(sc, "vcl_deliver", pk(r, DELIVER_TWEAKS));
    }
    if r.chance(15) {
        sc.params
            .push(("feature".into(), "+http_date_postel".into()));
    }
    let n = 2 + r.below(3);
    for i in 0..n {
        let method = if r.chance(20) { "HEAD" } else { "GET" };
        let extra = if i == 0 && r.chance(50) {
            vec![]
        } else {
            conditionals(r, i > 0 && kind != Kind::Pass)
        };
        sc.steps.push(step(request(method, "/a", &extra)));
    }
}

/// A 304 (or something else) answering the revalidation of `/a`.
fn second_answer(r: &mut Rng) -> BeResp {
    match r.below(8) {
        0 => resp("/a", 304, vec![h("ETag", "\"e1\"")], ""),
        1 => resp(
            "/a",
            304,
            vec![
                h("ETag", "\"e1\""),
                h("X-New", "1"),
                h("Cache-Control", "max-age=60"),
            ],
            "",
        ),
        2 => resp("/a", 304, vec![h("ETag", "\"e2\""), h("X-New", "2")], ""),
        3 => resp(
            "/a",
            304,
            vec![h("Content-Type", "text/plain"), h("Last-Modified", LM)],
            "",
        ),
        4 => resp("/a", 200, vec![h("ETag", "\"e3\"")], "new body"),
        5 => BeResp::raw(
            "/a",
            "HTTP/1.1 304 Not Modified\r\nETag: \"e1\"\r\nContent-Length: 4\r\n\r\nbody".into(),
        ),
        6 => resp(
            "/a",
            304,
            vec![h("ETag", "\"e1\""), h("Content-Encoding", "gzip")],
            "",
        ),
        _ => resp("/a", 304, vec![h("Vary", "X-T"), h("ETag", "\"e1\"")], ""),
    }
}

/// An object kept past its TTL and revalidated with the backend.
fn revalidation(sc: &mut Scenario, r: &mut Rng) {
    let kind = *r.pick(&[
        Kind::Plain,
        Kind::Plain,
        Kind::Chunked,
        Kind::BackendGzip,
        Kind::VclGzip,
        Kind::Esi,
        Kind::EsiGzip,
    ]);
    let mut v = validators(r);
    // Without validators the object is no candidate for revalidation:
    // kept now and then to see the unconditional refetch.
    if v.is_empty() && !r.chance(10) {
        v.insert(0, h("ETag", "\"e1\""));
    }
    object(sc, r, kind, v);
    // One 200 for /a, then the answer to the revalidation.
    let mut seen = false;
    sc.backend.retain(|b| {
        if b.url != "/a" {
            return true;
        }
        let keep = !seen;
        seen = true;
        keep
    });
    let pos = sc.backend.iter().position(|b| b.url == "/a").unwrap_or(0);
    sc.backend.insert(pos + 1, second_answer(r));
    let grace = if r.chance(30) { "10s" } else { "0s" };
    add(
        sc,
        "vcl_backend_response",
        &format!("set beresp.ttl = 0.2s;\nset beresp.grace = {grace};\nset beresp.keep = 10s;"),
    );
    add(
        sc,
        "vcl_backend_response",
        "set beresp.http.X-Was-304 = beresp.was_304;\nset beresp.http.X-Status = beresp.status;",
    );
    if r.chance(25) {
        add(
            sc,
            "vcl_backend_fetch",
            pk(
                r,
                &[
                    "unset bereq.http.If-None-Match;",
                    "unset bereq.http.If-Modified-Since;",
                    "set bereq.http.If-None-Match = {\"\"zz\"\"};",
                ],
            ),
        );
    }
    if r.chance(20) {
        add(
            sc,
            "vcl_backend_response",
            pk(
                r,
                &[
                    "if (beresp.was_304) {\n  set beresp.status = 200;\n}",
                    "if (beresp.was_304) {\n  set beresp.uncacheable = true;\n}",
                    "if (beresp.was_304) {\n  return (retry);\n}",
                    "set beresp.http.ETag = {\"\"e9\"\"};",
                    "unset beresp.http.Content-Encoding;",
                ],
            ),
        );
    }
    let first = if r.chance(30) {
        vec![format!("Accept-Encoding: {}", pk(r, ACCEPT_ENCODING))]
    } else {
        vec![]
    };
    sc.steps.push(step(request("GET", "/a", &first)));
    let mut again = step(request(
        if r.chance(15) { "HEAD" } else { "GET" },
        "/a",
        &if r.chance(40) {
            conditionals(r, false)
        } else {
            vec![]
        },
    ));
    again.wait_ms = 500;
    sc.steps.push(again);
    let extra = if r.chance(50) {
        conditionals(r, true)
    } else {
        vec![]
    };
    // After the background fetch a grace hit started has finished: a
    // request right after the stale delivery races it in varnishd (seed
    // 1006: the stale object or the refreshed one).
    let mut last = step(request("GET", "/a", &extra));
    last.wait_ms = 100;
    sc.steps.push(last);
}

const CACHE_CONTROL: &[&str] = &[
    "max-age=60",
    "s-maxage=30, max-age=10",
    "max-age=0",
    "no-cache",
    "private",
    "no-store",
    "max-age=abc",
    "max-age=-5",
    "max-age=10, stale-while-revalidate=20",
    "s-maxage=abc, max-age=7",
    "public, max-age=7",
    "must-revalidate",
    "max-age=99999999999999999999",
    "MAX-AGE=30",
    "max-age = 30",
    "max-age=\"30\"",
    "s-maxage=0, max-age=60",
    "max-age=20, stale-if-error=5",
];

const STATUSES: &[u16] = &[
    200, 200, 200, 203, 204, 300, 301, 302, 307, 404, 410, 414, 500, 503,
];

/// TTL, grace and keep from the response's headers, as VCL sees them.
fn ttl_grace(sc: &mut Scenario, r: &mut Rng) {
    let status = *r.pick(STATUSES);
    let mut hdrs = Vec::new();
    let mut exact = true;
    if r.chance(75) {
        hdrs.push(h("Cache-Control", pk(r, CACHE_CONTROL)));
    }
    // A Date far from the clock makes Expires count from it (clock skew).
    let dated = r.chance(30);
    if dated {
        hdrs.push(h(
            "Date",
            pk(r, &[LM, LM, "Sat, 01 Jan 2000 00:00:00", "garbage"]),
        ));
    }
    if r.chance(if dated { 70 } else { 25 }) {
        let e = *r.pick(&[
            "Thu, 01 Jan 1970 00:00:00 GMT",
            "Tue, 01 Jan 2030 00:00:00 GMT",
            "0",
            "never",
            "Sat, 01 Jan 2000 00:01:40 GMT",
            "Sat, 01 Jan 2000 00:00:00 GMT",
            "Saturday, 01-Jan-00 00:01:40 GMT",
        ]);
        // A future date gives a TTL that depends on the clock, and so
        // does any date without a Date from the backend to count from.
        exact &= e != "Tue, 01 Jan 2030 00:00:00 GMT" && (dated || !e.starts_with("Sat"));
        hdrs.push(h("Expires", e));
    }
    if r.chance(25) {
        hdrs.push(h("Age", pk(r, &["5", "100", "x", "-3", "5, 6"])));
    }
    hdrs.push(h("ETag", "\"e1\""));
    let mut a = resp("/a", status, hdrs, BODY);
    if status == 204 {
        a.body.clear();
        a.framing = Framing::None;
    }
    sc.backend.push(a.clone());
    sc.backend.push(a);
    if exact {
        add(
            sc,
            "vcl_backend_response",
            "set beresp.http.X-TTL = beresp.ttl;",
        );
    }
    add(
        sc,
        "vcl_backend_response",
        "if (beresp.ttl > 1000000s) {\n  set beresp.http.X-TTL-Class = \"long\";\n} elsif (beresp.ttl > 0s) {\n  set beresp.http.X-TTL-Class = \"short\";\n} else {\n  set beresp.http.X-TTL-Class = \"none\";\n}",
    );
    add(
        sc,
        "vcl_backend_response",
        "set beresp.http.X-Grace = beresp.grace;\nset beresp.http.X-Keep = beresp.keep;\nset beresp.http.X-Unc = beresp.uncacheable;",
    );
    if r.chance(40) {
        add(
            sc,
            "vcl_backend_response",
            pk(
                r,
                &[
                    "set beresp.ttl = 0.2s;\nset beresp.grace = 10s;",
                    "set beresp.ttl = 0.2s;\nset beresp.grace = 0s;",
                    "set beresp.ttl = 0.2s;\nset beresp.grace = 0s;\nset beresp.keep = 10s;",
                    "set beresp.grace = -1s;",
                    "set beresp.keep = -1s;",
                ],
            ),
        );
    }
    add(
        sc,
        "vcl_hit",
        "set req.http.X-Fresh = obj.ttl > 0s;\nset req.http.X-OGrace = obj.grace;\nset req.http.X-OKeep = obj.keep;\nset req.http.X-OHits = obj.hits;",
    );
    add(
        sc,
        "vcl_deliver",
        "set resp.http.X-Fresh = req.http.X-Fresh;\nset resp.http.X-OGrace = req.http.X-OGrace;\nset resp.http.X-OKeep = req.http.X-OKeep;\nset resp.http.X-OHits = req.http.X-OHits;",
    );
    if r.chance(30) {
        add(
            sc,
            "vcl_recv",
            pk(
                r,
                &[
                    "set req.grace = 0s;",
                    "set req.grace = 100s;",
                    "set req.ttl = 0.1s;",
                ],
            ),
        );
    }
    if r.chance(20) {
        add(
            sc,
            "vcl_hit",
            pk(
                r,
                &[
                    "if (obj.ttl <= 0s) {\n  return (pass);\n}",
                    "if (obj.ttl + obj.grace > 0s) {\n  return (deliver);\n}",
                    "if (obj.ttl <= 0s) {\n  return (synth(299, \"Stale\"));\n}",
                ],
            ),
        );
    }
    sc.steps.push(step(request("GET", "/a", &[])));
    let mut second = step(request("GET", "/a", &[]));
    if r.chance(50) {
        second.wait_ms = 500;
    }
    sc.steps.push(second);
    if r.chance(60) {
        let mut last = step(request("GET", "/a", &[]));
        last.wait_ms = 100;
        sc.steps.push(last);
    }
}

/// Ranges (and HEAD) on every kind of object.
fn ranges(sc: &mut Scenario, r: &mut Rng) {
    let kind = *r.pick(KINDS);
    let v = validators(r);
    object(sc, r, kind, v);
    if r.chance(20) {
        sc.params.push(("http_range_support".into(), "off".into()));
    }
    if r.chance(20) {
        add(
            sc,
            "vcl_deliver",
            pk(
                r,
                &[
                    "set resp.http.X-F = \"[\" + resp.filters + \"]\";",
                    "set resp.filters = \"range\";",
                    "set resp.filters = \"\";",
                    "unset resp.http.Accept-Ranges;",
                    "set resp.http.Content-Length = \"5\";",
                    "set resp.status = 206;",
                ],
            ),
        );
    }
    let n = 2 + r.below(3);
    for i in 0..n {
        let method = if r.chance(25) { "HEAD" } else { "GET" };
        let mut extra = vec![];
        if i > 0 && (kind != Kind::Pass || r.chance(50)) {
            extra.push(format!("Range: {}", pk(r, RANGES)));
        }
        if r.chance(35) {
            extra.push(format!("Accept-Encoding: {}", pk(r, ACCEPT_ENCODING)));
        }
        if r.chance(15) {
            extra.push(format!("If-Range: {}", pk(r, IF_RANGE)));
        }
        sc.steps.push(step(request(method, "/a", &extra)));
    }
}

const BERESP_FILTERS: &[&str] = &[
    "esi",
    "gzip",
    "gunzip",
    "testgunzip",
    "esi gzip",
    "gunzip esi",
    "esi gunzip",
    "esi esi",
    "bogus",
    "",
    " esi ",
    "esi,gzip",
    "gzip gunzip",
    "range",
    "gunzip gzip",
];

/// Delivery filter lists VCL sets (`gunzip` on a plain body fails the
/// delivery in varnishd: seeds 1030, 1124, 2079).
const RESP_FILTERS: &[&str] = &[
    "gunzip",
    "esi",
    "range",
    "gunzip range",
    "bogus",
    "",
    "gzip",
    "esi gunzip",
    "range esi",
];

const ESI_BODIES: &[&str] = &[
    ESI_BODY,
    "plain <esi:include src=\"/inc\"/> text",
    "<p><![CDATA[<esi:include src=\"/inc\"/>]]></p>",
    "<p><esi:remove>gone</esi:remove><!--esi <esi:include src=\"/inc\"/> --></p>",
    "<p><esi:bogus/><esi:include src=\"/inc\"></p>",
    "<p><esi:include src=\"/inc\" alt=\"/b\"/></p>",
    "\u{feff}<p><esi:include src=\"/inc\"/></p>",
    "<p><esi:include src=\"https://test/inc\"/></p>",
    "<p><esi:include src=\"/nope\" onerror=\"continue\"/>x</p>",
];

/// Fetch and delivery filter lists, the ESI features, gzip support.
fn filters(sc: &mut Scenario, r: &mut Rng) {
    let mut a = resp(
        "/a",
        200,
        vec![h("Content-Type", "text/html"), h("ETag", "\"e1\"")],
        pk(r, ESI_BODIES),
    );
    a.gzip = r.chance(30);
    if r.chance(25) {
        a.framing = Framing::Chunked;
    }
    sc.backend.push(a);
    sc.backend.push(resp("/inc", 200, vec![], "INC"));
    let pre = *r.pick(&[
        "",
        "set beresp.do_esi = true;",
        "set beresp.do_gzip = true;",
        "set beresp.do_gunzip = true;",
        "set beresp.do_esi = true;\nset beresp.do_gzip = true;",
    ]);
    // Unstreamed: what a streaming miss delivers (with or without the
    // ESI instructions not yet made) is a race in varnishd.
    add(sc, "vcl_backend_response", "set beresp.do_stream = false;");
    if !pre.is_empty() {
        add(sc, "vcl_backend_response", pre);
    }
    add(
        sc,
        "vcl_backend_response",
        "set beresp.http.X-F0 = \"[\" + beresp.filters + \"]\";",
    );
    if r.chance(60) {
        add(
            sc,
            "vcl_backend_response",
            &format!("set beresp.filters = \"{}\";", pk(r, BERESP_FILTERS)),
        );
    }
    add(
        sc,
        "vcl_deliver",
        "set resp.http.X-F = \"[\" + resp.filters + \"]\";",
    );
    if r.chance(40) {
        add(
            sc,
            "vcl_deliver",
            &format!("set resp.filters = \"{}\";", pk(r, RESP_FILTERS)),
        );
    }
    if r.chance(35) {
        sc.params.push((
            "feature".into(),
            pk(
                r,
                &[
                    "+esi_disable_xml_check",
                    "+esi_ignore_other_elements",
                    "+esi_remove_bom",
                    "+esi_include_onerror",
                    "+esi_ignore_https",
                ],
            )
            .to_string(),
        ));
    }
    if r.chance(20) {
        sc.params.push(("http_gzip_support".into(), "off".into()));
    }
    let n = 2 + r.below(2);
    for i in 0..n {
        let mut extra = vec![];
        if r.chance(60) {
            extra.push(format!("Accept-Encoding: {}", pk(r, ACCEPT_ENCODING)));
        }
        if i > 0 && r.chance(20) {
            extra.push(format!("Range: {}", pk(r, RANGES)));
        }
        if r.chance(20) {
            extra.push(format!("If-None-Match: {}", pk(r, INM)));
        }
        let method = if r.chance(15) { "HEAD" } else { "GET" };
        sc.steps.push(step(request(method, "/a", &extra)));
    }
}

const VARY: &[&str] = &[
    "Accept-Encoding",
    "X-T, Accept-Encoding",
    "x-t",
    "X-T,X-U",
    "X-T ,  X-U",
    "*",
    "Accept-Encoding,X-T",
    "",
    "X-T, X-T",
];

/// Request header lines that select a variant, in spellings that should
/// and should not match each other (not `X-T:1`: the spacing after the
/// colon is a deliberate deviation, DEVIATIONS.md).
const VARIANT_LINES: &[&str] = &[
    "X-T: 1",
    "x-t: 1",
    "X-T: 1 ",
    "X-T: 2",
    "X-T: 1\r\nX-T: 2",
    "X-U: a",
    "X-T: 1\r\nX-U: a",
];

/// Vary with one or several headers, header spellings and
/// `Accept-Encoding` forms (normalised by `http_gzip_support`).
fn vary(sc: &mut Scenario, r: &mut Rng) {
    let v = pk(r, VARY);
    for body in ["v1", "v2", "v3", "v4"] {
        let mut a = resp(
            "/a",
            200,
            vec![h("Vary", v), h("Cache-Control", "max-age=60")],
            body,
        );
        a.gzip = r.chance(20);
        sc.backend.push(a);
    }
    if r.chance(25) {
        add(
            sc,
            "vcl_backend_response",
            pk(
                r,
                &[
                    "set beresp.http.Vary = \"X-T, Accept-Encoding\";",
                    "unset beresp.http.Vary;",
                    "set beresp.do_gzip = true;",
                    "set beresp.http.Vary = beresp.http.Vary + \", X-U\";",
                ],
            ),
        );
    }
    if r.chance(25) {
        add(
            sc,
            "vcl_recv",
            pk(
                r,
                &[
                    "set req.http.X-T = std.tolower(req.http.X-T);",
                    "unset req.http.Accept-Encoding;",
                    "set req.http.Accept-Encoding = \"br\";",
                    "return (pass);",
                ],
            ),
        );
    }
    if r.chance(20) {
        sc.params.push(("http_gzip_support".into(), "off".into()));
    }
    let n = 3 + r.below(2);
    for _ in 0..n {
        let mut extra = vec![];
        if r.chance(60) {
            extra.push(pk(r, VARIANT_LINES).to_string());
        }
        if r.chance(50) {
            extra.push(format!("Accept-Encoding: {}", pk(r, ACCEPT_ENCODING)));
        }
        sc.steps.push(step(request("GET", "/a", &extra)));
    }
}

/// The families, by the name `lacquer-difftest batch --family` takes.
pub const FAMILIES: &[&str] = &["cond", "revalidation", "ttl", "range", "filters", "vary"];

fn rng(seed: u64) -> Rng {
    Rng::new(seed.wrapping_mul(0xC0DD_1710_4A11_0F0D) ^ 0x3047_1DE5)
}

/// The family that replaces the scenario of `seed`, if any (a quarter
/// of the seeds).
pub fn family_of(seed: u64) -> Option<&'static str> {
    let mut r = rng(seed);
    if !r.chance(25) {
        return None;
    }
    Some(FAMILIES[r.below(FAMILIES.len())])
}

/// Replaces `sc` by its family scenario, when its seed has one.
pub fn family(sc: &mut Scenario) {
    let Some(f) = family_of(sc.seed) else {
        return;
    };
    // The same draws as family_of, then the family's own.
    let mut r = rng(sc.seed);
    r.chance(25);
    r.below(FAMILIES.len());
    sc.subs.clear();
    sc.backend.clear();
    sc.steps.clear();
    sc.decls.clear();
    sc.backend_attrs.clear();
    sc.params.clear();
    match f {
        "cond" => client_cond(sc, &mut r),
        "revalidation" => revalidation(sc, &mut r),
        "ttl" => ttl_grace(sc, &mut r),
        "range" => ranges(sc, &mut r),
        "vary" => vary(sc, &mut r),
        _ => filters(sc, &mut r),
    }
}

#[cfg(test)]
mod tests {
    use crate::grammar;

    #[test]
    fn every_family_is_made_and_reproducible() {
        let mut seen = std::collections::BTreeMap::new();
        for s in 0..600 {
            let sc = grammar::scenario(s);
            assert_eq!(sc, grammar::scenario(s), "seed {s}");
            if let Some(f) = super::family_of(s) {
                *seen.entry(f).or_insert(0) += 1;
            }
        }
        for f in super::FAMILIES {
            assert!(seen.get(f).copied().unwrap_or(0) > 5, "{f}: {seen:?}");
        }
        let total: usize = seen.values().sum();
        assert!((100..250).contains(&total), "{total} of 600 are families");
    }

    #[test]
    fn families_pause_at_most_once_and_set_known_parameters() {
        for s in 0..600 {
            let sc = grammar::scenario(s);
            let Some(f) = super::family_of(s) else {
                continue;
            };
            assert!(sc.steps.len() <= 5, "seed {s}");
            assert!(sc.steps.iter().filter(|st| st.wait_ms > 100).count() <= 1);
            for (k, _) in &sc.params {
                assert!(
                    ["http_range_support", "http_gzip_support", "feature"].contains(&k.as_str()),
                    "{k}"
                );
            }
            // The revalidation answer follows the object it revalidates.
            if f == "revalidation" {
                let a: Vec<_> = sc.backend.iter().filter(|b| b.url == "/a").collect();
                assert_eq!(a.len(), 2, "seed {s}");
                assert_eq!(a[0].status, 200);
            }
        }
    }
}
