#!/usr/bin/env python3
"""Scenario `tls` of bench/run: Lacquer's own TLS beside `hitch -> varnishd` and nginx.

Issue 17's figures, side by side in one run. Three TLS servers answer cache hits
from the same origin (nginx serving static files over plain HTTP):

- lacquerd terminating TLS itself (`-A hitch.conf`, the same file shape Hitch reads);
- Hitch (2 workers) in front of varnishd 7.1, PROXY v2 between them, as users run it today;
- nginx (2 workers) with `ssl` and `proxy_cache`.

All three use one ECDSA P-256 certificate made by this script. Loads, each against the three
in turn, interleaved over the rounds (A B C A B C ...), median:

- `handshake`: full TLS 1.3 handshakes per second: `handshake_load` (an example of the lacquer-tls
  crate: rustls + aws-lc-rs, 8 client threads, X25519 as OpenSSL 3.0 clients offer), each
  connection new, with a full handshake (no session offered; every handshake's kind is checked
  and a resumed one is reported, not counted) and one HTTP/1.0 request of 1 KB read to the close
  (wrk is not used here: it resumes its sessions on reconnect);
- `stime`: the same with 8 `openssl s_time -new` clients, as the earlier runs measured it. Each
  s_time process costs more CPU per handshake than the servers, so on a small machine the
  clients bound the rate and pull the ratios towards 1;
- `ka1k`: keep-alive 1 KB hits over TLS, `wrk -t2 -c100`: req/s, p99;
- `big10m`: 10 MB hits over TLS, `wrk -t2 -c8`: GB/s;
- `reload`: the `handshake` load while the certificate file is replaced and the server told to
  reload (SIGHUP: lacquerd re-reads its certificates, Hitch and nginx reload their configuration)
  four times a second: handshakes/s reached and requests failed (wrk's socket errors, non-2xx);
- `idle`: resident memory per idle TLS connection: each server fresh, warmed with 1,000
  connections first, then 10,000 TLS connections (one request each, then held open); the RSS
  delta (sum over the server's processes: for the Hitch pair, Hitch's and varnishd's) per
  connection, in KiB.

Beside every rate, the CPU the server spent: utime + stime from /proc/PID/stat before and after
the load, summed over the server's processes (for the Hitch pair, Hitch's master and workers and
varnishd's manager and child), divided by the handshakes or requests done: CPU microseconds per
operation, which does not depend on how much of the machine the client took. The client's own
CPU per operation is reported too.

Targets (issue 17): handshakes and keep-alive req/s >= 1.5x hitch->varnishd, GB/s >= 1.2x,
<= 32 KiB per idle TLS connection.

Usage: bench/tls.py --lacquerd BIN --out DIR [--quick] [--only LOAD[,LOAD...]] [--loadgen BIN]
(without --loadgen, `cargo build --release -p lacquer-tls --example handshake_load` makes it).
Writes DIR/tls.md and DIR/tls.json. Everything listens on 127.0.0.1, every step is bounded.
"""

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import time
from pathlib import Path

SERVERS = ["lacquerd", "hitch+varnishd", "nginx"]
LOADS = ["handshake", "stime", "ka1k", "big10m", "idle", "reload"]
REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
UNITS_T = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}
UNITS_B = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3, "TB": 1024 ** 4}

VCL = """vcl 4.1;
# The VCL both lacquerd and varnishd run in the TLS benchmark: every GET is a hit after the first.
backend origin { .host = "127.0.0.1"; .port = "%(origin)d"; }
sub vcl_backend_response { set beresp.ttl = 1h; }
"""

ORIGIN_CONF = """worker_processes 1;
pid %(dir)s/nginx.pid;
error_log %(dir)s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    keepalive_requests 1000000;
    client_body_temp_path %(dir)s/body;
    proxy_temp_path %(dir)s/proxy;
    fastcgi_temp_path %(dir)s/fcgi;
    uwsgi_temp_path %(dir)s/uwsgi;
    scgi_temp_path %(dir)s/scgi;
    default_type application/octet-stream;
    server { listen 127.0.0.1:%(port)d; root %(www)s; }
}
"""

