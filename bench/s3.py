#!/usr/bin/env python3
"""Scenario `s3` of bench/run: the StorageGRID guide's tables on this machine.

GETs of 4 KB, 1 MB and 100 MB objects (10 MB with --quick) from MinIO directly,
through lacquerd running examples/storagegrid.vcl (the guide's VCL, Enterprise
vmods and all) and through varnishd 7.1 running the closest open-source VCL
(bench/s3-open.vcl: no kvstore hit counter, regsub for urlplus.url_get(),
no fast_304, the guide's TTL of 1 us through std.duration(); memory store). Every
client GET is a presigned URL (wrk cannot sign, a presigned URL needs no
signing per request; each server gets URLs signed for its own Host), spread
over many objects of each size (64 small, 4 big) so that concurrent requests
rarely meet on one object. Reports objects/s, MB/s, p50/p99 and the bytes the origin sent
(backend body bytes and header bytes apart, from the caches' VBE counters), per size and
concurrency, median of the rounds, interleaved (MinIO, lacquerd, varnishd,
MinIO, ...).

A fourth peer, nginx serving the same objects as static files from memory
(/dev/shm, sendfile), is the ceiling: no cache in front of MinIO can serve
a GET cheaper than a static file server on the same machine, so nginx /
MinIO bounds what the "lacquerd >= 3x MinIO" target can reach here (wrk
and the server share the machine's cores).

Usage: bench/s3.py --lacquerd BIN --lacquer BIN --out DIR [--quick]
Writes DIR/s3.md and DIR/s3.json; exits 2 (with a message) when MinIO is not
installed.
"""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
REGION = "us-east-1"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] s3: {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, name, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"s3: {name} exited ({proc.returncode}) before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"s3: {name} did not listen on {port} within {timeout}s")


def find_minio():
    for p in (shutil.which("minio"), "/usr/local/bin/minio", os.path.expanduser("~/go/bin/minio")):
        if p and os.path.isfile(p):
            return p
    return None


UNITS_T = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}


