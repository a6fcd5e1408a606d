//! vmod `curl`'s process-wide limits (the `curl_timeout` and
//! `curl_max_inflight` parameters), in a test binary of their own since
//! they change state every call in the process shares.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use lacquer_vcl::compile::{CompileOptions, compile_str};
use lacquer_vcl::exec::code::Program;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{Action, HttpWhich, LogKind, Run, Scratch};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vmods::{Runtime, registry};

const REQ: HttpWhich = HttpWhich::Req;

struct Loaded {
    prog: Program,
    rt: Runtime,
}

fn load(vcl: &str) -> Loaded {
    let text = format!("vcl 4.1;\nimport curl;\nbackend s1 {{ .host = \"127.0.0.1\"; }}\n{vcl}");
    let opts = CompileOptions {
        err_unref: false,
        ..CompileOptions::default()
    };
    let (sm, r) = compile_str("test.vcl", &text, &opts, &registry());
    let ir = r.unwrap_or_else(|d| panic!("{}", d.render(&sm)));
    let rt = Runtime::for_program(&ir, Arc::new(TestHost::default())).unwrap();
    let prog = Program::from_ir(&ir).unwrap();
    Loaded { prog, rt }
}

impl Loaded {
    /// Runs `m` as the server does: awaiting each suspension's wait.
    async fn run(&self, m: BuiltinSub, c: &mut MockContext) -> (Action, u32) {
        c.vmod.sub = Some(m);
        let mut scratch = Scratch::default();
        let mut waits = 0;
        let mut run = self.prog.start(m, c, &self.rt, &mut scratch);
        loop {
            match run {
                Run::Done(a) => return (a, waits),
                Run::Suspended(s) => {
                    waits += 1;
                    s.wait.await;
                    run = self.prog.resume(s.point, c, &self.rt, &mut scratch);
                }
            }
        }
    }
}

fn hdr(c: &MockContext, name: &str) -> Option<String> {
    c.http(REQ)
        .get(name)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The process-wide limits (the `curl_timeout` and `curl_max_inflight`
/// parameters); one test, as they are global to the process.
#[tokio::test]
async fn process_limits_default_timeout_and_cap_on_calls_in_flight() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (s, _) = silent.accept().await.unwrap();
            held.push(s);
        }
    });
    let l = load(&format!(
        r#"
sub vcl_recv {{
    curl.get("http://127.0.0.1:{port}/");
    set req.http.e = curl.status() + " " + curl.error();
    return (hash);
}}"#
    ));
    lacquer_vmods::curl_set_defaults(None, 0);
    let mut c = MockContext::new("GET", "/");
    let (_, waits) = l.run(BuiltinSub::Recv, &mut c).await;
    assert_eq!(waits, 0);
    let e = hdr(&c, "e").unwrap();
    assert!(e.starts_with("0 Too many curl calls in flight"), "{e}");
    assert!(c.logs_of(LogKind::Error)[0].contains("curl_max_inflight"));

    lacquer_vmods::curl_set_defaults(Some(Duration::from_millis(100)), 10);
    let mut c = MockContext::new("GET", "/");
    let t0 = Instant::now();
    l.run(BuiltinSub::Recv, &mut c).await;
    let took = t0.elapsed();
    lacquer_vmods::curl_set_defaults(None, u64::MAX);
    assert!(hdr(&c, "e").unwrap().starts_with("0 Timeout was reached"));
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_millis(300),
        "{took:?}"
    );
}
