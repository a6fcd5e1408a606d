#!/usr/bin/env bash
# The whole test suite: unit and integration tests of every crate
# (including the VCL corpus ratchet), then Varnish's own .vtc suite run
# against lacquerd with the conformance ratchet. Fails on any failure.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p target
cargo test --workspace 2>&1 | tee target/test.log
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "cargo: %d passed, %d failed, %d skipped\n", p, f, i }' target/test.log
cargo build -p lacquer -p lacquerd
python3 tests/vtc/ratchet.py --jobs 2
