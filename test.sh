#!/usr/bin/env bash
# The whole test suite: unit and integration tests of every crate
# (including the VCL corpus ratchet), then Varnish's own .vtc suite run
# against lacquerd with the conformance ratchet, then a bounded batch of
# generated differential scenarios against Debian's varnishd. Fails on any
# failure.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p target
cargo test --workspace 2>&1 | tee target/test.log
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "cargo: %d passed, %d failed, %d skipped\n", p, f, i }' target/test.log
cargo build -p lacquer -p lacquerd -p lacquer-difftest
# Peers the corpus drives besides lacquerd, as varnishtest does: HAProxy
# (the h family) and nghttp (a02022). Install them when they are missing.
need=""
command -v haproxy >/dev/null 2>&1 || need="$need haproxy"
command -v nghttp >/dev/null 2>&1 || need="$need nghttp2-client"
if [ -n "$need" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q $need || { apt-get update -q && apt-get install -y -q $need; }
    else
        echo "test.sh: missing$need (the vtc corpus drives them): install with apt-get install$need" >&2
        exit 1
    fi
fi
python3 tests/vtc/ratchet.py --jobs 2
# Generated scenarios run against lacquerd and varnishd side by side: a hang
# or a crash fails the run, other differences are reported (tests/diff/).
command -v varnishd >/dev/null 2>&1 || { echo "test.sh: varnishd missing (apt-get install varnish)" >&2; exit 1; }
target/debug/lacquer-difftest batch --seed 1 --count 60 --fail-on hang,crash
