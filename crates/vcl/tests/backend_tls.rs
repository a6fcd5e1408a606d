//! TLS backend attributes: Varnish Enterprise's names and defaults,
//! Varnish 9's negative spellings, `.ssl_ca`, and the errors for
//! attributes that conflict or would have no effect.

use lacquer_vcl::compile::{CompileOptions, compile_str};
use lacquer_vcl::ir::BackendTlsDef;
use lacquer_vcl::vmod::VmodRegistry;

fn compile(fields: &str) -> Result<Option<(String, BackendTlsDef)>, String> {
    compile_port(fields).map(|(p, t)| t.map(|t| (p, t)))
}

fn compile_port(fields: &str) -> Result<(String, Option<BackendTlsDef>), String> {
    let text = format!("vcl 4.1;\nbackend default {{ .host = \"127.0.0.1\"; {fields} }}\n");
    let (sm, r) = compile_str(
        "t.vcl",
        &text,
        &CompileOptions::default(),
        &VmodRegistry::default(),
    );
    match r {
        Ok(p) => Ok((p.backends[0].port.clone(), p.backends[0].tls.clone())),
        Err(d) => Err(d.render(&sm)),
    }
}

#[test]
fn the_object_store_backend_compiles_with_enterprise_defaults() {
    let (port, t) = compile(
        r#".port = "8082"; .ssl = 1; .ssl_sni = 1; .ssl_verify_peer = 1; .ssl_verify_host = 1;"#,
    )
    .unwrap()
    .unwrap();
    assert_eq!(port, "8082");
    assert!(t.sni && t.verify_peer && t.verify_host);
    let (port, t) = compile(".ssl = 1;").unwrap().unwrap();
    assert_eq!(port, "443", ".ssl moves the default port");
    assert_eq!(
        t,
        BackendTlsDef {
            sni: true,
            verify_peer: true,
            verify_host: false,
            ca_file: None,
            certificate: None,
        }
    );
    let (_, t) = compile(
        r#".ssl = 1; .ssl_nosni = 1; .ssl_noverify = 1; .ssl_ca = "/etc/ca.pem"; .certificate = "/etc/client.pem";"#,
    )
    .unwrap()
    .unwrap();
    assert!(!t.sni && !t.verify_peer);
    assert_eq!(t.ca_file.as_deref(), Some("/etc/ca.pem"));
    assert_eq!(t.certificate.as_deref(), Some("/etc/client.pem"));
    assert_eq!(compile(".ssl = 0;").unwrap(), None);
    assert_eq!(compile_port("").unwrap(), ("80".to_string(), None));
}

#[test]
fn conflicts_and_no_effect_are_errors() {
    for (fields, want) in [
        (".ssl = 2;", ".ssl must be 0 or 1"),
        (
            ".ssl_verify_host = 1;",
            "'.ssl_verify_host' applies to TLS backends only",
        ),
        (
            ".ssl = 1; .ssl_sni = 1; .ssl_nosni = 1;",
            ".ssl_sni and .ssl_nosni conflict",
        ),
        (
            ".ssl = 1; .ssl_noverify = 1; .ssl_verify_peer = 0;",
            ".ssl_verify_peer and .ssl_noverify conflict",
        ),
        (".ssl = 1; .ssl = 1;", "Field 'ssl' redefined"),
    ] {
        let e = compile(fields).unwrap_err();
        assert!(e.contains(want), "{fields}: {e}");
    }
    let text = "vcl 4.1;\nbackend default { .path = \"/tmp/x.sock\"; .ssl = 1; }\n";
    let (sm, r) = compile_str(
        "t.vcl",
        text,
        &CompileOptions::default(),
        &VmodRegistry::default(),
    );
    let e = r.unwrap_err().render(&sm);
    assert!(e.contains(".ssl cannot be used with .path"), "{e}");
}
