#!/usr/bin/env python3
"""Serve raw backend responses through varnishd and lacquerd and compare what clients get.

What a client receives for an odd backend response (a status line without a reason, framing
that disagrees with itself, a body where none belongs, a response cut short) comes from
varnishd's HTTP/1 fetch code and its error branches. Each case of the given JSON lists is the
raw bytes a backend sends (after which it closes the connection); the client fetches it through
a `return (pass)` VCL on a new connection, and the answer is summarised as
`tests/diff/reqdiff.py` does (status line, framing headers, body, closed or not). A second
request on the same connection shows whether the daemon kept the client connection usable.

Usage: tests/diff/respdiff.py [--lacquerd BIN] [--varnishd BIN] [--quiet S] FILE.json...
Exit status 1 when a case differs.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reqdiff  # noqa: E402

CASES = []


def backend_conn(c):
    c.settimeout(5)
    buf = b""
    try:
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                return
            buf += d
        path = buf.split(b" ")[1].decode()
        n = path.strip("/")
        if n.isdigit() and int(n) < len(CASES):
            c.sendall(CASES[int(n)].encode("latin-1"))
        else:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    except OSError:
        pass
    finally:
        try:
            c.shutdown(socket.SHUT_WR)
            time.sleep(0.05)
        except OSError:
            pass
        c.close()


def serve(listener):
    while True:
        c, _ = listener.accept()
        threading.Thread(target=backend_conn, args=(c,), daemon=True).start()


def run(binary, vcl_path, work, quiet):
    port = reqdiff.free_port()
    shutil.rmtree(work, ignore_errors=True)
    p = subprocess.Popen(
        [binary, "-F", "-a", "127.0.0.1:%d" % port, "-f", vcl_path, "-n", work],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 20
        while True:
            try:
                r = reqdiff.exchange(port, b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 1)
                if r[0].startswith("HTTP/1.1 200"):
                    break
            except OSError:
                pass
            if time.time() > deadline or p.poll() is not None:
                sys.exit("%s did not start" % binary)
            time.sleep(0.1)
        out = []
        for i in range(len(CASES)):
            req = b"GET /%d HTTP/1.1\r\nHost: h\r\n\r\nGET /again HTTP/1.1\r\nHost: h\r\n\r\n" % i
            out.append(reqdiff.exchange(port, req, quiet))
        return out
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lacquerd", default="target/debug/lacquerd")
    ap.add_argument("--varnishd", default="/usr/sbin/varnishd")
    ap.add_argument("--quiet", type=float, default=1.0)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    for f in a.files:
        CASES.extend(json.load(open(f)))
    bl = socket.socket()
    bl.bind(("127.0.0.1", 0))
    bl.listen(64)
    threading.Thread(target=serve, args=(bl,), daemon=True).start()
    tmp = tempfile.mkdtemp(prefix="respdiff-")
    # varnishd's compiler runs as its unprivileged user: it must read the VCL.
    os.chmod(tmp, 0o755)
    vcl = tmp + "/resp.vcl"
    with open(vcl, "w") as f:
        f.write(
            'vcl 4.1;\nbackend default { .host = "127.0.0.1"; .port = "%d"; }\n'
            "sub vcl_recv { return (pass); }\n" % bl.getsockname()[1]
        )
    got = {}
    for name, binary in (("varnishd", a.varnishd), ("lacquerd", a.lacquerd)):
        got[name] = run(binary, vcl, "%s/%s" % (tmp, name), a.quiet)
    shutil.rmtree(tmp, ignore_errors=True)
    differ = 0
    for i, case in enumerate(CASES):
        v, l = reqdiff.norm(got["varnishd"][i]), reqdiff.norm(got["lacquerd"][i])
        if v != l:
            differ += 1
            print("--- case %d: %r\n  varnishd:\n    %s\n  lacquerd:\n    %s" % (i, case, v, l))
    print("%d of %d cases differ" % (differ, len(CASES)))
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
