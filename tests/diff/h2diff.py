#!/usr/bin/env python3
"""Send raw HTTP/2 client frames to varnishd and lacquerd and compare what comes back.

How a daemon answers odd HTTP/2 input (which frames it sends, with which flags and error codes,
whether a problem resets one stream or ends the connection with GOAWAY) comes from many small
decisions in varnishd's cache_http2_proto.c, cache_http2_hpack.c, cache_http2_session.c and
cache_http2_deliver.c. A case (one object of the given JSON lists) is a list of client steps,
each turned into raw bytes by the small frame builder below (so malformed frames are easy to
write), plus optional VCL and parameters; both daemons run with `-p feature=+http2`. The
frames each daemon sends back are read until the connection closes or stays quiet for
`--quiet` seconds, decoded (HPACK with Huffman; the tables are read from our own
crates/http/src/hpack sources), and summarised one line per frame: type, flags, stream, error
codes, headers minus date/x-varnish/age, data bytes (consecutive DATA frames of a stream
joined, since frame sizes are the sender's choice), then how the connection ended. The backend
echoes the request line, headers and body it received, so what a daemon forwarded shows in
the DATA. Connection-level frames are listed first, then each stream's frames in order (the
order between streams depends on thread timing).

Some varnishd answers depend on thread timing; `--runs N` runs varnishd N times and a case
whose varnishd answers vary is judged the same when lacquerd's answer is one of them.

Case steps (JSON lists, first item the operation):
  ["magic"]                         the 24-byte client preface alone
  ["preface", [[id, val], ...]]     the preface and a SETTINGS frame (parameters optional)
  ["settings", [[id, val], ...], flags]   ["settings_ack"]
  ["ping", "8 bytes", flags]        ["wu", sid, increment]   ["rst", sid, code]
  ["prio", sid, dependency, weight, exclusive]
  ["goaway", last_sid, code]
  ["headers", sid, "ES EH PAD PRIO", fields, {"pad": n, "padlen": n, "prio": [dep, w, excl]}]
  ["cont", sid, "EH", fields]
  ["data", sid, "ES PAD", text or {"len": n}, {"pad": n, "padlen": n}]
  ["frame", type, flags, sid, "hex payload", length]    any frame, length optional
  ["get", sid, path]                a GET with END_STREAM and END_HEADERS
  ["raw", "latin-1 text"]           bytes as given (HTTP/1 requests, h2c upgrades)
  ["wait", seconds]                 read what comes meanwhile
Fields: [name, value] (a literal without indexing, new name), [name, value, "inc"] (with
incremental indexing), {"idx": n} (indexed), {"hex": "..."} (raw HPACK bytes), {"many": n,
"name": "x", "value": "v"} (n fields x0..), values as {"rep": "x", "n": 5000} for long ones.

Usage: tests/diff/h2diff.py [--lacquerd BIN] [--varnishd BIN] [--quiet S] [--runs N]
                            [--only I,J] [--show]
                            [--varnishd-answers FILE] tests/diff/h2-frames/*.json
Exit status 1 when a case differs.
"""

import json
import os
import re
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reqdiff  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HPACK_SRC = os.path.join(ROOT, "crates/http/src/hpack")

MAGIC = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
TYPES = ["DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS", "PUSH_PROMISE", "PING",
         "GOAWAY", "WINDOW_UPDATE", "CONTINUATION"]
ERRORS = ["NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
          "SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL",
          "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY",
          "HTTP_1_1_REQUIRED"]
FLAGS = {"ES": 0x1, "ACK": 0x1, "EH": 0x4, "PAD": 0x8, "PRIO": 0x20}
MASKED = {"date", "x-varnish", "age"}
READY = 'sub vcl_recv { if (req.url == "/ready") { return (synth(200)); } }\n'


# --- HPACK: tables read from our own sources, a decoder and a plain encoder ---------------

