#!/usr/bin/env python3
"""Disk caches side by side: lacquerd `-s disk`, varnishd `-s file` and an nginx
proxy_cache on disk, each with a store of the same size in front of the same
origin, a working set larger than the memory the caches are given (by default
2 GB of 100 KB objects; varnishd and lacquerd get no malloc store), random hits
at c32 and c100 (throughput, p99), then a restart of each: time from start to
the first hit, and the recovery time (lacquerd's index scan, nginx's cache
loader; varnishd's file store forgets everything).

One server at a time, each one's files deleted before the next starts, so the
disk holds one store at a time. Loopback only, every step bounded in time.
Run by `bench/run --only disk`; alone:
    bench/disk.py --lacquerd target/release/lacquerd --out /tmp/disk [--quick]
Writes OUT/disk.md and OUT/disk.json.
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PROCS = []


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(name, cmd, out):
    f = open(out / f"{name}.log", "ab")
    p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    PROCS.append(p)
    return p


def stop(p, sig=signal.SIGTERM):
    if p.poll() is None:
        try:
            os.killpg(p.pid, sig)
        except OSError:
            pass
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=5)


def get(port, path, timeout=5):
    """(status, x-cache-ish hit flag, body length) of one GET."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path, headers={"Host": "bench"})
        r = c.getresponse()
        body = r.read()
        return r.status, len(body)
    finally:
        c.close()


def wait_answer(port, p, what, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if p.poll() is not None:
            raise RuntimeError(f"{what} exited with {p.returncode} at startup")
        try:
            get(port, "/ready", timeout=1)
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"{what} did not answer within {timeout}s")


ORIGIN = """worker_processes 2;
pid %(dir)s/origin.pid;
error_log %(dir)s/origin-error.log warn;
events { worker_connections 4096; }
http {
    access_log %(dir)s/origin-access.log;
    sendfile on;
    keepalive_requests 1000000;
    client_body_temp_path %(dir)s/t1; proxy_temp_path %(dir)s/t2; fastcgi_temp_path %(dir)s/t3;
    uwsgi_temp_path %(dir)s/t4; scgi_temp_path %(dir)s/t5;
    server {
        listen 127.0.0.1:%(port)d;
        root %(www)s;
        location /d/ { try_files /100k =404; }
        location = /ready { return 200 "ok"; }
    }
}
"""

PROXY = """worker_processes 2;
pid %(dir)s/nginx.pid;
error_log %(dir)s/nginx-error.log notice;
events { worker_connections 8192; }
http {
    access_log off;
    sendfile on;
    keepalive_requests 1000000;
    client_body_temp_path %(dir)s/n1; proxy_temp_path %(dir)s/n2; fastcgi_temp_path %(dir)s/n3;
    uwsgi_temp_path %(dir)s/n4; scgi_temp_path %(dir)s/n5;
    proxy_cache_path %(dir)s/cache levels=1:2 keys_zone=c:64m max_size=%(size)dm inactive=1d use_temp_path=off;
    upstream origin { server 127.0.0.1:%(origin)d; keepalive 64; }
    server {
        listen 127.0.0.1:%(port)d;
        location = /ready { return 200 "ok"; }
        location / {
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://origin;
            proxy_cache c;
            proxy_cache_valid 200 1d;
        }
    }
}
"""

VCL = """vcl 4.1;
backend default { .host = "127.0.0.1"; .port = "%(origin)d"; }
sub vcl_recv { if (req.url == "/ready") { return (synth(200)); } }
sub vcl_backend_response { set beresp.ttl = 1d; }
"""

WRK_LUA = """local n = %(n)d
math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
request = function() return wrk.format("GET", "/d/" .. math.random(1, n)) end
"""


def origin_hits(d):
    try:
        with open(d / "origin-access.log", "rb") as f:
            return sum(1 for line in f if b"GET /d/" in line)
    except OSError:
        return 0


def fill(port, n, conc=16):
    """Request every object once (persistent connections, `conc` at a time)."""
    def worker(k):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        bad = 0
        for i in range(k + 1, n + 1, conc):
            c.request("GET", f"/d/{i}", headers={"Host": "bench"})
            r = c.getresponse()
            if r.status != 200 or len(r.read()) != 100 * 1024:
                bad += 1
        c.close()
        return bad
    with concurrent.futures.ThreadPoolExecutor(conc) as ex:
        return sum(ex.map(worker, range(conc)))


