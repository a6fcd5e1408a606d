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
# The corpus's h family drives a real HAProxy in front of lacquerd, as
# varnishtest does: install it when it is missing.
if ! command -v haproxy >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q haproxy || { apt-get update -q && apt-get install -y -q haproxy; }
    else
        echo "test.sh: haproxy is missing (the vtc h family needs it): install it, e.g. apt-get install haproxy" >&2
        exit 1
    fi
fi
python3 tests/vtc/ratchet.py --jobs 2
