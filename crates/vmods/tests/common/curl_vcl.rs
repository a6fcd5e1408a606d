//! Loading a VCL that imports vmod `curl` and running its subroutines as
//! the server does (awaiting each suspension's wait), for the curl test
//! binaries.

use std::sync::Arc;

use lacquer_vcl::compile::{CompileOptions, compile_str};
use lacquer_vcl::exec::code::Program;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{Action, HttpWhich, Run, Scratch};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vmods::{Runtime, registry};

use super::TestHost;

pub const REQ: HttpWhich = HttpWhich::Req;

pub struct Loaded {
    pub prog: Program,
    pub rt: Runtime,
}

pub fn load(vcl: &str) -> Loaded {
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
    pub async fn run(&self, m: BuiltinSub, c: &mut MockContext) -> (Action, u32) {
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

pub fn hdr(c: &MockContext, name: &str) -> Option<String> {
    c.http(REQ)
        .get(name)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// A loopback port that accepts connections and never answers (held open
/// for the rest of the test), for timeouts.
pub async fn silent_endpoint() -> u16 {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (s, _) = silent.accept().await.unwrap();
            held.push(s);
        }
    });
    port
}
