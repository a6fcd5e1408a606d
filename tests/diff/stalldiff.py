#!/usr/bin/env python3
"""Run stalled clients and backends against varnishd and lacquerd and compare how each ends.

A request that never completes, or a connection that is never closed, comes from a wait without
a bound, and varnishd bounds every one of its waits by a parameter (timeout_idle for a request
head, send_timeout/idle_send_timeout for a client that does not read, first_byte_timeout and
between_bytes_timeout for a backend, pipe_timeout for a pipe, the waiting list for requests
behind a busy object). Each case of the given JSON lists is an object:

  name      what it shows
  params    daemon parameters (`-p name=value`), e.g. {"timeout_idle": "1"}
  vcl       VCL after the backend declaration (default: `sub vcl_recv { return (pass); }`);
            `${blackhole}` is the port of a listener whose accept queue is full, so a
            connection to it is never established (connect_timeout)
  backend   scripts by request URL: {"/x": [[steps of the 1st fetch], [steps of the 2nd]], ...};
            a fetch without a script is answered `200` with body `ok` (the connection is
            closed after a fetch without a script for `/ready`, kept otherwise). The head of a
            request is read before its script runs; steps:
              {"send": TEXT}  {"sleep": S}  {"close": "fin"|"rst"}  {"shut": "wr"}
              {"body": N}  read N bytes of request body
            after the steps the connection waits for the next request (or for its end).
  clients   connections: {"at": S, "rcvbuf": BYTES, "read_at": S, "steps": [...]}, steps:
              {"send": TEXT}  {"sleep": S}  {"close": "fin"|"rst"}  {"shut": "wr"}
            the connection is read from `read_at` (default: at once) until it ends.
  until     seconds after which a connection still open is reported `open` (default 4)
  tol       time tolerance in seconds (default 0.3; 20 % of the time if larger)
  bytes     "mask" to compare a cut body's byte count only as `cut` (a client that does not
            read gets what the kernel buffered)
  framing   "mask" to compare `Content-Length` and chunked framing as one (varnishd wakes a
            waiting list on its error object before the body is stored, so a waiter's 503 is
            chunked or not by thread timing)
  sess_closed  "mask" to leave the `sess_closed` counter out (varnishd counts a client's
            close in it only when a write to the closed client failed during the request, so
            whether it flushed a response head before its body had come decides)

For each side it keeps, per client connection: each response's status line, framing and body
(or how many bytes of it came), when the first byte came, and how the connection ended (`fin`,
`rst`, still `open`, or closed by the client first) and when; per backend connection: the
request lines it received, request body bytes, and how and when the daemon ended it; the
`MAIN` counters of sessions, session-close reasons, fetches, backends, busy objects and pipes;
and the `SessClose` reasons and `FetchError` texts of the log. Times are compared within the
tolerance, everything else exactly.

Usage: tests/diff/stalldiff.py [--lacquerd BIN] [--varnishd BIN] [--only SUBSTR] FILE.json...
Exit status 1 when a case differs.
"""

import json
import os
import re
import select
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reqdiff  # noqa: E402

COUNTERS = re.compile(
    r"^MAIN\.(?P<n>sess_(conn|drop|fail|closed|closed_err|pipeline|readahead)|sc_\w+|client_req\w*|"
    r"backend_(conn|unhealthy|busy|fail|reuse|recycle|retry)|fetch_\w+|busy_\w+|s_(pipe|pass|fetch|"
    r"synth|req|sess)|req_dropped|esi_\w+|losthdr|pipe_limited)\s+(?P<v>\d+)"
)
LOGTAGS = ("SessClose", "FetchError")


class Run:
    """What one daemon's run saw: client and backend connections and their events."""

    def __init__(self, case):
        self.case = case
        self.t0 = time.time()
        self.lock = threading.Lock()
        self.fetches = {}
        self.backend = []

    def now(self):
        return time.time() - self.t0


def wait_readable(s, secs, sink, first=False):
    """Waits up to `secs` (or, when `first`, until some bytes came), appending what `s`
    receives to `sink`; the end ("fin"/"rst") if the peer ended the connection, else None."""
    end = time.time() + secs
    while True:
        left = end - time.time()
        if left <= 0:
            return None
        r, _, _ = select.select([s], [], [], left)
        if not r:
            return None
        try:
            d = s.recv(65536)
        except ConnectionResetError:
            return "rst"
        except OSError:
            return "rst"
        if not d:
            return "fin"
        sink.extend(d)
        if first:
            return None


