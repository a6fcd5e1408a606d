//! The example tenants under `examples/tenants/`, built from Rust with
//! the guest SDK for `wasm32-unknown-unknown` (the target must be
//! installed: `rustup target add wasm32-unknown-unknown`) and run in the
//! sandbox: hello, router, header rewriter and the misbehaving tenant.

mod support;

use lacquer_sandbox::{CallError, Decision, HOOKS, Limits, Message, PoolConfig, Sandbox, Which};

fn load(sb: &Sandbox, name: &str, l: &Limits) -> std::sync::Arc<lacquer_sandbox::Program> {
    sb.load(name, &support::tenant(name), l).unwrap()
}

fn hook(name: &str) -> usize {
    HOOKS.iter().position(|h| *h == name).unwrap()
}

fn req(url: &str, headers: &[(&str, &str)]) -> Message {
    Message {
        url: url.into(),
        method: b"GET".to_vec(),
        proto: b"HTTP/1.1".to_vec(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect(),
        ..Message::default()
    }
}

fn sandbox() -> Sandbox {
    Sandbox::new(PoolConfig {
        slots: 8,
        max_memory: 64 << 20,
        ..PoolConfig::default()
    })
    .unwrap()
}

#[test]
fn hello_tenant_adds_its_header_and_forges_json() {
    let sb = sandbox();
    let p = load(&sb, "hello", &Limits::default());
    let mut i = sb.instantiate(&p).unwrap();
    i.task_mut()
        .set_msg(Which::Req, Some(req("/hi\"there", &[])));
    assert!(i.run_hook(hook("on_recv")).unwrap());
    let m = i.task().msg(Which::Req).unwrap();
    assert_eq!(m.header(b"X-Hello"), Some(&b"url=/hi\"there"[..]));
    let Some(Decision::Forge(f)) = &i.task().decision else {
        panic!("{:?}", i.task().decision)
    };
    assert_eq!(f.status, 200);
    assert_eq!(f.content_type, b"application/json");
    assert_eq!(
        String::from_utf8_lossy(&f.body),
        r#"{"message":"Hello from WebAssembly!","url":"/hi\"there"}"#
    );
}

/// `s` as the inside of a JSON string.
fn escaped(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '"' => "\\\"".to_string(),
            '\\' => "\\\\".to_string(),
            '\n' => "\\n".to_string(),
            '\r' => "\\r".to_string(),
            '\t' => "\\t".to_string(),
            c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32),
            c => c.to_string(),
        })
        .collect()
}

/// The hello tenant builds its texts on the stack, and on the heap when
/// they do not fit: the same header and JSON either way.
#[test]
fn hello_tenant_answers_the_same_for_urls_too_long_for_its_stack_buffers() {
    let sb = sandbox();
    let p = load(&sb, "hello", &Limits::default());
    let quotes = format!("/{}", "\"".repeat(300));
    let controls = format!("/{}", "\u{1}".repeat(250));
    for url in [
        "/short".to_string(),
        format!("/{}", "a".repeat(505)),
        format!("/{}", "b".repeat(2000)),
        quotes,
        controls,
    ] {
        let mut i = sb.instantiate(&p).unwrap();
        i.task_mut().set_msg(Which::Req, Some(req(&url, &[])));
        assert!(i.run_hook(hook("on_recv")).unwrap());
        let m = i.task().msg(Which::Req).unwrap();
        let line = format!("url={url}");
        assert_eq!(m.header(b"X-Hello"), Some(line.as_bytes()), "{}", url.len());
        let Some(Decision::Forge(f)) = &i.task().decision else {
            panic!("{:?}", i.task().decision)
        };
        let want = format!(
            r#"{{"message":"Hello from WebAssembly!","url":"{}"}}"#,
            escaped(&url)
        );
        assert_eq!(String::from_utf8_lossy(&f.body), want, "{}", url.len());
    }
}

#[test]
fn a_request_of_the_hello_tenant_does_not_grow_memory() {
    // The SDK's `__lacquer_init` leaves the allocator a free heap in the
    // snapshot; without it every request's first allocation grew memory.
    let sb = sandbox();
    let p = load(&sb, "hello", &Limits::default());
    for _ in 0..3 {
        let mut i = sb.instantiate(&p).unwrap();
        let fresh = i.memory_size();
        i.task_mut()
            .set_msg(Which::Req, Some(req("/a-request-url", &[])));
        assert!(i.run_hook(hook("on_recv")).unwrap());
        assert_eq!(i.memory_size(), fresh, "the request grew linear memory");
    }
}

