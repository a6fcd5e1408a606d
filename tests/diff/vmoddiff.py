#!/usr/bin/env python3
"""Call vmod functions under varnishd and lacquerd and compare what they do.

tests/diff/vmodspec.py checks that the vmods declare the same functions; this checks their
behaviour: the value each call returns for chosen arguments (NULL, empty and unset strings,
negative, huge and overflowing numbers, invalid enum values, bad regexes, bad durations ...),
the log records it writes and whether it fails the VCL.

A case (one element of a JSON list in tests/diff/vmod-calls/) is an object:
  "name":   what it calls, for the report;
  "top":    VCL declarations (named subs, backends, probes), optional;
  "init":   statements for vcl_init (objects, `new x = ...`), optional;
  "recv", "hash", "hit", "miss", "pass", "purge", "pipe", "deliver", "synth",
  "backend_fetch", "backend_response", "backend_error":
          statements run in that subroutine, optional; the results go into response
          headers (`set resp.http.r1 = std.integer("x", 5);`) or a synthetic body;
  "requests": a list of requests, each {"method", "url", "headers": {...}, "body"}
          (default: one `GET /`; "headers" may be a list of [name, value] to repeat a name);
  "setup": true: the case only declares (backends, objects) for the others of its file and
          is not run;
  "compile": true: the case is not run but compiled alone, and whether each daemon accepts
          its VCL is compared (constant arguments checked when the VCL is compiled: enum
          values, regular expressions).
All cases of the given files go into one VCL: each case's statements are wrapped in
`if (req.http.x-case == "N")` (`bereq.` on the backend side) and subroutines of the same name
are concatenated, as VCL allows (`${backend_port}` is the backend's port), so one daemon start serves hundreds of calls; `vcl_hash` adds
the case number so that no case hits another's object. The backend answers 200 with the URL as
body and echoes each `x-be-NAME` request header as `NAME`. Vmods the fragments name are
imported.

For each request the status, reason, headers (minus Date, Age, X-Varnish, Via, Server and
Content-Length) and body are compared, and the VCL_Error, VCL_Log, Debug and (label only)
Timestamp records of the case's client and backend transactions, read with `varnishlog` /
`lacquer log -d -g raw` from the daemons' working directories. Both daemons run with
`-p vsl_mask=+Debug -p debug=+vtc_mode`. A case one of the daemons refuses to compile (found
by compiling halves of the cases) is compared for acceptance only.

Usage: tests/diff/vmoddiff.py [--lacquerd BIN] [--varnishd BIN] [--lacquer BIN]
                              [--varnishlog BIN] [--only NAME-REGEX] FILE.json...
Exit status 1 when a case differs. Deliberate differences: tests/diff/DEVIATIONS.md.
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reqdiff  # noqa: E402

VMODS = ["std", "debug", "vtc", "directors", "blob", "cookie", "proxy", "purge", "unix", "var",
         "header", "str", "xkey", "saintmode", "vsthrottle", "bodyaccess", "tcp"]
CLIENT_SUBS = ["recv", "hash", "hit", "miss", "pass", "purge", "pipe", "deliver", "synth"]
BACKEND_SUBS = ["backend_fetch", "backend_response", "backend_error"]
LOG_TAGS = "VCL_Error,VCL_Log,Debug,Timestamp,ReqHeader,BereqHeader"
# Timestamps every transaction has; the others come from std.timestamp.
STD_STAMPS = {"Start", "Req", "ReqBody", "Waitinglist", "Fetch", "Process", "Resp", "Restart",
              "Bereq", "Beresp", "BerespBody", "Retry", "Error", "Pipe", "PipeSess", "Hit"}
# Debug records in the log; vtc_mode makes lacquerd offer the test vmod `debug` (varnishd
# always has it).
DAEMON_ARGS = ("-p", "vsl_mask=+Debug", "-p", "debug=+vtc_mode")
DROP_HEADERS = {"date", "age", "x-varnish", "via", "server", "content-length", "connection",
                "accept-ranges", "retry-after"}


def backend_conn(c):
    """Answers each request with 200, its URL as body, x-be-NAME headers echoed as NAME."""
    c.settimeout(5)
    buf = b""
    try:
        while True:
            got = reqdiff.read_head(c, buf)
            if got is None:
                return
            lines, buf = got
            n = 0
            echo = b""
            for line in lines[1:]:
                k, _, v = line.partition(b":")
                k = k.strip().lower()
                if k == b"content-length":
                    n = int(v.strip() or b"0")
                if k.startswith(b"x-be-"):
                    echo += k[5:] + b": " + v.strip() + b"\r\n"
            buf = reqdiff.recv_until(c, buf, lambda b: len(b) >= n)
            if buf is None:
                return
            buf = buf[n:]
            body = lines[0].split(b" ")[1] if b" " in lines[0] else b"?"
            c.sendall(b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s" % (echo, len(body), body))
    except (OSError, ValueError):
        return
    finally:
        c.close()


def backend():
    return reqdiff.serve_each(backend_conn)


def build_vcl(cases, port):
    text = "\n".join(json.dumps(c) for c in cases)
    used = [m for m in VMODS if re.search(r"\b%s\." % m, text)]
    out = ["vcl 4.1;"] + ["import %s;" % m for m in used]
    out.append('backend default { .host = "127.0.0.1"; .port = "%d"; }' % port)
    out.append("sub vcl_hash { hash_data(req.http.x-case); }")
    for i, c in enumerate(cases):
        if c.get("top"):
            out.append(c["top"])
        if c.get("init"):
            out.append("sub vcl_init {\n%s\n}" % c["init"])
        for sub in CLIENT_SUBS + BACKEND_SUBS:
            if c.get(sub):
                obj = "bereq" if sub in BACKEND_SUBS else "req"
                out.append('sub vcl_%s { if (%s.http.x-case == "%d") {\n%s\n} }' % (sub, obj, i, c[sub]))
    return "\n".join(out).replace("${backend_port}", str(port)) + "\n"


def exchange(port, i, r):
    """One request of case `i` on a new connection: (status line, [headers], body)."""
    hdrs = dict(r.get("headers", {}))
    body = r.get("body", "").encode("latin-1")
    req = "%s %s HTTP/1.1\r\nHost: h\r\nx-case: %d\r\nConnection: close\r\n" % (
        r.get("method", "GET"), r.get("url", "/"), i)
    for k, v in (hdrs.items() if isinstance(hdrs, dict) else hdrs):
        req += "%s: %s\r\n" % (k, v)
    if body or r.get("method") in ("POST", "PUT"):
        req += "Content-Length: %d\r\n" % len(body)
    raw = b""
    try:
        s = socket.create_connection(("127.0.0.1", port), 5)
        s.settimeout(r.get("timeout", 10))
        s.sendall(req.encode("latin-1") + b"\r\n" + body)
        while True:
            d = s.recv(65536)
            if not d:
                break
            raw += d
        s.close()
    except OSError as e:
        raw += b"<%s>" % type(e).__name__.encode()
    if b"\r\n\r\n" not in raw:
        return ("no response: %r" % raw[:200], [], "")
    head, rest = raw.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    keep = []
    chunked = False
    for line in lines[1:]:
        k, _, v = line.partition(":")
        if k.lower() == "transfer-encoding" and "chunked" in v.lower():
            chunked = True
            continue
        if k.lower() not in DROP_HEADERS:
            keep.append("%s: %s" % (k.lower(), v.strip()))
    if chunked:
        body = b""
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            try:
                size = int(size_line.split(b";")[0] or b"0", 16)
            except ValueError:
                body += b"<bad chunk>"
                break
            body += rest[:size]
            rest = rest[size + 2:]
            if size == 0:
                break
        rest = body
    return (lines[0], sorted(keep), rest.decode("latin-1"))


def read_log(tool, work):
    """{case number: [records]} from the daemon's log (read with the command `tool`, a list):
    client records, then backend ones."""
    r = subprocess.run(tool + ["-n", work, "-d", "-g", "raw", "-i", LOG_TAGS],
                       capture_output=True, text=True, errors="replace", timeout=300)
    if "abandoned" in r.stderr:
        # varnishd's child restarted (a panic): the records before it are gone.
        print("warning: %s: the log was abandoned (a child restart?)" % " ".join(tool))
    out = r.stdout
    recs, case_of = {}, {}
    for line in out.splitlines():
        f = line.split(None, 3)
        if len(f) < 3 or not f[0].isdigit():
            continue
        vxid, tag, side = int(f[0]), f[1], f[2]
        data = f[3] if len(f) > 3 else ""
        if tag in ("ReqHeader", "BereqHeader"):
            m = re.match(r"(?i)x-case:\s*(\d+)$", data)
            if m:
                case_of.setdefault(vxid, int(m.group(1)))
            continue
        if tag == "Timestamp":
            label = data.split(":")[0]
            if label in STD_STAMPS:
                continue
            data = label
        recs.setdefault(vxid, []).append((side, tag, data))
    per_case = {}
    for vxid in sorted(recs):
        if vxid in case_of:
            for side, tag, data in recs[vxid]:
                per_case.setdefault(case_of[vxid], []).append((side, "%s %s" % (tag, data)))
    return {k: [d for _, d in sorted(v, key=lambda x: x[0] != "c")] for k, v in per_case.items()}


def normalise(s):
    s = re.sub(r"127\.0\.0\.1[ :]\d+", "ADDR", s)
    s = re.sub(r"\b\d{10}\.\d+\b", "EPOCH", s)
    s = re.sub(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", "DATE", s)
    s = re.sub(r"XID: \d+", "XID: N", s)
    s = re.sub(r"0x[0-9a-f]{6,}", "0xPTR", s)
    s = re.sub(r"/tmp/lacquer-diff-\w+/\w+", "WORKDIR", s)
    s = re.sub(r"\((Varnish|Lacquer)/[\d.]+\)", "(PRODUCT)", s)
    return s


def compiles(binary, vcl_text):
    """(accepted, error text) of `binary -C` over the VCL."""
    tmp = tempfile.mkdtemp(prefix="lacquer-diff-")
    os.chmod(tmp, 0o755)
    path = tmp + "/c.vcl"
    with open(path, "w") as f:
        f.write(vcl_text)
    try:
        r = subprocess.run([binary, "-C", *DAEMON_ARGS, "-f", path, "-n", tmp + "/w"], capture_output=True, errors="replace",
                           text=True, timeout=300)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return r.returncode == 0, r.stderr[-3000:]


def setup_of(cases):
    return [c for c in cases if c.get("setup")]


def refused_cases(cases, port, a):
    """The indexes of the cases whose VCL one of the daemons refuses, found by halving."""
    def ok(idx):
        vcl = build_vcl(setup_of(cases) + [cases[i] for i in idx if not cases[i].get("setup")], port)
        return all(compiles(b, vcl)[0] for b in (a.varnishd, a.lacquerd))

    def bad(idx):
        if ok(idx):
            return []
        if len(idx) == 1:
            return idx
        half = len(idx) // 2
        return bad(idx[:half]) + bad(idx[half:])

    return bad([i for i, c in enumerate(cases) if not c.get("setup")])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lacquerd", default="target/debug/lacquerd")
    ap.add_argument("--varnishd", default="/usr/sbin/varnishd")
    ap.add_argument("--lacquer", default="target/debug/lacquer")
    ap.add_argument("--varnishlog", default="/usr/bin/varnishlog")
    ap.add_argument("--only", default="")
    ap.add_argument("--vcl", action="store_true", help="print the generated VCL and exit")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    cases = []
    for f in a.files:
        cases.extend(json.load(open(f)))
    if a.only:
        cases = [c for c in cases if c.get("setup") or re.search(a.only, c["name"])]
    port = backend()
    compile_cases = [c for c in cases if c.get("compile")]
    cases = [c for c in cases if not c.get("compile")]
    status = 0
    if compile_cases:
        got = {name: [compiles(binary, build_vcl([c], port))[0] for c in compile_cases]
               for name, binary in (("varnishd", a.varnishd), ("lacquerd", a.lacquerd))}
        status |= reqdiff.report("compile case", [c["name"] for c in compile_cases], got,
                                 lambda ok: "accepted" if ok else "refused")
    if not cases:
        sys.exit(status)
    vcl = build_vcl(cases, port)
    if a.vcl:
        print(vcl)
        return
    refused = refused_cases(cases, port, a)
    if refused:
        # A case varnishd refuses to compile is compared for acceptance only.
        got = {name: [compiles(binary, build_vcl(setup_of(cases) + [cases[i]], port))[0] for i in refused]
               for name, binary in (("varnishd", a.varnishd), ("lacquerd", a.lacquerd))}
        print("%d cases do not compile under varnishd or lacquerd" % len(refused))
        status |= reqdiff.report("refused case", [cases[i]["name"] for i in refused], got,
                                 lambda ok: "accepted" if ok else "refused")
        cases = [c for i, c in enumerate(cases) if i not in refused]
        vcl = build_vcl(cases, port)
    logtool = {"varnishd": [a.varnishlog], "lacquerd": [a.lacquer, "log"]}

    def run(name):
        def go(port, work):
            answers = [[] if c.get("setup") else [exchange(port, i, r) for r in c.get("requests", [{}])]
                       for i, c in enumerate(cases)]
            log = read_log(logtool[name], work)
            return [{"answers": answers[i], "log": log.get(i, [])} for i in range(len(cases))]
        return go

    got = {}
    for name, binary in (("varnishd", a.varnishd), ("lacquerd", a.lacquerd)):
        got.update(reqdiff.with_daemons(vcl, [(name, binary)], run(name),
                                        args=DAEMON_ARGS, work=True))
    run_cases = [i for i, c in enumerate(cases) if not c.get("setup")]
    items = [cases[i]["name"] for i in run_cases]
    got = {k: [v[i] for i in run_cases] for k, v in got.items()}

    def show(r):
        lines = []
        for status, hdrs, body in r["answers"]:
            lines.append(status)
            lines.extend("  " + h for h in hdrs)
            lines.append("  body: %r" % body[:400])
        lines.extend("  log: " + rec for rec in r["log"])
        return normalise("\n    ".join(lines))

    # Calls of vmod functions and of object methods (`sh.backend(`), not counting VCL's own
    # dotted names, which take no parentheses.
    calls = sum(len(re.findall(r"\b[a-z]\w*\.\w+\s*\(", json.dumps(c))) for c in cases)
    print("%d cases, %d vmod calls" % (len(cases), calls))
    sys.exit(status | reqdiff.report("case", items, got, show))



if __name__ == "__main__":
    main()
