#!/usr/bin/env python3
"""Peak memory of lacquerd while it streams one large pass.

A backend on loopback sends SIZE MiB with a Content-Length, one MiB every
5 ms; a client behind the builtin VCL's pass (it sends a Cookie) reads it as
fast as it can. Since a private body is freed as it is delivered
(ARCHITECTURE.md, "A private body is freed as it is delivered"), the peak
resident size stays near the daemon's own footprint instead of growing by
the body's size.

Usage: bench/pass_rss.py [--lacquerd PATH] [--size MIB]
Prints the bytes received and lacquerd's VmHWM (peak RSS) in kB.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def backend(sock, size_mib):
    blk = b"x" * (1 << 20)
    while True:
        try:
            c, _ = sock.accept()
        except OSError:
            return
        c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (size_mib << 20))
        for _ in range(size_mib):
            c.sendall(blk)
            time.sleep(0.005)
        c.close()


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lacquerd", default=os.path.join(root, "target", "debug", "lacquerd"))
    ap.add_argument("--size", type=int, default=200, help="body size in MiB")
    a = ap.parse_args()
    if not os.path.exists(a.lacquerd):
        sys.exit(f"pass_rss: {a.lacquerd} not found: run `cargo build -p lacquerd` first")
    be = socket.socket()
    be.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    be.bind(("127.0.0.1", 0))
    be.listen(8)
    threading.Thread(target=backend, args=(be, a.size), daemon=True).start()
    work = tempfile.mkdtemp(prefix="pass_rss.")
    http, cli = free_port(), free_port()
    d = subprocess.Popen(
        [a.lacquerd, "-F", "-n", os.path.join(work, "n"), "-a", f"127.0.0.1:{http}",
         "-T", f"127.0.0.1:{cli}", "-S", "none", "-j", "none",
         "-b", f"127.0.0.1:{be.getsockname()[1]}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", http), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        req = urllib.request.Request(f"http://127.0.0.1:{http}/big", headers={"Cookie": "a=1"})
        got = 0
        with urllib.request.urlopen(req, timeout=60) as r:
            while True:
                b = r.read(1 << 20)
                if not b:
                    break
                got += len(b)
        with open(f"/proc/{d.pid}/status") as f:
            hwm = next(line.split()[1] for line in f if line.startswith("VmHWM"))
        print(f"received {got} bytes of {a.size << 20}; lacquerd VmHWM {hwm} kB")
    finally:
        d.terminate()
        d.wait(timeout=10)
        be.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
