//! Front-end speed: lexing and parsing a generated VCL of about 2,000
//! lines (backends, probes, an ACL and many subroutines with the usual
//! statements). The whole compile should stay well under 20 ms; parsing
//! alone is expected around a millisecond.

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use lacquer_vcl::lexer::lex;
use lacquer_vcl::parser::parse;
use lacquer_vcl::source::{FileId, FileKind, SourceMap};

/// A realistic VCL of at least `lines` lines.
fn generate(lines: usize) -> String {
    let mut s = String::from("vcl 4.1;\nimport std;\n\n");
    s.push_str("probe health {\n\t.url = \"/health\";\n\t.interval = 5s;\n\t.timeout = 1s;\n\t.window = 5;\n\t.threshold = 3;\n}\n\n");
    for i in 0..20 {
        s.push_str(&format!(
            "backend be{i} {{\n\t.host = \"10.0.0.{i}\";\n\t.port = \"8080\";\n\t.probe = health;\n\t.connect_timeout = 500ms;\n}}\n\n"
        ));
    }
    s.push_str("acl purgers {\n");
    for i in 0..30 {
        s.push_str(&format!("\t\"192.168.{i}.0\"/24;\n"));
    }
    s.push_str("}\n\n");
    let mut n = 0;
    while s.lines().count() < lines {
        s.push_str(&format!(
            r#"sub route_{n} {{
	if (req.http.host ~ "^(www\.)?site{n}\.example$" && req.url !~ "^/admin") {{
		set req.backend_hint = be{b};
		set req.http.X-Route = "site{n}" + ";" + req.url;
		unset req.http.Cookie;
	}} elsif (req.method == "PURGE" && client.ip ~ purgers) {{
		return (purge);
	}} else {{
		set req.url = regsub(req.url, "\?.*$", "");
		std.log("route {n}: " + req.url);
	}}
	if (req.restarts > 0 || req.http.X-Debug) {{
		return (synth(400 + {n} % 100, "Bad " + req.http.host));
	}}
}}

"#,
            b = n % 20
        ));
        n += 1;
    }
    s.push_str("sub vcl_recv {\n");
    for i in 0..n {
        s.push_str(&format!("\tcall route_{i};\n"));
    }
    s.push_str("\treturn (hash);\n}\n");
    s
}

fn bench(c: &mut Criterion) {
    let src = generate(2000);
    eprintln!(
        "generated VCL: {} lines, {} bytes",
        src.lines().count(),
        src.len()
    );
    // Sanity: the generated program parses cleanly.
    {
        let mut sm = SourceMap::new();
        let f = sm.add("<bench>", src.as_str(), FileKind::Main);
        let (_, d) = parse(&mut sm, f);
        assert!(!d.has_errors(), "{}", d.render(&sm));
    }
    c.bench_function("lex_2000_lines", |b| {
        b.iter(|| lex(FileId(0), black_box(&src)))
    });
    c.bench_function("parse_2000_lines", |b| {
        b.iter(|| {
            let mut sm = SourceMap::new();
            let f = sm.add("<bench>", black_box(src.as_str()), FileKind::Main);
            parse(&mut sm, f)
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
