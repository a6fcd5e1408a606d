#!/usr/bin/env python3
"""Serve raw backend responses through varnishd and lacquerd and compare what clients get.

What a client receives for an odd backend response (a status line without a reason, framing
that disagrees with itself, a body where none belongs, a response cut short) comes from
varnishd's HTTP/1 fetch code and its error branches. Each case of the given JSON lists is the
raw bytes a backend sends (after which it closes the connection); the client fetches it through
a `return (pass)` VCL on a new connection, and the answer is summarised as
`tests/diff/reqdiff.py` does (status line, framing headers, body, closed or not). A second
request on the same connection shows whether the daemon kept the client connection usable.

Some answers depend on varnishd's thread timing, not on a decision: whether a body that came
with the head was all stored before the client side chose its framing (`Content-Length` or
chunked; `lacquer/miss_stream_framing.vtc` pins the case of a body that comes later), and
whether a broken body fails the fetch before the client side starts (503) or after (a cut
response). A difference in those is judged by running the case a few times.

Usage: tests/diff/respdiff.py [--lacquerd BIN] [--varnishd BIN] [--quiet S] FILE.json...
Exit status 1 when a case differs.
"""

import os
import socket
import sys
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


def fetch_all(port, quiet):
    out = []
    for i in range(len(CASES)):
        req = b"GET /%d HTTP/1.1\r\nHost: h\r\n\r\nGET /again HTTP/1.1\r\nHost: h\r\n\r\n" % i
        out.append(reqdiff.exchange(port, req, quiet))
    return out


def main():
    a = reqdiff.arguments(1.0)
    CASES.extend(a.items)
    vcl = reqdiff.pass_backend(backend_conn)
    got = reqdiff.with_daemons(vcl, a.daemons, lambda port: fetch_all(port, a.quiet))
    sys.exit(reqdiff.report("case", CASES, got, reqdiff.norm))


if __name__ == "__main__":
    main()
