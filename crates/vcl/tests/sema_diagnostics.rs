//! Golden semantic diagnostics: each VCL snippet (compiled after
//! `vcl 4.1;` and one backend) must be rejected with a message containing
//! Varnish 7.1's text. Every expected text was checked against
//! `varnishd -C` of Varnish 7.1.1.

use lacquer_vcl::compile::{CompileOptions, compile_str};
use lacquer_vcl::vmod::VmodRegistry;

const CASES: &[(&str, &str)] = &[
    (
        r#"sub vcl_recv { set req.xid = "a"; }"#,
        r#"Variable is read only."#,
    ),
    (
        r#"sub vcl_recv { set obj.ttl = 1s; }"#,
        r#"Not available in subroutine 'vcl_recv'."#,
    ),
    (
        r#"sub vcl_backend_fetch { set bereq.body = "x"; }"#,
        r#"Variable cannot be set."#,
    ),
    (
        r#"sub vcl_recv { unset req.url; }"#,
        r#"Variable cannot be unset."#,
    ),
    (
        r#"sub vcl_recv { set resp.http.x = "a"; }"#,
        r#"Cannot be set in subroutine 'vcl_recv'."#,
    ),
    (
        r#"sub vcl_deliver { unset resp.http.x; } sub vcl_recv { unset resp.http.x; }"#,
        r#"Cannot be unset in subroutine 'vcl_recv'."#,
    ),
    (
        r#"sub vcl_recv { call foo; } sub foo { set req.http.x = obj.status; }"#,
        r#"Not available from subroutine 'vcl_recv'."#,
    ),
    (
        r#"sub vcl_recv { call foo; } sub foo { return (lookup); }"#,
        r#"Invalid return "lookup""#,
    ),
    (
        r#"sub vcl_recv { call foo; } sub foo { call bar; } sub bar { call foo; }"#,
        r#"Subroutine recurses on"#,
    ),
    (
        r#"sub vcl_recv { call foo; }"#,
        r#"Undefined sub foo, first reference:"#,
    ),
    (r#"sub foo { }"#, r#"Unused sub foo, defined:"#),
    (r#"acl a { "1.2.3.4"; }"#, r#"Unused acl a, defined:"#),
    (
        r#"backend c { .host = "127.0.0.1"; }"#,
        r#"Unused backend c, defined:"#,
    ),
    (r#"probe p { }"#, r#"Unused probe p, defined:"#),
    (
        r#"sub vcl_recv { if (client.ip ~ nope) {} }"#,
        r#"Undefined acl nope, first reference:"#,
    ),
    (
        r#"sub vcl_recv { set req.backend_hint = nob; }"#,
        r#"Undefined backend nob, first reference:"#,
    ),
    (
        r#"acl anacl { "1.2.3.4"; } sub vcl_recv { call anacl; }"#,
        r#"Expression has type ACL, expected SUB"#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = vcl_recv; }"#,
        r#"Symbol 'vcl_recv' can only be used as a SUB expression"#,
    ),
    (
        r#"sub vcl_recv { set req.ttl = 10; }"#,
        r#"Expression has type INT, expected DURATION"#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = req; }"#,
        r#"Cannot convert HTTP to STRING."#,
    ),
    (
        r#"sub vcl_recv { if (req.storage) {} }"#,
        r#"Expression has type STEVEDORE, expected BOOL"#,
    ),
    (
        r#"sub vcl_recv { if (1.5) {} }"#,
        r#"Expression has type REAL, expected BOOL"#,
    ),
    (
        r#"sub vcl_recv { set req.http.z = 2 * 1.5; }"#,
        r#"INT * REAL not possible."#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = "a" * "b"; }"#,
        r#"Operator * not possible on type STRING."#,
    ),
    (
        r#"sub vcl_recv { set req.ttl = 10s + 1; }"#,
        r#"DURATION + INT not possible."#,
    ),
    (
        r#"sub vcl_recv { if (now + now) {} }"#,
        r#"TIME + TIME not possible."#,
    ),
    (
        r#"sub vcl_recv { if (1 + "a") {} }"#,
        r#"INT + STRING not possible."#,
    ),
    (
        r#"sub vcl_recv { if ("a" - "b") {} }"#,
        r#"STRING - STRING not possible."#,
    ),
    (
        r#"sub vcl_recv { if (client.ip + client.ip) {} }"#,
        r#"IP + IP not possible."#,
    ),
    (
        r#"sub vcl_recv { if (true + true) {} }"#,
        r#"BOOL + BOOL not possible."#,
    ),
    (
        r#"sub vcl_recv { if (req.url == 1) {} }"#,
        r#"Comparison of different types: STRING '==' INT"#,
    ),
    (
        r#"sub vcl_recv { if (req.restarts != req.url) {} }"#,
        r#"Comparison of different types: INT '!=' STRING"#,
    ),
    (
        r#"sub vcl_recv { if (client.ip > client.ip) {} }"#,
        r#"Operator > not possible on IP"#,
    ),
    (
        r#"sub vcl_recv { if (req.backend_hint > req.backend_hint) {} }"#,
        r#"Operator > not possible on BACKEND"#,
    ),
    (
        r#"sub vcl_recv { if (req.backend_hint == "b") {} }"#,
        r#"Comparison of different types: BACKEND '==' STRING"#,
    ),
    (
        r#"sub vcl_recv { if (1.5 || true) {} }"#,
        r#"'||' must be preceeded by BOOL, found REAL."#,
    ),
    (
        r#"sub vcl_recv { if (true && 1.5) {} }"#,
        r#"'&&' must be followed by BOOL, found REAL."#,
    ),
    (
        r#"sub vcl_recv { if (!1.5) {} }"#,
        r#"'!' must be followed by BOOL, found REAL."#,
    ),
    (
        r#"sub vcl_recv { if (req.url ~ "(") {} }"#,
        r#"Regexp compilation error:"#,
    ),
    (
        r#"sub vcl_recv { if (req.url ~ "a" + req.http.x) {} }"#,
        r#"Expected CSTR got 'req'"#,
    ),
    (
        r#"sub vcl_recv { if (client.ip ~ true) {} }"#,
        r#"Expression has type BOOL, expected ACL"#,
    ),
    (
        r#"sub vcl_recv { if (client.ip ~ default) {} }"#,
        r#"Symbol 'default' is a reserved word."#,
    ),
    (
        r#"sub vcl_recv { set req.http.foo = default; }"#,
        r#"Symbol 'default' is a reserved word."#,
    ),
    (
        r#"sub vcl_recv { call acl; }"#,
        r#"Symbol 'acl' type (reserved) can not be used in expression."#,
    ),
    (
        r#"sub vcl_recv { if (client.ip ~ vcl_foo) {} }"#,
        r#"Symbols named 'vcl_*' are reserved."#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = req.foobar; }"#,
        r#"Unknown property 'foobar' for type HTTP"#,
    ),
    (
        r#"sub vcl_recv { set req.foobar = "x"; }"#,
        r#"Symbol not found: 'req.foobar'"#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = storage.foo; }"#,
        r#"Symbol not found: 'storage.foo'"#,
    ),
    (
        r#"sub vcl_recv { return (vcl(vcl_recv)); }"#,
        r#"Symbol 'vcl_recv' has wrong type (sub), expected vcl:"#,
    ),
    (
        r#"sub vcl_recv { return (synth); }"#,
        r#"Missing argument."#,
    ),
    (
        r#"sub vcl_recv { new x = foo.bar(); }"#,
        r#"Symbol not found: 'foo.bar'"#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = resp.body; }"#,
        r#"Cannot convert BODY to STRING."#,
    ),
    (
        r#"sub vcl_deliver { if (resp.body) {} }"#,
        r#"Expression has type BODY, expected BOOL"#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = beresp.http.x; }"#,
        r#"Not available in subroutine 'vcl_recv'."#,
    ),
    (
        r#"sub vcl_recv { hash_data(req.url); }"#,
        r#"Not a valid action in subroutine 'vcl_recv'."#,
    ),
    (
        r#"backend b2 { .host = "127.0.0.1"; } backend b2 { .host = "127.0.0.1"; }"#,
        r#"Backend 'b2' redefined"#,
    ),
    (r#"probe p1 { } probe p1 { }"#, r#"Probe 'p1' redefined"#),
    (
        r#"sub foo { } sub foo { }"#,
        r#"Subroutine 'foo' redefined"#,
    ),
    (r#"acl b { "1.2.3.4"; }"#, r#"Name 'b' already defined."#),
    (
        r#"sub vcl_recv { if (client.ip ~ acl1) {} } backend acl1 { .host = "127.0.0.1"; }"#,
        r#"Name acl1 must have type 'acl'."#,
    ),
    (
        r#"acl a +pedantic { "1.2.3.4"; !"1.2.3.4"; } sub vcl_recv { if (client.ip ~ a) {} }"#,
        r#"Conflicting ACL entries:"#,
    ),
    (
        r#"sub vcl_recv { if (req.http.x.foo()) {} }"#,
        r#"Unknown property 'foo' for type STRING"#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = 1KB; }"#,
        r#"Unknown duration unit 'KB'"#,
    ),
    (
        r#"sub vcl_recv { if (storage.s0.free_space > 4 XB) {} }"#,
        r#"Unknown BYTES unit"#,
    ),
    (
        r#"sub vcl_recv { set req.ttl = 1k; }"#,
        r#"Unknown duration unit 'k'"#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = 1 % 2.0; }"#,
        r#"INT % REAL not possible."#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = 1.0 % 2; }"#,
        r#"Operator % only possible on INT"#,
    ),
    (
        r#"sub vcl_backend_fetch { if (req.foo) {} }"#,
        r#"Unknown property 'foo' for type HTTP"#,
    ),
    (
        r#"sub vcl_recv { if (obj.ttl + "a") {} }"#,
        r#"DURATION + STRING not possible."#,
    ),
    (
        r#"sub vcl_recv { if (req.hash) {} }"#,
        r#"Expression has type BLOB, expected BOOL"#,
    ),
    (
        r#"sub vcl_recv { set req.ttl = "a"; set req.http.x = obj.proto; }"#,
        r#"Expression has type STRING, expected DURATION"#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = obj.proto; set req.ttl = "a"; }"#,
        r#"Expression has type STRING, expected DURATION"#,
    ),
    (
        r#"sub vcl_recv { if (beresp.backend.ip == beresp.backend.ip) {} }"#,
        r#"Unknown property 'ip' for type BACKEND"#,
    ),
    (
        r#"sub vcl_recv { if (req.esi) {} }"#,
        r#"Unknown property 'esi' for type HTTP"#,
    ),
    (
        r#"sub vcl_pipe { unset storage.s0.free_space; }"#,
        r#"Symbol not found: 'storage.s0.free_space'"#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = regsub(req.url, req.url, "b"); }"#,
        r#"Expression has type STRING, expected REGEX"#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = req.hash; }"#,
        r#"Not available in subroutine 'vcl_recv'."#,
    ),
    (
        r#"acl a { "1.2.3.4"; } sub vcl_recv { if (req.url ~ a) {} }"#,
        r#"Expression has type ACL, expected REGEX"#,
    ),
    (
        r#"sub vcl_recv { if (client.ip == "nonexistent.invalid") {} }"#,
        r#"IP constant '"nonexistent.invalid"' could not be resolved to an IP address:"#,
    ),
    (
        r#"sub vcl_backend_error { set beresp.body = beresp.status + " " + beresp.reason; }"#,
        r#"INT + STRING not possible."#,
    ),
    (
        r#"sub vcl_recv { if (now > 1) {} }"#,
        r#"Comparison of different types: TIME '>' INT"#,
    ),
    (
        r#"backend c { .host = "127.0.0.1"; .probe = nonexist; } sub vcl_recv { set req.backend_hint = c; }"#,
        r#"Symbol not found: 'nonexist'"#,
    ),
    (
        r#"backend c { .host = "127.0.0.1"; .probe = default; } sub vcl_recv { set req.backend_hint = c; }"#,
        r#"No default probe defined"#,
    ),
    (
        r#"acl a { "nonexistent.invalid"; } sub vcl_recv { if (client.ip ~ a) {} }"#,
        r#"DNS lookup(nonexistent.invalid): "#,
    ),
    (
        r#"acl a { "localhost"/24; } sub vcl_recv { if (client.ip ~ a) {} }"#,
        r#"Non-zero bits in masked part, (maybe use 127.0.0.0/24 ?)"#,
    ),
    (
        r#"backend c { .host = "nonexistent.invalid"; } sub vcl_recv { set req.backend_hint = c; }"#,
        r#"Backend host '"nonexistent.invalid"' could not be resolved to an IP address:"#,
    ),
    // vcc's built-in symbols, whatever the case, cannot name a declaration
    // of another kind, nor be used as values.
    (
        r#"acl req { "1.2.3.4"; }"#,
        r#"Name req must have type 'var'."#,
    ),
    (
        r#"backend synthetic { .host = "127.0.0.1"; }"#,
        r#"Name synthetic must have type 'action'."#,
    ),
    (r#"probe Now { }"#, r#"Name Now must have type 'var'."#),
    (
        r#"sub vcl_recv { new regsuball = foo.bar(); }"#,
        r#"Name regsuball must have type 'func'."#,
    ),
    (
        r#"sub call { }"#,
        "Symbol 'call' has wrong type (action), expected sub:\nAt: ",
    ),
    (
        r#"sub vcl_recv { set req.http.x = set; }"#,
        r#"Symbol 'set' type (action) can not be used in expression."#,
    ),
    (
        r#"sub vcl_recv { call ban; }"#,
        r#"Symbol 'ban' type (action) can not be used in expression."#,
    ),
    (
        r#"sub vcl_recv { set req.http.x = else; }"#,
        "Symbol not found: 'else'\nAt: ",
    ),
    // An error in a backend's definition says where the definition starts.
    (
        r#"backend c { .host = "127.0.0.1"; .probe = pp; }"#,
        "------------------------------------------##---\n\n\nIn backend specification starting at:\n('t.vcl' Line 3 Pos 1)\nbackend c",
    ),
    // Host names resolve in source order: this backend before the ACL.
    (
        r#"backend c { .host = "nonexistent.invalid"; } acl a { "nohost.invalid"; }"#,
        "Backend host '\"nonexistent.invalid\"' could not be resolved to an IP address:",
    ),
    // Found by tests/diff/vclprobe.py against varnishd 7.1.1.
    (
        r#"sub vcl_recv { call foo(); } sub foo {}"#,
        "Expected ';' got '('",
    ),
    (
        r#"sub vcl_recv { set req.http = "a"; }"#,
        "Symbol 'req.http' has wrong type (none), expected var:",
    ),
    (
        r#"sub vcl_recv { set req.http. = "a"; }"#,
        "Symbol 'req.http' has wrong type (none), expected var:",
    ),
    (
        r#"sub vcl_recv { unset req.http; }"#,
        "Symbol 'req.http' has wrong type (none), expected var:",
    ),
    (
        r#"sub vcl_recv { call foo; } sub vcl_backend_fetch { call foo; } sub foo { set req.http.x = bereq.url; }"#,
        "Cannot be set from subroutine 'vcl_backend_fetch'.",
    ),
    (
        r#"sub vcl_recv { if (req.http.x == ) {} }"#,
        "Unknown token ')' when looking for STRING",
    ),
    (
        r#"sub vcl_recv { if (!!req.http.x) {} }"#,
        "Unknown token '!' when looking for BOOL",
    ),
    (
        r#"sub vcl_recv { set req.url = regsub(req.url, "a"); }"#,
        "Expected ',' got ')'",
    ),
    (
        r#"sub vcl_recv { set req.url = regsub(req.url, "a", "b", "c"); }"#,
        "Expected ')' got ','",
    ),
    (
        r#"sub vcl_recv { set req.url = regsub(req.url, "a", "b",); }"#,
        "Expected ')' got ','",
    ),
    (
        r#"sub vcl_recv { set req.url = regsub; }"#,
        "Expected '(' got ';'",
    ),
    (
        r#"backend b2 { .host = ""; } sub vcl_recv { set req.backend_hint = b2; }"#,
        "Backend host '\"\"' could not be resolved to an IP address:",
    ),
    (
        r#"backend b2 { .path = "relative.sock"; } sub vcl_recv { set req.backend_hint = b2; }"#,
        "Backend path: Must be an absolute path:",
    ),
    (
        r#"backend b2 { .path = "/tmp"; } sub vcl_recv { set req.backend_hint = b2; }"#,
        "Backend path: Not a socket:",
    ),
    (
        r#"backend b { .host = "127.0.0.1"; }"#,
        "Backend 'b' redefined.",
    ),
    (
        r#"acl a { } acl a { } sub vcl_recv { if (client.ip ~ a) {} }"#,
        "Acl 'a' redefined.",
    ),
    (
        r#"probe p { } probe p { } backend c { .host = "127.0.0.1"; .probe = p; }"#,
        "Probe 'p' redefined.",
    ),
    (
        r#"sub vcl_recv { set req.http.x = 1s % 2; }"#,
        "Operator % only possible on INT.",
    ),
    // vcc's symbol table ignores case; a redefined sub is named as first
    // declared. Return actions and `else` are compared as written.
    (
        r#"sub a { } sub A { } sub vcl_recv { call a; }"#,
        "Subroutine 'a' redefined",
    ),
    (
        r#"backend B { .host = "127.0.0.1"; } sub vcl_recv { set req.backend_hint = b; }"#,
        "Backend 'B' redefined.",
    ),
    (
        r#"sub vcl_recv { return (PASS); }"#,
        "Expected return action name.",
    ),
    (
        r#"sub vcl_recv { if (true) { } ELSE { } }"#,
        "Symbol not found: 'ELSE'",
    ),
    (
        r#"sub VCL_RECV { return (deliver); }"#,
        r#"Invalid return "deliver""#,
    ),
    // Built-in functions are symbols without an action.
    (
        r#"sub vcl_recv { regsub(req.url, "a", "b"); }"#,
        "Symbol cannot be used here.",
    ),
    (r#"sub vcl_recv { TRUE; }"#, "Symbol cannot be used here."),
];

fn compile(snippet: &str) -> Result<(), String> {
    let text = format!("vcl 4.1;\nbackend b {{ .host = \"127.0.0.1\"; }}\n{snippet}\n");
    let (sm, r) = compile_str(
        "t.vcl",
        &text,
        &CompileOptions::default(),
        &VmodRegistry::new(),
    );
    r.map(|_| ()).map_err(|d| d.render(&sm))
}

#[test]
fn semantic_errors_match_varnish() {
    let mut bad = Vec::new();
    for (snippet, want) in CASES {
        match compile(snippet) {
            Ok(()) => bad.push(format!("{snippet}\n  compiled, want {want:?}")),
            Err(got) if !got.contains(want) => {
                bad.push(format!("{snippet}\n  want {want:?}\n  got {got}"))
            }
            Err(_) => {}
        }
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn valid_programs_compile() {
    for snippet in [
        r#"sub vcl_recv { set req.http.x = req.url + 1; if (req.url + 1) {} }"#,
        r#"sub vcl_recv { return (restart); }"#,
        r#"sub vcl_backend_response { return (pass(10s)); }"#,
        r#"sub vcl_backend_fetch { return (error(503, "x")); }"#,
        r#"sub vcl_recv { set req.backend_hint = b; set req.http.x = b; }"#,
        r#"sub vcl_recv { set req.http.host = req.http.host.lower(); }"#,
        r#"sub vcl_recv { if (req.http.x ~ "(?i)a" + "b") {} }"#,
        r#"sub vcl_backend_response { set beresp.ttl = beresp.ttl * 2 + 1s; }"#,
        r#"sub vcl_deliver { set resp.http.age = now - obj.time; }"#,
        r#"acl a { "10.0.0.0"/8; !"10.1.0.0"/16; } sub vcl_recv { if (client.ip ~ a) {} }"#,
        r#"sub vcl_recv { set req.http.x = regsuball(req.url, "(a)(b)", "\2\1"); }"#,
        r#"sub vcl_synth { set resp.body = "x"; set resp.body += "y"; synthetic("z"); }"#,
        r#"sub vcl_recv { call f; } sub f { set req.url = "/"; return; }"#,
        r#"sub vcl_hit { set req.http.x = "" + req.hash; }"#,
        r#"sub vcl_synth { set resp.body = " " + resp.status; set resp.http.x = resp.status + " "; }"#,
        r#"sub vcl_recv { if (req.url ~ "^/\Qa.b\E$" && req.http.host ~ "^[[:alnum:].-]+$") {} }"#,
        r#"sub vcl_recv { set req.url = regsub(req.url, "(?<=a)b", "c"); }"#,
        r#"acl a { ("nonexistent.invalid"); "localhost"; } sub vcl_recv { if (client.ip ~ a) {} }"#,
        r#"backend c { .host = "localhost"; .port = "http"; .probe = { .url = "/"; } } sub vcl_recv { set req.backend_hint = c; }"#,
        r#"probe p { .url = "/"; } backend c { .host = "127.0.0.1"; .probe = p; } sub vcl_recv { set req.backend_hint = c; }"#,
        // vcc keeps the last `probe default`; a port is a service, as
        // getaddrinfo reads it (a number modulo 65536).
        r#"probe default { } probe default { .url = "/x"; }"#,
        r#"backend c { .host = "127.0.0.1"; .port = "99999"; } sub vcl_recv { set req.backend_hint = c; }"#,
        // Names are found without regard to case, as vcc's symbol table
        // finds them (checked against varnishd 7.1.1).
        r#"sub A { } sub vcl_recv { call a; }"#,
        r#"acl A { "1.2.3.4"; } sub vcl_recv { if (client.ip ~ a) { } }"#,
        r#"sub vcl_recv { SET REQ.http.X = "a"; UNSET Req.Http.y; IF (TRUE) { } }"#,
        r#"sub vcl_recv { set req.http.x = NOW; set req.http.y = REGSUB(req.URL, "a", "b"); }"#,
        r#"sub vcl_backend_response { SET beresp.TTL = 1s; RETURN (deliver); }"#,
        r#"sub VCL_RECV { return (pass); }"#,
    ] {
        if let Err(e) = compile(snippet) {
            panic!("{snippet} should compile:\n{e}");
        }
    }
}
