#!/usr/bin/env python3
"""Send raw client requests to varnishd and lacquerd and compare their answers.

How a daemon answers a malformed or unusual request (the status and reason it gives, whether it
closes the connection, what it forwards to the backend) comes from many small decisions in
varnishd's HTTP/1 reader and request state machine. Each case of the given JSON lists is a
string of raw bytes (Python escapes such as \\r\\n, \\x00 are written as JSON escapes); it is
sent on a new connection, the answers are read until the connection closes or stays quiet for
`--quiet` seconds, and for each response the status line, the `Connection` and
`Content-Length` headers and the body are kept, plus whether the daemon closed. The VCL
passes every request to one backend, which answers with the request line and the headers it
received, so what the daemon forwards shows in the body. Ports, XIDs, lengths and the spacing
after a forwarded header's colon (a deviation) are masked.

Usage: tests/diff/reqdiff.py [--lacquerd BIN] [--varnishd BIN] [--quiet S] FILE.json...
Exit status 1 when a case differs.
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
import threading
import time


def recv_until(c, buf, done):
    """Reads from `c` onto `buf` until `done(buf)`; None if the peer closes first."""
    while not done(buf):
        d = c.recv(65536)
        if not d:
            return None
        buf += d
    return buf


def read_head(c, buf):
    """The next request head on `c` as its lines, and the bytes after it; None at EOF."""
    buf = recv_until(c, buf, lambda b: b"\r\n\r\n" in b)
    if buf is None:
        return None
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head.split(b"\r\n"), rest


def backend_conn(c):
    """Answers each request on `c` with what it received (request line and headers)."""
    buf = b""
    c.settimeout(5)
    try:
        while True:
            got = read_head(c, buf)
            if got is None:
                return
            lines, buf = got
            hdrs = [l for l in lines[1:] if not re.match(rb"(?i)(x-varnish|x-forwarded-for|via):", l)]
            n = 0
            te = False
            for l in lines[1:]:
                k, _, v = l.partition(b":")
                if k.strip().lower() == b"content-length":
                    n = int(v.strip() or b"0")
                if k.strip().lower() == b"transfer-encoding":
                    te = True
            if te:
                # a chunked body: read to its end
                buf = recv_until(c, buf, lambda b: re.search(rb"(^|\r\n)0\r\n(.*\r\n)?\r\n", b, re.S))
                if buf is None:
                    return
                m = re.search(rb"(^|\r\n)0\r\n(.*?\r\n)?\r\n", buf, re.S)
                body, buf = buf[: m.end()], buf[m.end():]
            else:
                buf = recv_until(c, buf, lambda b: len(b) >= n)
                if buf is None:
                    return
                body, buf = buf[:n], buf[n:]
            out = b"\n".join([lines[0]] + sorted(hdrs)) + b"\nbody:" + body
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(out), out))
    except OSError:
        return
    finally:
        c.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def exchange(port, data, quiet):
    s = socket.create_connection(("127.0.0.1", port), 5)
    try:
        s.sendall(data)
    except OSError:
        pass
    got = b""
    closed = False
    s.settimeout(quiet)
    try:
        while True:
            d = s.recv(65536)
            if not d:
                closed = True
                break
            got += d
    except socket.timeout:
        pass
    except OSError as e:
        got += b"<%s>" % type(e).__name__.encode()
        closed = True
    s.close()
    return summarize(got) + ["closed" if closed else "open"]


def summarize(raw):
    out = []
    while raw:
        if b"\r\n\r\n" not in raw:
            out.append("partial: %r" % raw[:200])
            break
        head, raw = raw.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        keep = [lines[0].decode("latin-1")]
        n = 0
        chunked = False
        for l in lines[1:]:
            k, _, v = l.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                n = int(v.strip())
            if k == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
            if k in (b"connection", b"content-length", b"transfer-encoding"):
                keep.append(l.decode("latin-1"))
        if chunked:
            body = b""
            while True:
                size_line, _, raw = raw.partition(b"\r\n")
                size = int(size_line.split(b";")[0] or b"0", 16)
                body += raw[:size]
                raw = raw[size + 2:]
                if size == 0:
                    break
        elif lines[0].split(b" ")[1:2] in ([b"304"], [b"204"]) or lines[0].startswith(b"HTTP/1.1 1"):
            body = b""
        else:
            body, raw = raw[:n], raw[n:]
        keep.append("body: " + body.decode("latin-1"))
        out.append(" | ".join(keep))
    return out


def start(binary, vcl_path, work, args=()):
    """Starts a daemon on a free port with the VCL (and extra command-line `args`); returns it
    and the port once it answers."""
    port = free_port()
    shutil.rmtree(work, ignore_errors=True)
    p = subprocess.Popen(
        [binary, "-F", "-a", "127.0.0.1:%d" % port, "-f", vcl_path, "-n", work, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # A large VCL takes varnishd a while to compile on a loaded machine.
    deadline = time.time() + 90
    while True:
        try:
            r = exchange(port, b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 1)
            if r[0].startswith("HTTP/1.1 200"):
                return p, port
        except OSError:
            pass
        if time.time() > deadline or p.poll() is not None:
            p.kill()
            sys.exit("%s did not start" % binary)
        time.sleep(0.1)


def with_daemons(vcl_text, binaries, fn, args=(), work=False):
    """Runs `fn(port)` (`fn(port, workdir)` with `work`) against each (name, binary) started
    with the VCL and the extra command-line `args`; the answers by name."""
    tmp = tempfile.mkdtemp(prefix="lacquer-diff-")
    # varnishd's compiler runs as its unprivileged user: it must read the VCL.
    os.chmod(tmp, 0o755)
    vcl = tmp + "/diff.vcl"
    with open(vcl, "w") as f:
        f.write(vcl_text)
    got = {}
    try:
        for name, binary in binaries:
            wd = "%s/%s" % (tmp, name)
            p, port = start(binary, vcl, wd, args)
            try:
                got[name] = fn(port, wd) if work else fn(port)
            finally:
                p.terminate()
                p.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return got


def report(what, items, got, normalise):
    """Prints the items whose normalised answers differ; the exit status."""
    differ = 0
    for i, item in enumerate(items):
        v, l = normalise(got["varnishd"][i]), normalise(got["lacquerd"][i])
        if v != l:
            differ += 1
            print("--- %s %d: %r\n  varnishd:\n    %s\n  lacquerd:\n    %s" % (what, i, item, v, l))
    print("%d of %d %ss differ" % (differ, len(items), what))
    return 1 if differ else 0


def norm(r):
    """An exchange as compared: ports, XIDs and lengths masked."""
    s = "\n    ".join(r)
    s = re.sub(r"127\.0\.0\.1:\d+", "HOST", s)
    s = re.sub(r"XID: \d+", "XID: N", s)
    # Header spacing after the colon is not kept (DEVIATIONS.md).
    s = re.sub(r"(?m)^([!-9;-~]+):[ \t]*", r"\1: ", s)
    s = re.sub(r"Content-Length: \d+", "Content-Length: N", s)
    return s


def arguments(quiet):
    """The tools' command line: the two daemons, the quiet time, the JSON lists (read)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--lacquerd", default="target/debug/lacquerd")
    ap.add_argument("--varnishd", default="/usr/sbin/varnishd")
    ap.add_argument("--quiet", type=float, default=quiet)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    a.items = []
    for f in a.files:
        a.items.extend(json.load(open(f)))
    a.daemons = (("varnishd", a.varnishd), ("lacquerd", a.lacquerd))
    return a


def serve_each(handle):
    """A loopback listener calling `handle(conn)` in a thread per connection; its port."""
    bl = socket.socket()
    bl.bind(("127.0.0.1", 0))
    bl.listen(64)

    def serve():
        while True:
            c, _ = bl.accept()
            threading.Thread(target=handle, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return bl.getsockname()[1]


def pass_backend(handle):
    """A backend calling `handle(conn)` per connection; a VCL passing every request to it."""
    return (
        'vcl 4.1;\nbackend default { .host = "127.0.0.1"; .port = "%d"; }\n'
        "sub vcl_recv { return (pass); }\n" % serve_each(handle)
    )


def main():
    a = arguments(0.5)
    vcl = pass_backend(backend_conn)
    got = with_daemons(
        vcl,
        a.daemons,
        lambda port: [exchange(port, c.encode("latin-1"), a.quiet) for c in a.items],
    )
    sys.exit(report("case", a.items, got, norm))


if __name__ == "__main__":
    main()
