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
//! request. Without valgrind it prints the wall time per request.

use std::hint::black_box;
use std::time::Instant;

use lacquer_vcl::exec::Scratch;
use lacquer_vcl::exec::code::Program;
use lacquer_vcl::exec::mock::MockContext;

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

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "typical_hit".into());
    let n: u32 = args.next().map_or(1000, |s| {
        s.parse()
            .unwrap_or_else(|_| panic!("count {s:?} is not a number"))
    });
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
    let mut scratch = Scratch::default();
    let mut spent = std::time::Duration::ZERO;
    let mut left = n;
    while left > 0 {
        let batch = left.min(BATCH);
        let mut ctxs: Vec<MockContext> = (0..batch).map(|_| (case.setup)()).collect();
        let start = Instant::now();
        for c in &mut ctxs {
            run_flow(case.flow, &prog, black_box(c), &mut scratch);
        }
        spent += start.elapsed();
        left -= batch;
    }
    let per = spent.as_nanos() as f64 / f64::from(n.max(1));
    println!("{name}: {n} requests, {per:.0} ns per request (wall)");
}