NGINX_TLS_CONF = """worker_processes 2;
worker_rlimit_nofile 40000;
pid %(dir)s/nginx.pid;
error_log %(dir)s/error.log warn;
events { worker_connections 20000; }
http {
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    client_body_temp_path %(dir)s/body;
    proxy_temp_path %(dir)s/proxy;
    fastcgi_temp_path %(dir)s/fcgi;
    uwsgi_temp_path %(dir)s/uwsgi;
    scgi_temp_path %(dir)s/scgi;
    proxy_cache_path %(dir)s/cache levels=1:2 keys_zone=c:64m max_size=2g inactive=1h use_temp_path=off;
    upstream origin { server 127.0.0.1:%(origin)d; keepalive 32; }
    server {
        listen 127.0.0.1:%(port)d ssl;
        ssl_certificate %(crt)s;
        ssl_certificate_key %(key)s;
        ssl_protocols TLSv1.2 TLSv1.3;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        location / { proxy_pass http://origin; proxy_cache c; proxy_cache_valid 200 1h; }
    }
}
"""

PROCS = []


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] tls: {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sh(cmd, timeout=60):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}): {r.stderr.strip()[-600:]}")
    return r


def spawn(name, cmd, logfile):
    f = open(logfile, "wb")
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    PROCS.append((name, p))
    return p


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)


def descendants(roots):
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                st = Path(f"/proc/{d}/stat").read_text()
                parent[int(d)] = int(st[st.rindex(")") + 2:].split()[1])
            except (OSError, ValueError):
                pass
    out, todo = [], list(roots)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(c for c, pp in parent.items() if pp == p)
    return out


def rss_kb(roots):
    total = 0
    for pid in descendants(roots):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def cpu_ticks(roots):
    """utime + stime of every process under `roots`, by pid, in clock ticks."""
    out = {}
    for pid in descendants(roots):
        try:
            st = Path(f"/proc/{pid}/stat").read_text()
            f = st[st.rindex(")") + 2:].split()
            out[pid] = int(f[11]) + int(f[12])
        except (OSError, ValueError, IndexError):
            pass
    return out