def wrk(port, conns, secs, lua):
    cmd = ["wrk", "-t4", f"-c{conns}", f"-d{secs}s", "--timeout", "5s", "--latency", "-s", str(lua), "-H", "Host: bench",
           f"http://127.0.0.1:{port}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60).stdout
    r = {}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    r["rps"] = float(m.group(1)) if m else 0.0
    m = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)", out, re.M)
    if m:
        r["p99_ms"] = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    r["non2xx"] = int(m.group(1)) if m else 0
    return r


def server_phases(lacquer, ndir, run):
    """Run `run()` while `lacquer log` reads lacquerd's Timestamp records;
    returns its result and the server-side p99/p99.9 (ms) of lookup + VCL
    (`Process`, since `Req`) and delivery (`Resp`, since `Process`), and of
    the whole request in the server (`Resp` since `Start`): what of wrk's
    p99 lacquerd itself spends, the rest being time before it reads the
    request (scheduling) or after it wrote the response. Also the CPU
    seconds the log reader itself took: it runs on the same cores, so the
    throughput of this run is not comparable with the peers' (measured
    without a log reader) and is reported apart."""
    out = Path(ndir).parent / "timestamps.log"
    with open(out, "w") as f:
        lg = subprocess.Popen([str(lacquer), "log", "-n", str(ndir), "-i", "Timestamp"], stdout=f,
                              stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        try:
            res = run()
            time.sleep(0.5)
            with open(f"/proc/{lg.pid}/stat") as st:
                fields = st.read().rsplit(")", 1)[1].split()
            log_cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        finally:
            lg.terminate()
            lg.wait(timeout=10)
    ph = {}
    for line in out.read_text(errors="replace").splitlines():
        f = line.split()
        if "Timestamp" in f:
            k = f.index("Timestamp")
            try:
                ph.setdefault(f[k + 1].rstrip(":"), []).append((float(f[k + 3]), float(f[k + 4])))
            except (IndexError, ValueError):
                pass
    out.unlink()

    def pct(v, q):
        v = sorted(v)
        return round(v[min(len(v) - 1, int(len(v) * q))] * 1e3, 3) if v else None
    p = {"log_reader_cpu_s": round(log_cpu_s, 2)}
    for name, key, i in (("Process", "process", 1), ("Resp", "deliver", 1), ("Resp", "total", 0)):
        v = [x[i] for x in ph.get(name, [])]
        p[f"{key}_p99_ms"], p[f"{key}_p999_ms"] = pct(v, 0.99), pct(v, 0.999)
    return res, p


def cpu_ticks(p):
    """CPU time (clock ticks, user + system) of every process in `p`'s
    process group (varnishd's child, nginx's workers), so a server's cost
    per hit can be compared on a loaded machine."""
    pgid = os.getpgid(p.pid)
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total


def start(name, a, work, port, origin, size_mb):
    d = work / name
    d.mkdir(exist_ok=True)
    if name == "lacquerd":
        return spawn(name, [a.lacquerd, "-a", f"127.0.0.1:{port}", "-T", "none", "-f", str(work / "disk.vcl"),
                            "-n", str(d / "n"), "-s", f"disk,{d}/store.dat,{size_mb}M", "-F"], work)
    if name == "varnishd":
        return spawn(name, ["varnishd", "-a", f"127.0.0.1:{port}", "-f", str(work / "disk.vcl"),
                            "-n", str(d / "n"), "-s", f"file,{d}/store.dat,{size_mb}M", "-F"], work)
    conf = d / "nginx.conf"
    conf.write_text(PROXY % dict(dir=d, port=port, origin=origin, size=size_mb))
    return spawn(name, ["nginx", "-c", str(conf), "-p", str(d), "-g", "daemon off;"], work)


def first_hit(port, p, name, work, n, timeout=120):
    """Seconds from start until the first answer, and until an object stored
    before the restart is served without an origin fetch (None: the objects
    were lost). Each try asks for another object, so a refetch by an
    earlier try does not count as a hit."""
    t0 = time.time()
    wait_answer(port, p, name)
    first = time.time() - t0
    for k in range(min(n, 500)):
        before = origin_hits(work)
        get(port, f"/d/{(n // 2 + k * 7919) % n + 1}")
        if origin_hits(work) == before:
            return time.time() - t0, first
        if time.time() - t0 > timeout:
            break
        time.sleep(0.05)
    return None, first


def recovery(name, work, p, t_start, log_at, timeout=150):
    """Seconds until the cache has everything back (lacquerd: its log line
    after `log_at`; nginx: its cache loader, which starts a minute after
    nginx does, is gone)."""
    end = time.time() + timeout
    while time.time() < end:
        if name == "lacquerd":
            text = (work / "lacquerd.log").read_bytes()[log_at:].decode(errors="replace")
            m = re.search(r"recovered in ([\d.]+) s", text)
            if m:
                return float(m.group(1))
        elif name == "nginx":
            loaders = subprocess.run(["pgrep", "-f", "-s", str(os.getpgid(p.pid)), "cache loader"],
                                     capture_output=True, text=True).stdout.split()
            if not loaders:
                return time.time() - t_start
        time.sleep(0.05)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lacquerd", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mb", type=int, default=0, help="working set in MB (default 2048, 512 with --quick)")
    ap.add_argument("--secs", type=int, default=0)
    a = ap.parse_args()
    ws_mb = a.mb or (512 if a.quick else 2048)
    secs = a.secs or (5 if a.quick else 15)
    n = ws_mb * 1024 // 100
    size_mb = ws_mb + ws_mb // 4
    work = Path(a.out)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    free = shutil.disk_usage(work).free // (1 << 20)
    if free < size_mb * 2:
        raise SystemExit(f"{work}: {free} MB free, the scenario needs {size_mb * 2} MB; give --mb smaller")
    (work / "www").mkdir()
    (work / "www" / "100k").write_bytes((b"lacquer-disk-bench\n" * 6000)[:100 * 1024])
    origin = free_port()
    (work / "origin.conf").write_text(ORIGIN % dict(dir=work, port=origin, www=work / "www"))
    op = spawn("origin", ["nginx", "-c", str(work / "origin.conf"), "-p", str(work), "-g", "daemon off;"], work)
    (work / "disk.vcl").write_text(VCL % dict(origin=origin))
    lua = work / "random.lua"
    lua.write_text(WRK_LUA % dict(n=n))
    res = {"objects": n, "working_set_mb": ws_mb, "store_mb": size_mb, "secs": secs}
    try:
        wait_answer(origin, op, "origin")
        for name in ("lacquerd", "varnishd", "nginx"):
            port = free_port()
            r = res[name] = {}
            try:
                p = start(name, a, work, port, origin, size_mb)
                wait_answer(port, p, name)
                log(f"{name}: filling {n} objects")
                t = time.time()
                r["fill_errors"] = fill(port, n)
                r["fill_s"] = round(time.time() - t, 1)
                # Throughput: every server alone with wrk, no log reader
                # (a `lacquer log` beside lacquerd took as much CPU as
                # lacquerd itself on two cores, issue 18).
                for c in (32, 100):
                    o0 = origin_hits(work)
                    t0 = cpu_ticks(p)
                    w = wrk(port, c, secs, lua)
                    ticks = cpu_ticks(p) - t0
                    w["cpu_us_per_hit"] = round(ticks * 1e6 / os.sysconf("SC_CLK_TCK") / max(1.0, w["rps"] * secs), 1)
                    w["origin_fetches"] = origin_hits(work) - o0
                    r[f"c{c}"] = w
                    log(f"{name} c{c}: {w}")
                lacquer = Path(a.lacquerd).parent / "lacquer"
                if name == "lacquerd" and lacquer.exists():
                    # Where wrk's p99 goes: one more c32 run with lacquerd's
                    # own timestamps read from its log.
                    w, w["server"] = server_phases(lacquer, work / name / "n", lambda: wrk(port, 32, secs, lua))
                    r["c32_logged"] = w
                    log(f"{name} c32 with lacquer log: {w}")
                # A crash and a restart.
                stop(p, signal.SIGKILL)
                if name == "varnishd":
                    shutil.rmtree(work / name / "n", ignore_errors=True)
                # A new port: a killed varnishd child may hold the old one
                # for a moment.
                port = free_port()
                log_at = (work / f"{name}.log").stat().st_size
                t_start = time.time()
                p = start(name, a, work, port, origin, size_mb)
                hit, first = first_hit(port, p, name, work, n)
                r["restart_first_answer_s"] = round(first, 3)
                r["restart_first_hit_s"] = None if hit is None else round(hit, 3)
                r["recovery_s"] = recovery(name, work, p, t_start, log_at)
                o0 = origin_hits(work)
                w = wrk(port, 32, secs, lua)
                w["origin_fetches"] = origin_hits(work) - o0
                r["after_restart_c32"] = w
                log(f"{name} after restart: {r}")
                stop(p)
                if name == "lacquerd":
                    # A clean stop writes the index snapshot; the next start
                    # reads it.
                    port = free_port()
                    log_at = (work / f"{name}.log").stat().st_size
                    t_start = time.time()
                    p = start(name, a, work, port, origin, size_mb)
                    wait_answer(port, p, name)
                    r["clean_restart_recovery_s"] = recovery(name, work, p, t_start, log_at)
                    log(f"{name} after a clean restart: recovery {r['clean_restart_recovery_s']} s")
                    stop(p)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                r["failed"] = str(e)[:300]
            finally:
                shutil.rmtree(work / name, ignore_errors=True)
    finally:
        for p in PROCS:
            stop(p)
    (work / "disk.json").write_text(json.dumps(res, indent=1))
    rows = ["| | lacquerd -s disk | varnishd -s file | nginx proxy_cache |", "|---|---|---|---|"]

    def row(title, f):
        cells = []
        for s in ("lacquerd", "varnishd", "nginx"):
            try:
                cells.append(f(res[s]))
            except (KeyError, TypeError):
                cells.append(res[s].get("failed", "-")[:60] if isinstance(res.get(s), dict) else "-")
        rows.append(f"| {title} | " + " | ".join(cells) + " |")
    for c in (32, 100):
        row(f"random hits c{c}, req/s", lambda r, c=c: f"{r[f'c{c}']['rps']:.0f}")
        row(f"random hits c{c}, p99 ms", lambda r, c=c: f"{r[f'c{c}'].get('p99_ms', 0):.1f}")
        row(f"c{c} server CPU µs per hit (survives a loaded machine)",
            lambda r, c=c: f"{r[f'c{c}']['cpu_us_per_hit']:.0f}")
        row(f"c{c} origin fetches", lambda r, c=c: str(r[f"c{c}"]["origin_fetches"]))
    row("c32 again with `lacquer log` reading timestamps: req/s, wrk p99 ms, log reader CPU s",
        lambda r: f"{r['c32_logged']['rps']:.0f}, {r['c32_logged'].get('p99_ms', 0):.1f}, "
        f"{r['c32_logged']['server']['log_reader_cpu_s']}")
    row("same run, p99 / p99.9 ms inside lacquerd (lookup+VCL, delivery, whole request; from its log)",
        lambda r: " ; ".join(f"{r['c32_logged']['server'][k + '_p99_ms']} / {r['c32_logged']['server'][k + '_p999_ms']}"
                             for k in ("process", "deliver", "total")))
    row("kill -9, restart: first answer s", lambda r: f"{r['restart_first_answer_s']:.3f}")
    row("restart: first hit s", lambda r: "miss (cache lost)" if r["restart_first_hit_s"] is None
        else f"{r['restart_first_hit_s']:.3f}")
    row("recovery s (index snapshot and its log, or a scan / nginx cache loader, which starts 60 s after nginx)", lambda r: "-" if r["recovery_s"] is None else f"{r['recovery_s']:.2f}")
    row("clean stop, restart: recovery s (index snapshot)", lambda r: "-" if r.get("clean_restart_recovery_s") is None else f"{r['clean_restart_recovery_s']:.2f}")
    row("after restart c32 req/s", lambda r: f"{r['after_restart_c32']['rps']:.0f}")
    row("after restart c32 origin fetches", lambda r: str(r["after_restart_c32"]["origin_fetches"]))
    md = [f"## Disk caches: {n} objects of 100 KB ({ws_mb} MB) in stores of {size_mb} MB",
          "", f"`bench/run --only disk`; wrk -t4, {secs} s per load, random URLs over the whole set.", ""] + rows
    (work / "disk.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(main())
