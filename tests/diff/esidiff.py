#!/usr/bin/env python3
"""Run ESI documents through varnishd and lacquerd and compare what clients get.

The ESI parser's decisions (what is markup, which URL and Host an include gets, what an error
leaves in the page) are many small branches of varnishd's cache_esi_parse.c. This serves every
document of the given JSON lists (arrays of strings) from one backend, with `beresp.do_esi` on,
through Debian's varnishd and through lacquerd, and prints the documents whose answers differ.
The backend answers `/doc/N` with document N, `/inc/500*` with a 500, and any other URL with
`[<url> <Host header>]`, so an include's URL and Host show in the page. Ports and XIDs are
masked.

Usage: tests/diff/esidiff.py [--lacquerd BIN] [--varnishd BIN] FILE.json...
Exit status 1 when a document differs.
"""

import argparse
import http.server
import json
import os
import re
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

DOCS = []


class Backend(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = self.path
        n = path[5:].split("?")[0] if path.startswith("/doc/") else ""
        if n.isdigit() and int(n) < len(DOCS):
            body, status = DOCS[int(n)].encode("utf-8", "surrogateescape"), 200
        elif path.startswith("/inc/500"):
            body, status = b"[err]", 500
        else:
            body, status = ("[%s %s]" % (path, self.headers.get("Host"))).encode(), 200
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def fetch(port, path):
    try:
        r = urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5)
        return (r.status, r.read().decode("utf-8", "replace"))
    except urllib.error.HTTPError as e:
        return (e.code, e.read().decode("utf-8", "replace"))
    except Exception as e:  # a reset or a timeout is an answer too
        return ("error", type(e).__name__)


def run(binary, vcl_path, work, count):
    port = free_port()
    shutil.rmtree(work, ignore_errors=True)
    p = subprocess.Popen(
        [binary, "-F", "-a", "127.0.0.1:%d" % port, "-f", vcl_path, "-n", work],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 20
        while fetch(port, "/ready")[0] == "error":
            if time.time() > deadline or p.poll() is not None:
                sys.exit("%s did not start" % binary)
            time.sleep(0.1)
        return [fetch(port, "/doc/%d" % i) for i in range(count)]
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lacquerd", default="target/debug/lacquerd")
    ap.add_argument("--varnishd", default="/usr/sbin/varnishd")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    for f in a.files:
        DOCS.extend(json.load(open(f)))
    srv = Server(("127.0.0.1", 0), Backend)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    tmp = tempfile.mkdtemp(prefix="esidiff-")
    # varnishd's compiler runs as its unprivileged user: it must read the VCL.
    os.chmod(tmp, 0o755)
    vcl = tmp + "/esi.vcl"
    with open(vcl, "w") as f:
        f.write(
            'vcl 4.1;\nbackend default { .host = "127.0.0.1"; .port = "%d"; }\n'
            "sub vcl_recv { return (pass); }\n"
            'sub vcl_backend_response { set beresp.do_esi = bereq.url ~ "^/doc/"; }\n'
            % srv.server_address[1]
        )
    got = {}
    for name, binary in (("varnishd", a.varnishd), ("lacquerd", a.lacquerd)):
        got[name] = run(binary, vcl, "%s/%s" % (tmp, name), len(DOCS))
    shutil.rmtree(tmp, ignore_errors=True)

    def norm(r):
        return re.sub(r"XID: \d+", "XID: N", re.sub(r"127\.0\.0\.1:\d+", "HOST", str(r)))

    differ = 0
    for i, doc in enumerate(DOCS):
        v, l = norm(got["varnishd"][i]), norm(got["lacquerd"][i])
        if v != l:
            differ += 1
            print("--- document %d: %r\n  varnishd: %s\n  lacquerd: %s" % (i, doc, v, l))
    print("%d of %d documents differ" % (differ, len(DOCS)))
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