def _tables():
    huff = open(os.path.join(HPACK_SRC, "huffman.rs")).read()
    codes = [(int(c, 16), int(n)) for c, n in re.findall(r"\((0x[0-9a-f]+),\s*(\d+)\)", huff)]
    mod = open(os.path.join(HPACK_SRC, "mod.rs")).read()
    block = mod[mod.index("pub const STATIC"):]
    block = block[: block.index("];")]
    static = re.findall(r'\("([^"]*)",\s*"([^"]*)"\)', block)
    assert len(codes) == 257 and len(static) == 61, "hpack tables not found in %s" % HPACK_SRC
    return {(c, n): sym for sym, (c, n) in enumerate(codes)}, static


HUFF, STATIC = _tables()


def huffman_decode(b):
    out = bytearray()
    code = n = 0
    for byte in b:
        for i in range(7, -1, -1):
            code = (code << 1) | ((byte >> i) & 1)
            n += 1
            sym = HUFF.get((code, n))
            if sym is not None:
                if sym == 256:
                    raise ValueError("EOS in huffman string")
                out.append(sym)
                code = n = 0
            elif n > 30:
                raise ValueError("bad huffman code")
    if n > 7 or code != (1 << n) - 1:
        raise ValueError("bad huffman padding")
    return bytes(out)


class Decoder:
    def __init__(self):
        self.dyn = []
        self.size = 0
        self.max = 4096

    def _int(self, b, i, prefix):
        v = b[i] & ((1 << prefix) - 1)
        i += 1
        if v < (1 << prefix) - 1:
            return v, i
        m = 0
        while True:
            c = b[i]
            i += 1
            v += (c & 0x7F) << m
            m += 7
            if not c & 0x80:
                return v, i

    def _str(self, b, i):
        huff = b[i] & 0x80
        n, i = self._int(b, i, 7)
        s = bytes(b[i: i + n])
        return (huffman_decode(s) if huff else s), i + n

    def _get(self, idx):
        if idx <= 61:
            n, v = STATIC[idx - 1]
            return n.encode(), v.encode()
        return self.dyn[idx - 62]

    def _add(self, n, v):
        self.dyn.insert(0, (n, v))
        self.size += len(n) + len(v) + 32
        while self.size > self.max and self.dyn:
            a, b = self.dyn.pop()
            self.size -= len(a) + len(b) + 32

    def decode(self, b):
        out = []
        i = 0
        while i < len(b):
            c = b[i]
            if c & 0x80:
                idx, i = self._int(b, i, 7)
                out.append(self._get(idx))
            elif c & 0xE0 == 0x20:
                self.max, i = self._int(b, i, 5)
                self._add(b"", b"")
                self.dyn.pop(0)
                self.size -= 32
            else:
                prefix = 6 if c & 0x40 else 4
                idx, i = self._int(b, i, prefix)
                if idx:
                    n = self._get(idx)[0]
                else:
                    n, i = self._str(b, i)
                v, i = self._str(b, i)
                out.append((n, v))
                if c & 0x40:
                    self._add(n, v)
        return out


def enc_int(v, prefix, first=0):
    m = (1 << prefix) - 1
    if v < m:
        return bytes([first | v])
    out = bytearray([first | m])
    v -= m
    while v >= 128:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def enc_str(s):
    return enc_int(len(s), 7) + s


def value(v):
    if isinstance(v, dict):
        return (v["rep"] * v["n"]).encode("latin-1")
    return v.encode("latin-1")


def encode(fields):
    if isinstance(fields, dict):
        fields = [fields]
    out = b""
    for f in fields:
        if isinstance(f, dict):
            if "idx" in f:
                out += enc_int(f["idx"], 7, 0x80)
            elif "hex" in f:
                out += bytes.fromhex(f["hex"])
            elif "many" in f:
                for k in range(f["many"]):
                    out += b"\x00" + enc_str(b"%s%d" % (f["name"].encode(), k)) + enc_str(value(f["value"]))
            continue
        inc = len(f) > 2 and f[2] == "inc"
        out += (b"\x40" if inc else b"\x00") + enc_str(f[0].encode("latin-1")) + enc_str(value(f[1]))
    return out


