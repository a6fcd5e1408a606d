#!/usr/bin/env bash
# The whole test suite: unit and integration tests of every crate, including
# the VCL corpus ratchet over ../shared/vtc. Fails on any failure.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p target
cargo test --workspace --release 2>&1 | tee target/test.log
# cargo's own per-binary summaries are printed above; print one total line.
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "cargo: %d passed, %d failed, %d skipped\n", p, f, i }' target/test.log
