#!/usr/bin/env python3
"""Instructions per request of the auth-offload forms (bench/run scenario 6b) under callgrind.

Runs target/release/lacquerd under `valgrind --tool=callgrind` once per form, with the VCL bench/run
uses: the restart rewrite (bench/run's VCL) and the report's curl VCL calling lacquerd itself
(AUTH_CURL_VCL), in front of a small origin that answers as bench/run's nginx does. After a warm-up
that puts the token and the page in the cache, the counters are zeroed (callgrind_control -z), N
keep-alive requests for /auth/1k with a bearer token are sent one after another, and the counters are
dumped (callgrind_control -d): instructions per request = the dump's total / N, every thread of
lacquerd counted. Instruction counts do not depend on the machine's load, so the ratio of the two
forms can be taken while others work.

    bench/curl_callgrind.py [N] [extra lacquerd -p arguments ...]

With `wait` as the first argument it measures scenario 17's form instead: every request's vcl_recv
calls an outside service (bench/async/slow_origin.c, answering at once here) through vmod curl, so
the figure is what lacquerd spends per request and call (`bench/curl_callgrind.py wait [N]`).

Extra arguments are lacquerd parameters (e.g. `bench/curl_callgrind.py 2000 vsl_mask=-ReqHeader`).
LACQUERD=/path/to/lacquerd measures another build (e.g. a copy of an earlier one, to compare).
Build first: cargo build --release -p lacquerd -p lacquer.
"""

import http.client
import importlib.machinery
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
LACQUERD = Path(os.environ.get("LACQUERD", REPO / "target" / "release" / "lacquerd"))


def bench_run():
    loader = importlib.machinery.SourceFileLoader("bench_run", str(BENCH / "run"))
    spec = importlib.util.spec_from_loader("bench_run", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


class Origin(BaseHTTPRequestHandler):
    """bench/run's nginx origin, the parts scenario 6b uses."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/oauth/token_validation":
            body = b"valid"
            extra = [("OAuth-User-Id", "42"), ("OAuth-Country", "ZA"), ("OAuth-User-Scope", "read")]
        else:
            body = b"x" * 1024
            extra = []
        self.send_response(200)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(port, proc, secs=60):
    end = time.time() + secs
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"lacquerd exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("GET", "/synth")
            c.getresponse().read()
            c.close()
            return
        except (OSError, http.client.HTTPException):
            time.sleep(0.5)
    sys.exit("lacquerd did not start")


def requests(port, n, path="/auth/1k"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for _ in range(n):
        c.request("GET", path, headers={"Authorization": "Bearer tok-12345"})
        r = c.getresponse()
        r.read()
        if r.status != 200:
            sys.exit(f"/auth/1k answered {r.status}")
    c.close()


def measure(form, template, oport, n, params, work, path="/auth/1k"):
    port = free_port()
    vcl = work / f"{form}.vcl"
    vcl.write_text(template % dict(origin=oport, self=port, slow=oport))
    out = work / f"callgrind.{form}.out"
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(LACQUERD),
           "-a", f"127.0.0.1:{port}", "-f", str(vcl), "-n", str(work / f"n-{form}"), "-s", "malloc,256m",
           "-p", "timeout_idle=120", "-F"]
    for p in params:
        cmd += ["-p", p]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(work / f"{form}.log", "w"))
    try:
        wait_up(port, p)
        requests(port, 200, path)  # warm: token and page cached, pools and buffers grown
        subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True, capture_output=True)
        requests(port, n, path)
        subprocess.run(["callgrind_control", "-d", str(p.pid)], check=True, capture_output=True)
        dumps = sorted(work.glob(f"callgrind.{form}.out*"), key=os.path.getmtime)
        total = None
        for line in dumps[-1].read_text(errors="replace").splitlines():
            m = re.match(r"(?:totals|summary):\s+(\d+)", line)
            if m:
                total = int(m.group(1))
        if total is None:
            sys.exit(f"no totals in {dumps[-1]}")
        return total / n, dumps[-1]
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()


def wait_form(br, n, params):
    """Scenario 17's VCL against slow_origin answering at once: instructions per request."""
    work = Path(tempfile.mkdtemp(prefix="curl-callgrind-"))
    exe = work / "slow_origin"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(BENCH / "async" / "slow_origin.c")], check=True)
    sport = free_port()
    slow = subprocess.Popen([str(exe), str(sport), "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        per, dump = measure("curlwait", br.CURL_WAIT_VCL, sport, n, params, work, path="/")
        print(f"curlwait {per:10,.0f} instructions per request and call ({n} requests; {dump})")
    finally:
        slow.send_signal(signal.SIGTERM)
        slow.wait(timeout=10)


def main():
    args = sys.argv[1:]
    wait = bool(args) and args[0] == "wait"
    if wait:
        args = args[1:]
    n = int(args[0]) if args else 2000
    params = args[1:]
    if not LACQUERD.exists():
        sys.exit(f"{LACQUERD} missing: cargo build --release -p lacquerd -p lacquer")
    br = bench_run()
    if wait:
        return wait_form(br, n, params)
    origin = ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    oport = origin.server_address[1]
    work = Path(tempfile.mkdtemp(prefix="curl-callgrind-"))
    forms = {"restart": br.VCL, "curl": br.AUTH_CURL_VCL}
    got = {}
    for form, template in forms.items():
        per, dump = measure(form, template, oport, n, params, work)
        got[form] = per
        print(f"{form:8} {per:10,.0f} instructions per request ({n} requests; {dump})", flush=True)
    print(f"curl / restart: {got['curl'] / got['restart']:.2f}"
          + (f"  (lacquerd -p {' -p '.join(params)})" if params else ""))


if __name__ == "__main__":
    main()
