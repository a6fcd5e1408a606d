//! Executor benchmark: VCL time of one request for builtin.vcl alone and
//! for builtin.vcl behind a typical production VCL, hit and miss (see
//! `common`). The context is built outside the timed section, so the
//! figures are VCL time only. Contexts are built in batches of 16, so a
//! request runs on memory that is still in cache, as the server's does:
//! its headers were parsed just before vcl_recv. (Thousands of contexts
//! built ahead would make every request start with cache misses.) For
//! instruction counts, which do not depend on the machine's load, run
//! `examples/exec_profile.rs` under callgrind.

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use lacquer_vcl::exec::Scratch;

mod common;

fn bench(cr: &mut Criterion) {
    let builtin = common::build(common::BUILTIN_ONLY);
    let typical = common::build(common::TYPICAL);
    let mut scratch = Scratch::default();
    for case in common::CASES {
        let prog = if case.typical { &typical } else { &builtin };
        let flow = case.flow;
        cr.bench_function(case.name, |b| {
            b.iter_batched_ref(
                case.setup,
                |c| flow(prog, c, &mut scratch),
                BatchSize::NumIterations(16),
            )
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
