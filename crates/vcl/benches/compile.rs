//! Compile-time benchmark: a generated VCL of about 2,000 lines (backends,
//! ACLs, many subroutines with header logic, regexes and string building)
//! is compiled repeatedly; prints the best and median time per compile.
//! Target: well under 20 ms per compile in release mode.
//!
//! Run with `cargo bench -p lacquer-vcl --bench compile`.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use lacquer_vcl::compile::{CompileOptions, compile_str};
use lacquer_vcl::vmod::VmodRegistry;

fn generate() -> String {
    let mut v = String::from("vcl 4.1;\n\n");
    for i in 0..20 {
        writeln!(
            v,
            "backend be{i} {{\n    .host = \"127.0.0.1\";\n    .port = \"{}\";\n    .connect_timeout = 1s;\n}}\n",
            8000 + i
        )
        .unwrap();
    }
    for i in 0..10 {
        writeln!(
            v,
            "acl net{i} {{\n    \"10.{i}.0.0\"/16;\n    !\"10.{i}.1.0\"/24;\n    \"192.168.{i}.1\";\n}}\n"
        )
        .unwrap();
    }
    let subs = 120;
    for i in 0..subs {
        writeln!(
            v,
            "sub route{i} {{
    if (req.url ~ \"^/section{i}/[a-z]+\\.(css|js|png)$\" && client.ip ~ net{acl}) {{
        set req.backend_hint = be{be};
        set req.http.X-Route = \"route{i}-\" + req.restarts;
        unset req.http.Cookie;
    }} elseif (req.http.host == \"host{i}.example.com\") {{
        set req.url = regsub(req.url, \"^/old{i}/(.*)\", \"/new{i}/\\1\");
        set req.http.X-Count = std_count{i};
    }} else {{
        set req.http.X-Miss = req.http.X-Miss + \";{i}\";
    }}
}}
",
            acl = i % 10,
            be = i % 20
        )
        .unwrap();
        // Reference a header with a per-sub name instead of a vmod.
        v = v.replace(&format!("std_count{i}"), &format!("req.http.X-In-{i}"));
    }
    v.push_str("sub vcl_recv {\n");
    for i in 0..subs {
        writeln!(v, "    call route{i};").unwrap();
    }
    v.push_str("}\n\nsub vcl_backend_response {\n");
    for i in 0..40 {
        writeln!(
            v,
            "    if (beresp.http.Content-Type ~ \"type{i}\") {{\n        set beresp.ttl = {i}s + 1m;\n        set beresp.http.X-Kind = \"kind{i}\";\n    }}"
        )
        .unwrap();
    }
    v.push_str("}\n");
    v
}

fn main() {
    let text = generate();
    let lines = text.lines().count();
    let opts = CompileOptions::default();
    let reg = VmodRegistry::new();
    let (sm, first) = compile_str("bench.vcl", &text, &opts, &reg);
    if let Err(d) = first {
        eprintln!("{}", d.render(&sm));
        std::process::exit(1);
    }
    let mut times: Vec<Duration> = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        let (_, r) = compile_str("bench.vcl", &text, &opts, &reg);
        times.push(t.elapsed());
        assert!(r.is_ok());
    }
    times.sort();
    println!(
        "compile {lines} lines: best {:?}, median {:?}",
        times[0],
        times[times.len() / 2]
    );
}
