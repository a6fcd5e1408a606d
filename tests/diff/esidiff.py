#!/usr/bin/env python3
"""Run ESI documents through varnishd and lacquerd and compare what clients get.

The ESI parser's decisions (what is markup, which URL and Host an include gets, what an error
leaves in the page) are many small branches of varnishd's cache_esi_parse.c. This serves every
document of the given JSON lists (arrays of strings) from one backend, with `beresp.do_esi` on,
through Debian's varnishd and through lacquerd, and prints the documents whose answers differ.
The backend answers `/doc/N` with document N, `/inc/500*` with a 500, and any other URL with
`[<url> <Host header>]`, so an include's URL and Host show in the page. Ports and XIDs are
masked; the answers are summarised as `tests/diff/reqdiff.py` does.

Usage: tests/diff/esidiff.py [--lacquerd BIN] [--varnishd BIN] FILE.json...
Exit status 1 when a document differs.
"""

import argparse
import http.server
import json
import os
import socketserver
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reqdiff  # noqa: E402

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
    vcl = (
        'vcl 4.1;\nbackend default { .host = "127.0.0.1"; .port = "%d"; }\n'
        "sub vcl_recv { return (pass); }\n"
        'sub vcl_backend_response { set beresp.do_esi = bereq.url ~ "^/doc/"; }\n'
        % srv.server_address[1]
    )

    def pages(port):
        out = []
        for i in range(len(DOCS)):
            req = b"GET /doc/%d HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n" % i
            out.append(reqdiff.exchange(port, req, 5))
        return out

    got = reqdiff.with_daemons(
        vcl, (("varnishd", a.varnishd), ("lacquerd", a.lacquerd)), pages
    )
    sys.exit(reqdiff.report("document", DOCS, got, reqdiff.norm))


if __name__ == "__main__":
    main()