# --- the frame builder ------------------------------------------------------------------

def frame(ftype, flags, sid, payload, length=None):
    n = len(payload) if length is None else length
    return struct.pack(">I", n)[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def flagbits(s):
    if isinstance(s, int):
        return s
    return sum(FLAGS[f] for f in s.split())


def padded(payload, opts, flags):
    if "pad" in opts or "padlen" in opts:
        pad = opts.get("pad", 0)
        padlen = opts.get("padlen", pad)
        return bytes([padlen]) + payload + b"\0" * pad, flags | FLAGS["PAD"]
    return payload, flags


def settings_payload(params):
    return b"".join(struct.pack(">HI", k, v & 0xFFFFFFFF) for k, v in params or [])


def build(step):
    op, args = step[0], step[1:]
    if op == "magic":
        return MAGIC
    if op == "preface":
        return MAGIC + frame(4, 0, 0, settings_payload(args[0] if args else []))
    if op == "settings":
        return frame(4, args[1] if len(args) > 1 else 0, 0, settings_payload(args[0]))
    if op == "settings_ack":
        return frame(4, 1, 0, b"")
    if op == "ping":
        return frame(6, args[1] if len(args) > 1 else 0, 0, args[0].encode("latin-1"))
    if op == "wu":
        return frame(8, 0, args[0], struct.pack(">I", args[1] & 0xFFFFFFFF))
    if op == "rst":
        return frame(3, 0, args[0], struct.pack(">I", args[1]))
    if op == "prio":
        excl = 0x80000000 if len(args) > 3 and args[3] else 0
        return frame(2, 0, args[0], struct.pack(">IB", args[1] | excl, args[2]))
    if op == "goaway":
        return frame(7, 0, 0, struct.pack(">II", args[0], args[1]))
    if op in ("headers", "cont"):
        sid, flags, fields = args[0], flagbits(args[1]), args[2]
        opts = args[3] if len(args) > 3 else {}
        block = encode(fields)
        if op == "cont":
            return frame(9, flags, sid, block)
        if "prio" in opts:
            dep, w, excl = opts["prio"]
            block = struct.pack(">IB", dep | (0x80000000 if excl else 0), w) + block
            flags |= FLAGS["PRIO"]
        block, flags = padded(block, opts, flags)
        return frame(1, flags, sid, block)
    if op == "data":
        sid, flags, body = args[0], flagbits(args[1]), args[2]
        opts = args[3] if len(args) > 3 else {}
        body = b"x" * body["len"] if isinstance(body, dict) else body.encode("latin-1")
        body, flags = padded(body, opts, flags)
        return frame(0, flags, sid, body)
    if op == "frame":
        return frame(args[0], args[1], args[2], bytes.fromhex(args[3]), args[4] if len(args) > 4 else None)
    if op == "get":
        fields = [[":method", "GET"], [":scheme", "http"], [":authority", "h"],
                  [":path", args[1] if len(args) > 1 else "/"]]
        return frame(1, 0x5, args[0], encode(fields))
    if op == "raw":
        return args[0].encode("latin-1")
    raise ValueError("unknown step %r" % (step,))


# --- reading and summarising what comes back --------------------------------------------

class Reader:
    def __init__(self, sock):
        self.s = sock
        self.buf = b""
        self.end = None

    def pump(self, seconds):
        """Reads for up to `seconds` of quiet; False once the connection ended."""
        if self.end:
            return False
        self.s.settimeout(seconds)
        try:
            while True:
                d = self.s.recv(65536)
                if not d:
                    self.end = "closed"
                    return False
                self.buf += d
        except socket.timeout:
            return True
        except OSError as e:
            self.end = "reset (%s)" % type(e).__name__
            return False


def summarize(raw, end):
    """One line per frame (DATA of a stream joined), connection frames first, then streams."""
    lines = []
    if raw.startswith(b"HTTP/1."):
        head, sep, raw = raw.partition(b"\r\n\r\n")
        first = head.split(b"\r\n")[0].decode("latin-1")
        if not first.startswith("HTTP/1.1 101"):
            # an HTTP/1 answer: summarised as reqdiff does
            return [("h1", x) for x in reqdiff.summarize(head + sep + raw)] + [("end", end)]
        lines.append(("h1", first))
    dec = Decoder()
    pending = {}
    while raw:
        if len(raw) < 9:
            lines.append((0, "partial frame header %r" % raw))
            break
        n = int.from_bytes(raw[:3], "big")
        t, fl, sid = raw[3], raw[4], int.from_bytes(raw[5:9], "big") & 0x7FFFFFFF
        if len(raw) < 9 + n:
            lines.append((sid, "partial frame %s len=%d got=%d" % (t, n, len(raw) - 9)))
            break
        p, raw = raw[9: 9 + n], raw[9 + n:]
        name = TYPES[t] if t < len(TYPES) else "TYPE%d" % t
        if t != 0 and sid in pending:
            lines.append((sid, pending.pop(sid)))
        if t == 0:
            body = p[1: len(p) - p[0]] if fl & 0x8 else p
            prev = pending.pop(sid, None)
            text = (prev[0] if prev else b"") + body
            es = bool(fl & 1)
            if es:
                lines.append((sid, "DATA%s %r" % (" ES", text)))
            else:
                pending[sid] = (text,)
            continue
        if t in (1, 9):
            blk = p
            if t == 1 and fl & 0x8:
                blk = blk[1: len(blk) - blk[0]]
            if t == 1 and fl & 0x20:
                blk = blk[5:]
            try:
                hdrs = dec.decode(blk)
                shown = ", ".join("%s: %s" % (k.decode("latin-1"), v.decode("latin-1"))
                                  for k, v in hdrs if k.decode("latin-1").lower() not in MASKED)
            except (ValueError, IndexError) as e:
                shown = "undecodable %s" % e
            flags = " ".join(f for f, b in (("ES", 1), ("EH", 4)) if fl & b)
            lines.append((sid, "%s %s [%s]" % (name, flags, shown)))
        elif t == 3:
            c = int.from_bytes(p[:4], "big")
            lines.append((sid, "RST_STREAM %s" % (ERRORS[c] if c < len(ERRORS) else c)))
        elif t == 4:
            if fl & 1:
                lines.append((sid, "SETTINGS ACK"))
            else:
                ps = [struct.unpack(">HI", p[i: i + 6]) for i in range(0, len(p) - 5, 6)]
                lines.append((sid, "SETTINGS %s" % " ".join("%d=%d" % x for x in ps)))
        elif t == 6:
            lines.append((sid, "PING%s %r" % (" ACK" if fl & 1 else "", p)))
        elif t == 7:
            last, c = struct.unpack(">II", p[:8])
            lines.append((sid, "GOAWAY last=%d %s debug=%r" % (last, ERRORS[c] if c < len(ERRORS) else c, p[8:])))
        elif t == 8:
            lines.append((sid, "WINDOW_UPDATE %d" % int.from_bytes(p[:4], "big")))
        else:
            lines.append((sid, "%s flags=%#x len=%d" % (name, fl, n)))
    for sid, v in pending.items():
        lines.append((sid, "DATA %r" % v))
    lines.append(("end", end))
    return lines


def exchange(port, steps, quiet):
    s = socket.create_connection(("127.0.0.1", port), 5)
    r = Reader(s)
    for step in steps:
        if step[0] == "wait":
            r.pump(step[1])
            continue
        try:
            s.sendall(build(step))
        except OSError:
            break
        # let the daemon act on each step before the next one, as a client on a network would
        r.pump(0.02)
    while r.pump(quiet):
        break
    s.close()
    return summarize(r.buf, r.end or "open")


def norm(lines):
    """An exchange as compared: connection frames first, then each stream's, masked."""
    # A daemon closing with client bytes unread resets the connection: an
    # end like a close (what was sent before is compared).
    lines = [("end", "closed") if k == "end" and v.startswith("reset") else (k, v) for k, v in lines]
    group = {"h1": -2, 0: -1, "end": 1 << 40}
    out = sorted(lines, key=lambda x: group.get(x[0], x[0]))
    text = "\n    ".join("%s: %s" % (k, v) if isinstance(k, int) and k else v for k, v in out)
    text = re.sub(r"\((Varnish|Lacquer)/[0-9.]+\)", "(VERSION)", text)
    return reqdiff.norm([text]).replace("\\r\\n", "\\n")


def run_groups(cases, binaries, a):
    """Runs the cases, grouped by VCL and parameters, on each daemon; answers by name, case."""
    base = reqdiff.pass_backend(reqdiff.backend_conn)
    backend = base[: base.index("sub vcl_recv")]
    groups = {}
    for i, c in cases:
        groups.setdefault((c.get("vcl"), tuple(c.get("params", []))), []).append((i, c))
    got = {name: {} for name, _ in binaries}
    for (vcl, params), members in groups.items():
        # the daemons' start-up check fetches /ready and waits for a 200
        text = backend + READY + vcl if vcl else base
        args = ["-p", "feature=+http2"]
        for p in params:
            args += ["-p", p]
        res = reqdiff.with_daemons(
            text, binaries,
            lambda port: [exchange(port, c["frames"], c.get("quiet", a.quiet)) for _, c in members],
            args,
        )
        for name, answers in res.items():
            for (i, _), ans in zip(members, answers):
                got[name][i] = ans
    return got


def take(argv, opt, default):
    """Removes `opt VALUE` from argv; the value or the default."""
    if opt not in argv:
        return default
    i = argv.index(opt)
    val = argv[i + 1]
    del argv[i: i + 2]
    return val


def main():
    argv = sys.argv[1:]
    runs = int(take(argv, "--runs", 1))
    only = take(argv, "--only", None)
    saved = take(argv, "--varnishd-answers", None)
    show = "--show" in argv
    if show:
        argv.remove("--show")
    sys.argv[1:] = argv
    a = reqdiff.arguments(0.3)
    cases = [(i, c) for i, c in enumerate(a.items)
             if only is None or str(i) in only.split(",")]
    # varnishd's answers (runs of them) come from the file when it has the case
    known = json.load(open(saved)) if saved and os.path.exists(saved) else {}
    todo = [(i, c) for i, c in cases if json.dumps(c, sort_keys=True) not in known]
    vnames = [("varnishd%d" % k, a.varnishd) for k in range(runs)]
    fresh = run_groups(todo, vnames, a) if todo else {}
    for i, c in todo:
        known[json.dumps(c, sort_keys=True)] = [fresh[n][i] for n, _ in vnames]
    if saved:
        json.dump(known, open(saved, "w"))
    lacq = run_groups(cases, [("lacquerd", a.lacquerd)], a)["lacquerd"]
    unstable = 0
    final = {"varnishd": [], "lacquerd": []}
    for i, c in cases:
        vs = [norm([tuple(x) for x in r]) for r in known[json.dumps(c, sort_keys=True)]]
        l_ = norm(lacq[i])
        if len(set(vs)) > 1:
            unstable += 1
            print("unstable on varnishd: case %d %s (%d answers)" % (i, c.get("name"), len(set(vs))))
        final["varnishd"].append(l_ if l_ in vs else vs[0])
        final["lacquerd"].append(l_)
        if show:
            print("=== %d %s\n  varnishd:\n    %s\n  lacquerd:\n    %s" % (i, c.get("name"), vs[0], l_))
    names = ["%d %s" % (i, c.get("name", "")) for i, c in cases]
    print("%d cases unstable on varnishd over the runs" % unstable)
    sys.exit(reqdiff.report("case", names, final, lambda s: s))


if __name__ == "__main__":
    main()