def recv_head(s, buf, until):
    """Reads `buf` until it holds a request head; the head, or the end of the connection."""
    while b"\r\n\r\n" not in buf:
        got = bytearray()
        end = wait_readable(s, max(0.0, until - time.time()), got, True)
        buf.extend(got)
        if end:
            return None, end
        if not got and time.time() >= until:
            return None, "open"
    i = buf.index(b"\r\n\r\n") + 4
    head = bytes(buf[:i])
    del buf[:i]
    return head, None


def hard_close(s, how):
    if how == "rst":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def backend_conn(run, c):
    """Serves one daemon-to-backend connection by the case's scripts; records what it saw."""
    rec = {"reqs": [], "body": 0, "end": "open", "t": None}
    with run.lock:
        run.backend.append(rec)
    until = run.t0 + run.case.get("until", 4) + 1
    buf = bytearray()

    def ended(how):
        rec["end"], rec["t"] = how, run.now()

    try:
        while True:
            head, end = recv_head(c, buf, until)
            if head is None:
                if end != "open":
                    ended("daemon " + end)
                return
            line = head.split(b"\r\n")[0].decode("latin-1")
            rec["reqs"].append(re.sub(r"127\.0\.0\.1:\d+", "HOST", line))
            url = line.split(" ")[1] if " " in line else ""
            with run.lock:
                n = run.fetches.get(url, 0)
                run.fetches[url] = n + 1
            scripts = run.case.get("backend", {}).get(url)
            if scripts is not None and n < len(scripts):
                steps = scripts[n]
            elif url == "/ready":
                steps = [{"send": "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"},
                         {"close": "fin"}]
            else:
                steps = [{"send": "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}]
            for st in steps:
                if "send" in st:
                    try:
                        c.sendall(st["send"].encode("latin-1"))
                    except OSError:
                        ended("daemon rst")
                        return
                elif "sleep" in st:
                    got = bytearray()
                    end = wait_readable(c, st["sleep"], got)
                    buf.extend(got)
                    if end:
                        ended("daemon " + end)
                        return
                elif "body" in st:
                    while len(buf) < st["body"]:
                        got = bytearray()
                        end = wait_readable(c, max(0.0, until - time.time()), got, True)
                        if end or not got:
                            rec["body"] += len(buf)
                            ended("daemon " + (end or "open"))
                            return
                        buf.extend(got)
                    rec["body"] += st["body"]
                    del buf[: st["body"]]
                elif "shut" in st:
                    c.shutdown(socket.SHUT_WR)
                elif "close" in st:
                    ended("backend " + st["close"])
                    hard_close(c, st["close"])
                    return
    finally:
        try:
            c.close()
        except OSError:
            pass


def responses(raw, mask, same_framing=False):
    """Summaries of the responses in `raw` (possibly cut)."""
    out = []
    while raw:
        if b"\r\n\r\n" not in raw:
            out.append("partial head: %r" % raw[:80])
            break
        head, raw = raw.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        status = lines[0].decode("latin-1")
        n, chunked, close = None, False, False
        for l in lines[1:]:
            k, _, v = l.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                n = int(v.strip() or b"0")
            elif k == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
            elif k == b"connection" and b"close" in v.lower():
                close = True
        frame = "chunked" if chunked else ("CL" if n is not None else "eof")
        if same_framing and frame != "eof":
            frame = "framed"
        code = status.split(" ")[1:2]
        body, complete = b"", True
        if code in (["304"], ["204"]) or status.startswith("HTTP/1.1 1"):
            pass
        elif chunked:
            body, complete = bytearray(), False
            while True:
                size_line, sep, rest = raw.partition(b"\r\n")
                try:
                    size = int(size_line.split(b";")[0] or b"x", 16)
                except ValueError:
                    break
                if not sep or len(rest) < size + 2:
                    body.extend(rest[:size])
                    raw = b""
                    break
                body.extend(rest[:size])
                raw = rest[size + 2:]
                if size == 0:
                    complete = True
                    break
            body = bytes(body)
        elif n is not None:
            body, raw = raw[:n], raw[n:]
            complete = len(body) == n
        else:
            body, raw = raw, b""
        if complete and len(body) <= 120:
            what = "body %r" % body.decode("latin-1")
        elif complete:
            # Lengths with numbers masked: the XID in a synthetic body has more digits on varnishd.
            what = "body %d bytes" % len(re.sub(rb"\d+", b"N", body))
        elif mask:
            what = "cut body"
        else:
            what = "cut body after %d bytes" % len(body)
        out.append("%s | %s%s | %s" % (status, frame, " close" if close else "", what))
    return out


def client_conn(run, spec, rec):
    """One scripted client connection; fills `rec` with what it received and how it ended."""
    until = run.t0 + run.case.get("until", 4)
    time.sleep(max(0.0, run.t0 + spec.get("at", 0) - time.time()))
    s = socket.socket()
    if "rcvbuf" in spec:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, spec["rcvbuf"])
    s.connect(("127.0.0.1", run.port))
    raw = bytearray()
    state = {"closed_by_client": None}

    def reader():
        time.sleep(max(0.0, run.t0 + spec.get("read_at", 0) - time.time()))
        while True:
            if state["closed_by_client"] is not None:
                rec["end"] = "client " + state["closed_by_client"]
                return
            left = until - time.time()
            if left <= 0:
                rec["end"] = "open"
                return
            try:
                r, _, _ = select.select([s], [], [], min(left, 0.05))
            except (OSError, ValueError):
                continue
            if not r:
                continue
            try:
                d = s.recv(65536)
            except ConnectionResetError:
                rec["end"], rec["t"] = "rst", run.now()
                return
            except OSError:
                continue
            if not d:
                rec["end"], rec["t"] = "fin", run.now()
                return
            if not raw:
                rec["first"] = run.now()
            raw.extend(d)

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    for st in spec.get("steps", []):
        if "send" in st:
            try:
                s.sendall(st["send"].encode("latin-1"))
            except OSError as e:
                rec["send_error"] = type(e).__name__
        elif "sleep" in st:
            time.sleep(st["sleep"])
        elif "shut" in st:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        elif "close" in st:
            state["closed_by_client"] = st["close"]
            time.sleep(0.06)
            hard_close(s, st["close"])
    th.join()
    if state["closed_by_client"] is None:
        s.close()
    rec["responses"] = responses(bytes(raw), run.case.get("bytes") == "mask",
                                 run.case.get("framing") == "mask")


def blackhole():
    """A listening port that never completes a connection: a backlog of one, filled."""
    bl = socket.socket()
    bl.bind(("127.0.0.1", 0))
    bl.listen(0)
    fill = []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(bl.getsockname())
        except BlockingIOError:
            pass
        fill.append(c)
    time.sleep(0.1)
    return bl, fill


def stats(binary, work):
    """The selected counters and log records of the daemon behind `work`."""
    lacquer = "lacquerd" in os.path.basename(binary)
    base = [os.path.join(os.path.dirname(binary), "lacquer")] if lacquer else []
    stat = base + ["stat"] if lacquer else ["varnishstat"]
    log = base + ["log"] if lacquer else ["varnishlog"]
    out = subprocess.run(stat + ["-n", work, "-1"], capture_output=True, timeout=20).stdout.decode("latin-1")
    counters = ["%s=%s" % (m.group("n"), m.group("v")) for m in map(COUNTERS.match, out.splitlines())
                if m and m.group("v") != "0"]
    out = subprocess.run(log + ["-n", work, "-d", "-g", "raw", "-i", ",".join(LOGTAGS)],
                         capture_output=True, timeout=20).stdout.decode("latin-1")
    records = []
    for line in out.splitlines():
        f = line.split(None, 3)
        if len(f) == 4 and f[1] in LOGTAGS:
            data = f[3]
            if f[1] == "SessClose":
                data = data.split(" ")[0]
            records.append("%s %s" % (f[1], data))
    return sorted(counters), sorted(records)


def lines(r, case=None):
    """The comparable lines of a run: (text, time or None)."""
    out = []
    masked = ("sess_closed=",) if (case or {}).get("sess_closed") == "mask" else ()
    for i, c in enumerate(r["clients"]):
        for resp in c.get("responses", []):
            out.append(("client %d: %s" % (i, resp), None))
        if c.get("first") is not None:
            out.append(("client %d: first byte" % i, c["first"]))
        out.append(("client %d: end %s" % (i, c["end"]), c["t"]))
        if "send_error" in c:
            out.append(("client %d: send failed: %s" % (i, c["send_error"]), None))
    for b in sorted(r["backend"], key=lambda b: (b["reqs"], b["end"])):
        out.append(("backend: %s body %d, end %s" % (" ; ".join(b["reqs"]), b["body"], b["end"]), b["t"]))
    out.extend((c, None) for c in r["counters"] if not c.startswith(masked))
    out.extend((entry, None) for entry in r["log"])
    return out


def same(case, v, lq):
    tol = case.get("tol", 0.3)
    a, b = lines(v, case), lines(lq, case)
    if [x[0] for x in a] != [x[0] for x in b]:
        return False
    for (_, ta), (_, tb) in zip(a, b):
        if (ta is None) != (tb is None):
            return False
        if ta is not None and abs(ta - tb) > max(tol, 0.2 * max(ta, tb)):
            return False
    return True


def show(r):
    return "\n    ".join(t if tm is None else "%s @%.2f" % (t, tm) for t, tm in lines(r))


def main():
    ap_only = None
    if "--only" in sys.argv:
        i = sys.argv.index("--only")
        ap_only = sys.argv[i + 1]
        del sys.argv[i:i + 2]
    a = reqdiff.arguments(0)
    cases = [c for c in a.items if ap_only is None or ap_only in c["name"]]
    differ = 0
    for case in cases:
        holder = {"run": None}
        vcl = reqdiff.pass_backend(lambda c: backend_conn(holder["run"] or Run({}), c))
        if "vcl" in case:
            vcl = vcl.split("sub vcl_recv")[0] + case["vcl"] + "\n"
        if "${blackhole}" in vcl:
            hole = blackhole()
            vcl = vcl.replace("${blackhole}", str(hole[0].getsockname()[1]))
        args = []
        for k, v in case.get("params", {}).items():
            args += ["-p", "%s=%s" % (k, v)]
        binaries = dict(a.daemons)

        def fn(port, work, name):
            holder["run"] = Run(case)
            try:
                return run_case(holder["run"], binaries[name], port, work)
            finally:
                holder["run"] = None

        got = {}
        for name in ("varnishd", "lacquerd"):
            got.update(reqdiff.with_daemons(
                vcl, [(name, binaries[name])],
                lambda port, work, name=name: fn(port, work, name), args=args, work=True))
        if same(case, got["varnishd"], got["lacquerd"]):
            print("same: %s" % case["name"])
            if os.environ.get("STALLDIFF_SHOW"):
                print("    " + show(got["varnishd"]))
        else:
            differ += 1
            print("--- %s\n  varnishd:\n    %s\n  lacquerd:\n    %s" % (
                case["name"], show(got["varnishd"]), show(got["lacquerd"])))
        sys.stdout.flush()
    print("%d of %d cases differ" % (differ, len(cases)))
    sys.exit(1 if differ else 0)


def run_case(run, binary, port, work):
    """Runs the clients of `run.case` against the daemon on `port`; what both sides saw."""
    case = run.case
    run.port = port
    recs = [{"end": "open", "t": None, "first": None} for _ in case.get("clients", [])]
    ths = [threading.Thread(target=client_conn, args=(run, spec, rec), daemon=True)
           for spec, rec in zip(case.get("clients", []), recs)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    # What the daemon does after the clients are gone (a fetch that goes on, a connection it
    # closes late) shows by `until`; then let it settle.
    time.sleep(max(0.0, run.t0 + case.get("until", 4) - time.time()) + 0.3)
    counters, log = stats(binary, work)
    with run.lock:
        be = [dict(b) for b in run.backend if b["reqs"] != ["GET /ready HTTP/1.1"]]
    return {"clients": recs, "backend": be, "counters": counters, "log": log}


if __name__ == "__main__":
    main()