def parse_wrk(out):
    r = {}
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+),", out)
    if m:
        r["requests"] = int(m.group(1))
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m:
        r["objs"] = float(m.group(1))
    for pct, key in (("50", "p50"), ("99", "p99")):
        m = re.search(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s|m)\b", out, re.M)
        if m:
            r[key] = float(m.group(1)) * UNITS_T[m.group(2)]
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    r["non2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    r["errors"] = sum(int(x) for x in m.groups()) if m else 0
    return r


LUA = """
local urls = {%s}
local i = 0
request = function()
    i = i + 1
    return wrk.format("GET", urls[(i %% #urls) + 1])
end
"""


def wrk(port, targets, conns, secs, work):
    script = work / f"urls-{port}-{conns}.lua"
    script.write_text(LUA % ", ".join(json.dumps(t) for t in targets))
    cmd = ["wrk", "-t2", f"-c{conns}", f"-d{secs}s", "--timeout", "30s", "--latency", "-s", str(script),
           f"http://127.0.0.1:{port}/"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60).stdout
    r = parse_wrk(out)
    if "objs" not in r:
        r["failed"] = out.strip()[-300:]
    return r


def backend_bytes(kind, stat_bin, workdir):
    """Header and body bytes the caches received from the origin so far
    (VBE counters), as {"hdr": n, "body": n}."""
    cmd = [stat_bin, "stat", "-n", str(workdir), "-1", "-f", "VBE.*"]
    if kind == "varnishd":
        cmd = ["varnishstat", "-n", str(workdir), "-1", "-f", "VBE.*"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    got = {"hdr": 0, "body": 0}
    seen = False
    for line in r.stdout.splitlines():
        f = line.split()
        m = re.search(r"\.beresp_(hdr|body)bytes$", f[0]) if len(f) >= 2 else None
        if m:
            got[m.group(1)] += int(f[1])
            seen = True
    if not seen:
        raise RuntimeError(f"{' '.join(cmd)}: no VBE byte counters ({r.returncode}): {r.stderr.strip()[-300:]}")
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lacquerd", required=True)
    ap.add_argument("--lacquer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    minio = find_minio()
    if not minio:
        print("s3: SKIPPED: minio is not installed (go install github.com/minio/minio@latest)", flush=True)
        sys.exit(2)
    import boto3
    from botocore.config import Config

    rounds, secs = (1, 3) if a.quick else (3, 5)
    big = (10 << 20) if a.quick else (100 << 20)
    # (label, size, connections, objects, seconds): many small objects, as
    # the guide's s3tester runs spread over many keys; the big ones at a
    # concurrency and for a time in which a round completes enough GETs.
    loads = [("4 KB", 4096, 128, 64, secs), ("1 MB", 1 << 20, 64, 64, secs),
             (f"{big >> 20} MB", big, 8, 4, secs * 3)]
    work = Path(tempfile.mkdtemp(prefix="lacquer-s3bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    os.chmod(work, 0o755)  # varnishd's unprivileged child reads under it
    procs = []
    try:
        access, secret = "bench" + os.urandom(4).hex(), os.urandom(16).hex()
        mport = free_port()
        env = dict(os.environ, MINIO_ROOT_USER=access, MINIO_ROOT_PASSWORD=secret, MINIO_BROWSER="off")
        (work / "data").mkdir()
        p = subprocess.Popen([minio, "server", "--quiet", "--address", f"127.0.0.1:{mport}", "--console-address",
                              f"127.0.0.1:{free_port()}", str(work / "data")], env=env,
                             stdout=open(work / "minio.log", "wb"), stderr=subprocess.STDOUT)
        procs.append(p)
        wait_port(mport, p, "minio")
        time.sleep(1)
        # MinIO serves plain HTTP here, as it does to the direct peer and to
        # varnishd, so the guide's backend TLS lines are dropped: the run
        # compares caching, not origin TLS (tests/s3 runs the VCL with them).
        sg = (REPO / "examples/storagegrid.vcl").read_text().replace('.port = "9000";', f'.port = "{mport}";')
        sg = "\n".join(l for l in sg.split("\n") if not l.strip().startswith(".ssl"))
        (work / "sg.vcl").write_text(sg)
        (work / "open.vcl").write_text((BENCH / "s3-open.vcl").read_text().replace("%(origin)d", str(mport)))
        ports = {"minio": mport, "lacquerd": free_port(), "varnishd": free_port(), "nginx": free_port()}
        common = ["-s", "malloc,2G", "-p", "http_gzip_support=off", "-p", "vsl_mask=+Hash", "-F"]
        lq = subprocess.Popen([a.lacquerd, "-a", f"127.0.0.1:{ports['lacquerd']}", "-f", str(work / "sg.vcl"),
                               "-n", str(work / "lq"), *common], stdout=open(work / "lacquerd.log", "wb"),
                              stderr=subprocess.STDOUT)
        procs.append(lq)
        vd = subprocess.Popen(["varnishd", "-a", f"127.0.0.1:{ports['varnishd']}", "-f", str(work / "open.vcl"),
                               "-n", str(work / "vd"), *common], stdout=open(work / "varnishd.log", "wb"),
                              stderr=subprocess.STDOUT)
        procs.append(vd)
        (work / "static").mkdir()
        (work / "nginx.conf").write_text(
            "worker_processes 2;\npid %s/nginx.pid;\nerror_log %s/nginx.err;\n"
            "events { worker_connections 4096; }\nhttp { access_log off; sendfile on; tcp_nopush on;\n"
            "  keepalive_requests 1000000;\n"
            "  server { listen 127.0.0.1:%d; root %s/static; location / { } } }\n"
            % (work, work, ports["nginx"], work))
        ng = subprocess.Popen(["nginx", "-c", str(work / "nginx.conf"), "-g", "daemon off;"],
                              stdout=open(work / "nginx.log", "wb"), stderr=subprocess.STDOUT)
        procs.append(ng)
        wait_port(ports["lacquerd"], lq, "lacquerd")
        wait_port(ports["varnishd"], vd, "varnishd")
        wait_port(ports["nginx"], ng, "nginx")
        cfg = Config(s3={"addressing_style": "path"})
        admin = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{mport}", aws_access_key_id=access,
                             aws_secret_access_key=secret, region_name=REGION, config=cfg)
        admin.create_bucket(Bucket="bench")
        keys = {}
        for label, size, _, objects, _ in loads:
            body = os.urandom(size)
            keys[label] = [f"obj/{size}/{i}" for i in range(objects)]
            for k in keys[label]:
                admin.put_object(Bucket="bench", Key=k, Body=body)
                f = work / "static" / "bench" / k
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_bytes(body)
        targets = {}
        for name, port in ports.items():
            if name == "nginx":
                # The same paths; nginx ignores the signature's query string.
                for label, *_ in loads:
                    targets[(name, label)] = [f"/bench/{k}" for k in keys[label]]
                continue
            c = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id=access,
                             aws_secret_access_key=secret, region_name=REGION, config=cfg)
            for label, *_ in loads:
                urls = [c.generate_presigned_url("get_object", Params={"Bucket": "bench", "Key": k}, ExpiresIn=7200)
                        for k in keys[label]]
                targets[(name, label)] = [u[len(f"http://127.0.0.1:{port}"):] for u in urls]
        log("warming the caches (one GET of every object)")
        for name in ("lacquerd", "varnishd"):
            for label, *_ in loads:
                for t in targets[(name, label)]:
                    subprocess.run(["curl", "-sf", "-o", "/dev/null", f"http://127.0.0.1:{ports[name]}{t}"],
                                   timeout=120, check=True)
        stat = {"lacquerd": (a.lacquer, work / "lq"), "varnishd": ("varnishstat", work / "vd")}
        results = {}
        for label, size, conns, objects, secs in loads:
            runs = {n: [] for n in ports}
            for r in range(rounds):
                for name, port in ports.items():
                    before = backend_bytes(name, *stat[name]) if name in stat else None
                    w = wrk(port, targets[(name, label)], conns, secs, work)
                    if name in stat:
                        after = backend_bytes(name, *stat[name])
                        w["origin_body"] = after["body"] - before["body"]
                        w["origin_hdr"] = after["hdr"] - before["hdr"]
                    else:
                        w["origin_body"] = 0 if name == "nginx" else w.get("requests", 0) * size
                        w["origin_hdr"] = 0
                    w["mbs"] = w.get("objs", 0) * size / 1e6
                    log(f"{label} c{conns} {name} round {r + 1}: {w.get('objs', 0):.1f} obj/s "
                        f"{w['mbs']:.0f} MB/s p50 {w.get('p50', 0):.2f} ms p99 {w.get('p99', 0):.2f} ms "
                        f"origin body {w['origin_body'] / max(1, w.get('requests', 1)):.0f} "
                        f"hdr {w['origin_hdr'] / max(1, w.get('requests', 1)):.0f} B/req"
                        + (f" non-2xx {w['non2xx']}" if w.get("non2xx") else "")
                        + (f" FAILED {w['failed']}" if "failed" in w else ""))
                    runs[name].append(w)
            results[label] = {"conns": conns, "size": size, "objects": objects, "secs": secs}
            for name, ws in runs.items():
                ok = [w for w in ws if "failed" not in w]
                if not ok:
                    results[label][name] = {"failed": ws[-1].get("failed", "no run")}
                    continue
                med = {k: statistics.median(w.get(k, 0) for w in ok)
                       for k in ("objs", "mbs", "p50", "p99", "non2xx", "errors")}
                for k in ("origin_body", "origin_hdr"):
                    med[k + "_per_req"] = statistics.median(w[k] / max(1, w.get("requests", 1)) for w in ok)
                results[label][name] = med
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "s3.json").write_text(json.dumps(results, indent=1))
        lines = ["## S3 object store (the StorageGRID guide's tables)", "",
                 "Presigned GETs spread over the objects of each size, `wrk -t2`, "
                 f"{rounds} round(s) per server, interleaved, median. Origin bytes: what the cache received from MinIO per "
                 "client request (VBE body and header bytes); for MinIO direct, the object size.", "",
                 "| object | conc | objects, s | server | obj/s | MB/s | p50 ms | p99 ms | origin body B/req | origin hdr B/req | non-2xx |",
                 "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for label, r in results.items():
            for name in ports:
                d = r[name]
                if "failed" in d:
                    lines.append(f"| {label} | {r['conns']} | | {name} | failed: {d['failed'][:80]} | | | | | | |")
                    continue
                lines.append(f"| {label} | {r['conns']} | {r['objects']}, {r['secs']} | {name} | {d['objs']:.1f} | {d['mbs']:.0f} | {d['p50']:.2f} "
                             f"| {d['p99']:.2f} | {d['origin_body_per_req']:.0f} | {d['origin_hdr_per_req']:.0f} | {d['non2xx']:.0f} |")
            lq, vd, mi = r.get("lacquerd", {}), r.get("varnishd", {}), r.get("minio", {})
            ng = r.get("nginx", {})
            if lq.get("objs") and vd.get("objs") and mi.get("objs"):
                lines.append(f"| {label} | | | lacquerd / varnishd | {lq['objs'] / vd['objs']:.2f}x | | | | | | |")
                lines.append(f"| {label} | | | lacquerd / MinIO | {lq['objs'] / mi['objs']:.2f}x | | | | | | |")
            if ng.get("objs") and mi.get("objs"):
                lines.append(f"| {label} | | | nginx static / MinIO (ceiling) | {ng['objs'] / mi['objs']:.2f}x | | | | | | |")
        (out / "s3.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines), flush=True)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
