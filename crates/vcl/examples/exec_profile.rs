//! Runs the executor benchmark's request flows (`benches/common`) a given
//! number of times, for instruction counts that do not depend on the
//! machine's load:
//!
//! ```text
//! cargo build --release -p lacquer-vcl --example exec_profile
//! valgrind --tool=callgrind --toggle-collect='*exec_profile::run_flow*' \
//!     target/release/examples/exec_profile typical_hit 1000
//! ```
//!
//! `--toggle-collect` counts only the flows, not building the program or
//! the requests; divide the total by the count for instructions per
//! request. Without valgrind it prints the wall time per request. A third
//! argument `start` runs a hit case's methods through `Program::start`
//! (the server's form, which may suspend) instead of `Program::run`.

use std::hint::black_box;
use std::time::Instant;

use lacquer_vcl::exec::code::Program;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{Action, NoVmods, Run, Scratch};
use lacquer_vcl::subs::BuiltinSub;

#[path = "../benches/common/mod.rs"]
mod common;

/// Requests whose contexts are built, untimed, just before they run: few
/// enough that their memory is still in cache, as a request's headers are
/// when the server runs vcl_recv right after parsing them.
const BATCH: u32 = 16;

/// One measured request; not inlined so callgrind can count it alone.
#[inline(never)]
fn run_flow(flow: common::Flow, prog: &Program, ctx: &mut MockContext, s: &mut Scratch) {
    flow(prog, ctx, s);
}

/// The methods of a hit run as the server runs them: each through
/// `Program::start`, the form that may suspend (none does here); laid out
/// as `common::hit`, so that the two differ only in the executor's entry.
fn hit_started(p: &Program, c: &mut MockContext, s: &mut Scratch) {
    assert_eq!(
        done(p.start(BuiltinSub::Recv, c, &NoVmods, s)),
        Action::Hash
    );
    assert_eq!(
        done(p.start(BuiltinSub::Hash, c, &NoVmods, s)),
        Action::Lookup
    );
    assert_eq!(
        done(p.start(BuiltinSub::Hit, c, &NoVmods, s)),
        Action::Deliver
    );
    assert_eq!(
        done(p.start(BuiltinSub::Deliver, c, &NoVmods, s)),
        Action::Deliver
    );
}

fn done(r: Run) -> Action {
    match r {
        Run::Done(a) => a,
        Run::Suspended(_) => panic!("a method suspended without a vmod"),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "typical_hit".into());
    let n: u32 = args.next().map_or(1000, |s| {
        s.parse()
            .unwrap_or_else(|_| panic!("count {s:?} is not a number"))
    });
    // A third argument `start`: hits through `Program::start` instead of
    // `Program::run` (the server's path; hit cases only).
    let started = args.next().is_some_and(|a| a == "start");
    let Some(case) = common::CASES.iter().find(|c| c.name == name) else {
        let names: Vec<_> = common::CASES.iter().map(|c| c.name).collect();
        eprintln!("unknown case {name:?}; one of {names:?}");
        std::process::exit(2);
    };
    let prog = common::build(if case.typical {
        common::TYPICAL
    } else {
        common::BUILTIN_ONLY
    });
    let flow: common::Flow = match (started, name.ends_with("_hit")) {
        (false, _) => case.flow,
        (true, true) => hit_started,
        (true, false) => {
            eprintln!("`start` measures hit cases only, not {name:?}");
            std::process::exit(2);
        }
    };
    let mut scratch = Scratch::default();
    let mut spent = std::time::Duration::ZERO;
    let mut left = n;
    while left > 0 {
        let batch = left.min(BATCH);
        let mut ctxs: Vec<MockContext> = (0..batch).map(|_| (case.setup)()).collect();
        let start = Instant::now();
        for c in &mut ctxs {
            run_flow(flow, &prog, black_box(c), &mut scratch);
        }
        spent += start.elapsed();
        left -= batch;
    }
    let per = spent.as_nanos() as f64 / f64::from(n.max(1));
    println!("{name}: {n} requests, {per:.0} ns per request (wall)");
}