def cpu_spent(before, after):
    """CPU seconds spent between two `cpu_ticks` readings (processes started since count whole)."""
    return sum(t - before.get(pid, 0) for pid, t in after.items()) / CLK_TCK


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def client_ctx():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def https_get(port, path, timeout=10):
    """One GET over TLS; returns (status, TLS version)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with client_ctx().wrap_socket(raw, server_hostname="bench.test") as s:
            version = s.version()
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
            line = data.split(b"\r\n", 1)[0].decode(errors="replace")
            return (int(line.split()[1]) if line.startswith("HTTP/") else 0), version


def wait_tls(port, procs, name, timeout=30):
    end = time.time() + timeout
    last = ""
    while time.time() < end:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode} at startup")
        try:
            st, ver = https_get(port, "/1k", timeout=2)
            if st == 200:
                return ver
            last = f"status {st}"
        except (OSError, ssl.SSLError) as e:
            last = str(e)
        time.sleep(0.2)
    raise RuntimeError(f"{name} did not answer 200 over TLS on 127.0.0.1:{port} within {timeout}s ({last})")


class Bench:
    def __init__(self, lacquerd, work):
        self.lacquerd = lacquerd
        self.work = work
        self.port = {}
        self.procs = {}
        work.mkdir(parents=True)
        www = work / "www"
        www.mkdir()
        for name, size in (("1k", 1024), ("10m", 10 * 1024 * 1024)):
            (www / name).write_bytes((b"lacquer-bench-0123456789abcdef\n" * (size // 31 + 1))[:size])
        self.key, self.crt, self.pem = work / "bench.key", work / "bench.crt", work / "bench.pem"
        sh(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(self.key), "-out", str(self.crt), "-days", "2", "-subj", "/CN=bench.test",
            "-addext", "subjectAltName=DNS:bench.test,IP:127.0.0.1"])
        self.pem.write_text(self.key.read_text() + self.crt.read_text())
        os.chmod(self.pem, 0o644)
        # A second certificate for the same names, swapped in by the reload load.
        k2, c2 = work / "alt.key", work / "alt.crt"
        sh(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(k2), "-out", str(c2), "-days", "2", "-subj", "/CN=bench.test",
            "-addext", "subjectAltName=DNS:bench.test,IP:127.0.0.1"])
        self.alt = {"key": k2.read_text(), "crt": c2.read_text()}
        self.orig = {"key": self.key.read_text(), "crt": self.crt.read_text()}
        d = work / "origin"
        d.mkdir()
        self.origin = free_port()
        (d / "nginx.conf").write_text(ORIGIN_CONF % dict(dir=d, port=self.origin, www=www))
        p = spawn("origin", ["nginx", "-c", str(d / "nginx.conf"), "-p", str(d), "-g", "daemon off;"],
                  work / "origin.log")
        end = time.time() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.origin), timeout=1).close()
                break
            except OSError:
                if time.time() > end or p.poll() is not None:
                    raise RuntimeError(f"origin nginx did not start (see {work}/origin.log)")
                time.sleep(0.1)
        (work / "bench.vcl").write_text(VCL % dict(origin=self.origin))

    def start(self, name):
        w = self.work
        port = free_port()
        self.port[name] = port
        if name == "lacquerd":
            shutil.rmtree(w / "lq", ignore_errors=True)
            (w / "lacquer-hitch.conf").write_text(
                f'frontend = "[127.0.0.1]:{port}"\npem-file = "{self.pem}"\n')
            cmd = [str(self.lacquerd), "-a", f"127.0.0.1:{free_port()}", "-A", str(w / "lacquer-hitch.conf"),
                   "-f", str(w / "bench.vcl"), "-n", str(w / "lq"), "-s", "malloc,1G",
                   "-p", "timeout_idle=120", "-F"]
            procs = [spawn(name, cmd, w / "lacquerd.log")]
        elif name == "hitch+varnishd":
            shutil.rmtree(w / "vd", ignore_errors=True)
            vport = free_port()
            vd = spawn("varnishd", ["varnishd", "-a", f"127.0.0.1:{vport},PROXY", "-f", str(w / "bench.vcl"),
                                    "-n", str(w / "vd"), "-s", "malloc,1G", "-p", "timeout_idle=120", "-F"],
                       w / "varnishd.log")
            end = time.time() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", vport), timeout=1).close()
                    break
                except OSError:
                    if time.time() > end or vd.poll() is not None:
                        raise RuntimeError(f"varnishd did not start (see {w}/varnishd.log)")
                    time.sleep(0.1)
            (w / "hitch.conf").write_text(
                f'frontend = "[127.0.0.1]:{port}"\nbackend = "[127.0.0.1]:{vport}"\npem-file = "{self.pem}"\n'
                f'write-proxy-v2 = on\nworkers = 2\nuser = "nobody"\ndaemon = off\n')
            hi = spawn("hitch", ["hitch", f"--config={w / 'hitch.conf'}"], w / "hitch.log")
            procs = [vd, hi]
        else:
            d = w / "nginx"
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
            (d / "nginx.conf").write_text(NGINX_TLS_CONF % dict(dir=d, port=port, origin=self.origin,
                                                                crt=self.crt, key=self.key))
            procs = [spawn(name, ["nginx", "-c", str(d / "nginx.conf"), "-p", str(d), "-g", "daemon off;"],
                           w / "nginx.log")]
        self.procs[name] = procs
        ver = wait_tls(port, procs, name)
        for path in ("/1k", "/10m"):
            https_get(port, path, timeout=30)
        return ver

    def restart(self, name):
        for p in reversed(self.procs.get(name, [])):
            stop(p)
        return self.start(name)

    def swap_and_reload(self, name, n):
        """Writes the n-th certificate (alternating two) into place, then SIGHUPs the server."""
        c = self.alt if n % 2 == 0 else self.orig
        for path, text in ((self.key, c["key"]), (self.crt, c["crt"]), (self.pem, c["key"] + c["crt"])):
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        # lacquerd and nginx: the process started; Hitch: its master (the last process of the pair).
        self.procs[name][-1].send_signal(signal.SIGHUP)

    def alive(self, name):
        return all(p.poll() is None for p in self.procs[name])


def parse_wrk(out):
    r = {"errors": 0, "non2xx": 0}
    m = re.search(r"(\d+) requests in ([\d.]+\w+), ([\d.]+)(\w+) read", out)
    if m:
        r["requests"] = int(m.group(1))
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m:
        r["rps"] = float(m.group(1))
    m = re.search(r"Transfer/sec:\s+([\d.]+)(\w+)", out)
    if m:
        r["gbps"] = float(m.group(1)) * UNITS_B[m.group(2)] / 1e9
    m = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s|m)", out, re.M)
    if m:
        r["p99"] = float(m.group(1)) * UNITS_T[m.group(2)]
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        r["errors"] = sum(int(x) for x in m.groups())
        r["error_detail"] = m.group(0)
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        r["non2xx"] = int(m.group(1))
    return r


def wrk(port, path, threads, conns, secs, headers=()):
    cmd = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{secs}s", "--timeout", "5s", "--latency"]
    for h in headers:
        cmd += ["-H", h]
    cmd.append(f"https://127.0.0.1:{port}{path}")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 30).stdout
    except subprocess.TimeoutExpired:
        return {"failed": "wrk did not finish in time"}
    r = parse_wrk(out)
    if "rps" not in r:
        r["failed"] = "wrk output unparsable: " + out.strip()[-300:]
    return r


STIME_CLIENTS = 8


def s_time(port, secs, clients=STIME_CLIENTS):
    """Full handshakes per second: `clients` `openssl s_time -new` in parallel, one GET each time."""
    cmd = ["openssl", "s_time", "-connect", f"127.0.0.1:{port}", "-new", "-time", str(secs), "-www", "/1k"]
    t0 = time.time()
    ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
          for _ in range(clients)]
    total, failed = 0, []
    for p in ps:
        try:
            out, _ = p.communicate(timeout=secs + 30)
        except subprocess.TimeoutExpired:
            p.kill()
            out = "s_time did not finish in time"
        m = re.search(r"(\d+) connections in [\d.]+ real seconds", out)
        if p.returncode != 0 or not m:
            failed.append(out.strip()[-200:])
        if m:
            total += int(m.group(1))
    el = time.time() - t0
    r = {"rps": total / el, "requests": total, "errors": len(failed), "non2xx": 0}
    if failed:
        r["error_detail"] = f"{len(failed)} s_time client(s) failed: {failed[0]}"
    return r


LOADGEN_CLIENTS = 8


def loadgen(binary, port, secs, clients=LOADGEN_CLIENTS):
    """Full handshakes per second with `handshake_load`: `clients` threads, a new connection and a
    full handshake (resumption off, checked) per HTTP/1.0 request of 1 KB."""
    cmd = [str(binary), "--connect", f"127.0.0.1:{port}", "--sni", "bench.test", "--path", "/1k",
           "--secs", str(secs), "--clients", str(clients)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60)
    except subprocess.TimeoutExpired:
        return {"failed": "handshake_load did not finish in time"}
    try:
        j = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"failed": f"handshake_load gave no result ({p.returncode}): {(p.stdout + p.stderr).strip()[-300:]}"}
    r = {"rps": j["rate"], "requests": j["handshakes"], "errors": j["errors"], "non2xx": 0,
         "resumed": j["resumed"], "hello_retries": j["hello_retries"], "negotiated": j["negotiated"]}
    if j["errors"]:
        r["error_detail"] = f"{j['errors']} failed connections, first: {j['first_error']}"
    if j["resumed"]:
        r["failed"] = f"{j['resumed']} handshakes were resumed, not full"
    return r


# name -> (path, threads, connections, headers, metric); "handshake" runs handshake_load and
# "stime" runs s_time instead of wrk
WRK_LOADS = {
    "handshake": ("/1k", 0, LOADGEN_CLIENTS, (), "rps"),
    "stime": ("/1k", 0, STIME_CLIENTS, (), "rps"),
    "ka1k": ("/1k", 2, 100, (), "rps"),
    "big10m": ("/10m", 2, 8, (), "gbps"),
}


async def _idle(port, count, hold):
    """`count` TLS connections, one request each, held open while `hold()` runs."""
    ctx = client_ctx()
    conns, failed = [], 0
    req = b"GET /1k HTTP/1.1\r\nHost: bench.test\r\n\r\n"

    async def one():
        nonlocal failed
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="bench.test"), 20)
            writer.write(req)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
            n = int(re.search(rb"\r\ncontent-length:\s*(\d+)", head, re.I).group(1))
            await asyncio.wait_for(reader.readexactly(n), 20)
            if b" 200 " not in head.split(b"\r\n", 1)[0] + b" ":
                failed += 1
            conns.append(writer)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, AttributeError, ssl.SSLError):
            failed += 1

    for start in range(0, count, 250):
        await asyncio.gather(*(one() for _ in range(min(250, count - start))))
    await hold()
    for w in conns:
        w.transport.abort()
    return len(conns), failed


def reload_storm(b, names, secs, lg):
    """The handshake load (`handshake_load` when built, else s_time) while certificates are swapped
    and reloaded four times a second."""
    import threading
    out = {}
    for n in names:
        res = {}
        th = threading.Thread(target=lambda: res.update(
            loadgen(lg, b.port[n], secs) if lg else s_time(b.port[n], secs)))
        th.start()
        reloads = 0
        end = time.time() + secs - 0.5
        time.sleep(0.25)
        while time.time() < end:
            b.swap_and_reload(n, reloads)
            reloads += 1
            time.sleep(0.25)
        th.join(secs + 60)
        r = dict(res)
        r["reloads"] = reloads
        if "rps" not in r:
            r["failed"] = "the handshake load gave no result"
        if not b.alive(n):
            r["failed"] = f"{n} died during the reloads"
        out[n] = r
        log(f"reload {n:<15} {r.get('rps', 0):.0f} full handshakes/s over {reloads} reloads, "
            f"{r.get('errors', 0)} failed {'connections' if lg else 'clients'}" + (f" ({r['error_detail']})" if r.get("error_detail") else "")
            + (f" FAILED {r['failed']}" if "failed" in r else ""))
        b.swap_and_reload(n, 1)  # the original certificate back in place
        time.sleep(1)
    return out


def idle(b, names, nconn):
    out = {}
    for n in names:
        r = {}
        try:
            b.restart(n)
            roots = [p.pid for p in b.procs[n]]

            async def noop():
                await asyncio.sleep(0)
            asyncio.run(asyncio.wait_for(_idle(b.port[n], 1000, noop), 120))
            time.sleep(2)
            before = rss_kb(roots)
            held = {}

            async def hold():
                await asyncio.sleep(2)
                held["rss"] = rss_kb(roots)
            opened, failed = asyncio.run(asyncio.wait_for(_idle(b.port[n], nconn, hold), 400))
            r["kib_per_conn"] = (held["rss"] - before) / max(opened, 1)
            r["opened"], r["failed"] = opened, failed
            r["rss_before_mb"], r["rss_held_mb"] = before / 1024, held["rss"] / 1024
            log(f"idle {n:<15} {opened} TLS connections held ({failed} failed): RSS {before / 1024:.1f} -> "
                f"{held['rss'] / 1024:.1f} MB, {r['kib_per_conn']:.1f} KiB per connection")
        except Exception as e:  # noqa: BLE001 - reported in the table, the run goes on
            r["failed_run"] = f"{type(e).__name__}: {e}"
            log(f"idle {n}: {r['failed_run']}")
        out[n] = r
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lacquerd", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", help="loads: " + " ".join(LOADS))
    ap.add_argument("--loadgen", help="the handshake_load binary (default: built with cargo)")
    a = ap.parse_args()
    only = a.only.split(",") if a.only else LOADS
    for ld in only:
        if ld not in LOADS:
            sys.exit(f"tls: unknown load {ld!r}; known: {' '.join(LOADS)}")
    for tool in ("wrk", "hitch", "varnishd", "nginx", "openssl"):
        if not shutil.which(tool):
            sys.exit(f"tls: {tool} is missing (apt-get install -y wrk hitch varnish nginx openssl)")
    if ("handshake" in only or "reload" in only) and not a.loadgen:
        r = subprocess.run(["cargo", "build", "--release", "-p", "lacquerd", "-p", "lacquer", "-p", "lacquer-tls",
                            "--example", "handshake_load"], cwd=REPO, capture_output=True, text=True,
                           timeout=3600)
        if r.returncode != 0:
            sys.exit(f"tls: cargo build of handshake_load failed:\n{r.stderr[-3000:]}")
        a.loadgen = REPO / "target" / "release" / "examples" / "handshake_load"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    rounds, secs = (2, 3) if a.quick else (3, 5)
    nconn = 10000
    out = Path(a.out)
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)
    results = {"rounds": rounds, "secs": secs, "versions": {}, "loads": {}}

    def on_signal(sig, frame):
        for _, p in reversed(PROCS):
            stop(p)
        sys.exit(f"tls: interrupted by signal {sig}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        b = Bench(a.lacquerd, work)
        names = []
        for n in SERVERS:
            try:
                results["versions"][n] = b.start(n)
                names.append(n)
                log(f"{n} answers over {results['versions'][n]} on 127.0.0.1:{b.port[n]}")
            except RuntimeError as e:
                log(f"could not start {n}: {e}")
                results["loads"].setdefault("_startfail", {})[n] = str(e)
        loads = [ld for ld in WRK_LOADS if ld in only]
        raw = {ld: {n: [] for n in names} for ld in loads}
        for rnd in range(rounds):
            for ld in loads:
                path, t, c, hdr, metric = WRK_LOADS[ld]
                order = names[rnd % len(names):] + names[:rnd % len(names)]
                for n in order:
                    if not b.alive(n):
                        raw[ld][n].append({"failed": f"{n} is not running"})
                        continue
                    roots = [p.pid for p in b.procs[n]]
                    before, c0 = cpu_ticks(roots), children_cpu()
                    if ld == "handshake":
                        r = loadgen(a.loadgen, b.port[n], secs)
                    elif ld == "stime":
                        r = s_time(b.port[n], secs)
                    else:
                        r = wrk(b.port[n], path, t, c, secs, hdr)
                    r["server_cpu_s"] = cpu_spent(before, cpu_ticks(roots))
                    r["client_cpu_s"] = children_cpu() - c0
                    if r.get("requests"):
                        r["server_us_per_op"] = r["server_cpu_s"] / r["requests"] * 1e6
                        r["client_us_per_op"] = r["client_cpu_s"] / r["requests"] * 1e6
                    raw[ld][n].append(r)
                    desc = r.get("failed") or (
                        f"{r['gbps']:.2f} GB/s" if metric == "gbps" else
                        f"{r['rps']:.0f} full handshakes/s" if ld in ("handshake", "stime") else
                        f"{r['rps']:.0f} req/s p99 {r.get('p99', 0):.2f} ms")
                    if "server_us_per_op" in r:
                        desc += (f", server {r['server_us_per_op']:.0f} us CPU per "
                                 f"{'handshake' if ld in ('handshake', 'stime') else 'request'}"
                                 f" (client {r['client_us_per_op']:.0f} us)")
                    bad = (f" ERRORS {r.get('error_detail', '')} non2xx={r['non2xx']}"
                           if r.get("errors") or r.get("non2xx") else "")
                    log(f"round {rnd + 1}/{rounds} {ld:<9} {n:<15} {desc}{bad}")
        for ld in loads:
            metric = WRK_LOADS[ld][4]
            res = {}
            for n in names:
                ok = [r for r in raw[ld][n] if "failed" not in r]
                if not ok:
                    res[n] = {"failed": raw[ld][n][-1]["failed"] if raw[ld][n] else "no run"}
                    continue
                res[n] = {metric: statistics.median(r[metric] for r in ok),
                          "p99": statistics.median(r.get("p99", 0) for r in ok),
                          "server_us_per_op": statistics.median(r.get("server_us_per_op", 0) for r in ok),
                          "client_us_per_op": statistics.median(r.get("client_us_per_op", 0) for r in ok),
                          "runs": raw[ld][n],
                          "errors": sum(r.get("errors", 0) for r in raw[ld][n]),
                          "non2xx": sum(r.get("non2xx", 0) for r in raw[ld][n])}
            results["loads"][ld] = res
        if "reload" in only:
            results["loads"]["reload"] = reload_storm(b, names, secs * 2, a.loadgen)
        if "idle" in only:
            results["loads"]["idle"] = idle(b, names, nconn)
    finally:
        for _, p in reversed(PROCS):
            stop(p)
    for n in ("lacquerd", "varnishd", "hitch", "nginx"):
        lf = work / f"{n}.log"
        if lf.exists() and lf.stat().st_size:
            results.setdefault("log_tails", {})[n] = lf.read_text(errors="replace")[-1500:]
    shutil.rmtree(work, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tls.json").write_text(json.dumps(results, indent=1))
    md = report(results, rounds, secs, nconn)
    (out / "tls.md").write_text(md)
    print(md, flush=True)


def report(results, rounds, secs, nconn):
    L = results["loads"]
    lines = ["## TLS: lacquerd's own TLS beside hitch -> varnishd (PROXY v2) and nginx", "",
             f"`wrk` (`handshake_load` and `openssl s_time` for handshakes) over https, {rounds} round(s) of {secs} s per server, interleaved, median; one ECDSA P-256 "
             "certificate for all; the protocol each server negotiated: "
             + ", ".join(f"{n} {v}" for n, v in results["versions"].items()) + ".", "",
             "| load | lacquerd | hitch+varnishd | nginx | lacquerd / hitch+varnishd | target |",
             "| --- | --- | --- | --- | --- | --- |"]
    rows = (("handshake", "rps", f"full TLS 1.3 handshakes/s ({LOADGEN_CLIENTS} handshake_load threads, 1 KB each)",
             ">= 1.5"),
            ("handshake", "server_us_per_op", "server CPU µs per full handshake (handshake_load)",
             "hitch+varnishd / lacquerd"),
            ("handshake", "client_us_per_op", "client CPU µs per full handshake (handshake_load)", ""),
            ("stime", "rps", f"full TLS 1.3 handshakes/s ({STIME_CLIENTS} s_time -new clients, 1 KB each)", ""),
            ("stime", "server_us_per_op", "server CPU µs per full handshake (s_time)", "hitch+varnishd / lacquerd"),
            ("stime", "client_us_per_op", "client CPU µs per full handshake (s_time)", ""),
            ("ka1k", "rps", "keep-alive 1 KB hits over TLS, c100: req/s", ">= 1.5"),
            ("ka1k", "server_us_per_op", "server CPU µs per keep-alive 1 KB request", "hitch+varnishd / lacquerd"),
            ("big10m", "gbps", "10 MB hits over TLS, c8: GB/s", ">= 1.2"))
    for ld, metric, title, target in rows:
        if ld not in L:
            continue
        cells = []
        for n in SERVERS:
            d = L[ld].get(n, {"failed": "not run"})
            if "failed" in d:
                cells.append(f"failed: {d['failed'][:60]}")
            else:
                v = f"{d[metric]:.2f}" if metric == "gbps" else f"{d[metric]:.0f}"
                extra = f" (p99 {d['p99']:.1f} ms)" if metric == "rps" and d.get("p99") else ""
                err = (f" errors {d['errors']} non-2xx {d['non2xx']}"
                       if metric in ("rps", "gbps") and (d["errors"] or d["non2xx"]) else "")
                cells.append(v + extra + err)
        lq, hv = L[ld].get("lacquerd", {}), L[ld].get("hitch+varnishd", {})
        if not target:
            ratio = "-"
        elif metric == "server_us_per_op":
            # Less CPU is better: the ratio is the peer's cost over lacquerd's.
            ratio = f"{hv[metric] / lq[metric]:.2f}" if lq.get(metric) and hv.get(metric) else "-"
        else:
            ratio = f"{lq[metric] / hv[metric]:.2f}" if lq.get(metric) and hv.get(metric) else "-"
        if metric == "server_us_per_op":
            target = ""
        lines.append(f"| {title} | {' | '.join(cells)} | {ratio} | {target} |")
    if "reload" in L:
        cells = []
        for n in SERVERS:
            d = L["reload"].get(n, {"failed": "not run"})
            if "failed" in d:
                cells.append(f"failed: {d['failed'][:60]}")
            else:
                cells.append(f"{d['rps']:.0f}/s, {d['reloads']} reloads, {d['errors']} failed")
        lq, hv = L["reload"].get("lacquerd", {}), L["reload"].get("hitch+varnishd", {})
        ratio = f"{lq['rps'] / hv['rps']:.2f}" if lq.get("rps") and hv.get("rps") else "-"
        lines.append(f"| full handshakes/s while certificates are swapped (SIGHUP 4/s) | {' | '.join(cells)} | "
                     f"{ratio} | 0 failed |")
    if "idle" in L:
        cells = []
        for n in SERVERS:
            d = L["idle"].get(n, {"failed_run": "not run"})
            if "failed_run" in d:
                cells.append(f"failed: {d['failed_run'][:60]}")
            else:
                cells.append(f"{d['kib_per_conn']:.1f} ({d['opened']} held, {d['failed']} failed)")
        lq, hv = L["idle"].get("lacquerd", {}), L["idle"].get("hitch+varnishd", {})
        ratio = (f"{lq['kib_per_conn'] / hv['kib_per_conn']:.2f}"
                 if lq.get("kib_per_conn") and hv.get("kib_per_conn") else "-")
        lines.append(f"| RSS per idle TLS connection ({nconn} held): KiB | {' | '.join(cells)} | {ratio} | "
                     "<= 32 KiB |")
    for n, why in L.get("_startfail", {}).items():
        lines += ["", f"**{n} did not start: {why[:300]}**"]
    lines += ["", "The handshake clients do a full handshake each time too (ECDHE and a signature check), on the "
              "same cores: on a small machine they bound the rate as much as the server does, which pulls the "
              "ratios towards 1. The CPU rows do not depend on that: they are the CPU time the server's processes "
              "spent (utime + stime from /proc, summed over the processes: for the Hitch pair, Hitch's and "
              "varnishd's) per operation done; their ratio column is hitch+varnishd's cost over lacquerd's.", "", "For the Hitch pair, RSS is Hitch's and varnishd's processes together (each connection is "
              "held by both); for lacquerd and nginx, their own processes."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