#[test]
fn router_tenant_routes_with_patterns_compiled_in_main() {
    let sb = sandbox();
    let p = load(&sb, "router", &Limits::default());
    for (url, want) in [
        ("/api/users", "api"),
        ("/img/a.png", "static"),
        ("/", "default"),
    ] {
        let mut i = sb.instantiate(&p).unwrap();
        i.task_mut().set_msg(Which::Req, Some(req(url, &[])));
        i.run_hook(hook("on_recv")).unwrap();
        let t = i.task();
        assert_eq!(t.effects.backend.as_deref(), Some(want), "{url}");
        assert_eq!(t.effects.hash_data, vec![want.as_bytes().to_vec()]);
        assert_eq!(
            t.msg(Which::Req).unwrap().header(b"x-route"),
            Some(want.as_bytes())
        );
    }
    // max_backends 1: the second distinct backend is refused and logged.
    let one = Limits {
        max_backends: 1,
        ..Limits::default()
    };
    let p = load(&sb, "router", &one);
    let mut i = sb.instantiate(&p).unwrap();
    i.task_mut().set_msg(Which::Req, Some(req("/api/x", &[])));
    i.run_hook(hook("on_recv")).unwrap();
    let mut i = sb.instantiate(&p).unwrap();
    i.task_mut().set_msg(Which::Req, Some(req("/", &[])));
    i.run_hook(hook("on_recv")).unwrap();
    assert_eq!(i.task().effects.backend, None);
    assert_eq!(i.task().effects.logs.len(), 1);
}

#[test]
fn rewriter_tenant_normalises_requests_and_strips_responses() {
    let sb = sandbox();
    let p = load(&sb, "rewriter", &Limits::default());
    let mut i = sb.instantiate(&p).unwrap();
    i.task_mut().set_msg(
        Which::Req,
        Some(req(
            "/p?utm_source=x&id=3&fbclid=abc",
            &[("Host", "WWW.Example.COM"), ("X-Forwarded-Host", "evil")],
        )),
    );
    i.run_hook(hook("on_recv")).unwrap();
    let m = i.task().msg(Which::Req).unwrap();
    assert_eq!(m.header(b"host"), Some(&b"www.example.com"[..]));
    assert_eq!(m.header(b"x-forwarded-host"), None);
    assert_eq!(m.header(b"x-forwarded-proto"), Some(&b"https"[..]));
    assert_eq!(String::from_utf8_lossy(&m.url), "/p?id=3");
    let resp = Message {
        status: 200,
        headers: vec![
            (b"Server".to_vec(), b"origin/1.0".to_vec()),
            (b"X-Powered-By".to_vec(), b"php".to_vec()),
        ],
        ..Message::default()
    };
    i.task_mut().set_msg(Which::Resp, Some(resp));
    i.run_hook(hook("on_deliver")).unwrap();
    let m = i.task().msg(Which::Resp).unwrap();
    assert_eq!(
        m.headers,
        vec![(b"X-Tenant".to_vec(), b"rewriter".to_vec())]
    );
}

#[test]
fn misbehaving_tenant_is_stopped_and_traps_without_harm() {
    let sb = sandbox();
    let l = Limits {
        max_instructions: Some(50_000_000),
        max_memory: 8 << 20,
        ..Limits::default()
    };
    let p = load(&sb, "misbehaving", &l);
    let run = |url: &str| {
        let mut i = sb.instantiate(&p).unwrap();
        i.task_mut().set_msg(Which::Req, Some(req(url, &[])));
        i.run_hook(hook("on_recv"))
            .map(|_| i.task().decision.clone())
    };
    assert!(matches!(run("/loop"), Err(CallError::Budget(_))));
    assert!(
        matches!(run("/bomb"), Err(CallError::Trap(_))),
        "{:?}",
        run("/bomb")
    );
    assert!(matches!(run("/oob"), Err(CallError::Trap(_))));
    assert_eq!(
        run("/").unwrap(),
        Some(Decision::Synth {
            status: 200,
            reason: b"well behaved".to_vec()
        })
    );
}
