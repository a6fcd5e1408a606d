#!/usr/bin/env python3
"""Compare the shared-memory log of varnishd and lacquerd over the same .vtc files.

Varnish's regression tests check log records (`logexpect`) as often as responses, and the
records a test does not check are where behaviour quietly differs. This runs each test under
varnishtest 7.1.1 and under `lacquer vtc`, both with `-v` (which copies every daemon's log into
the test output as `vsl|` lines), and compares the records transaction by transaction, after
dropping what legitimately differs between two runs (timestamps, ports, file descriptors,
durations, CLI and Debug records).

Usage: tests/diff/vslcmp.py [--lacquer BIN] [--jobs N] [--only TAG[,TAG]] [--show N] [--detail] [--by-vxid] [--timestamps] FILE.vtc...
Transactions are paired by their place in the Begin/Link tree (session n, its request n, that
request's fetch n), so a different vxid order does not hide the records; values of run-time
macros (ports, the temporary directory) are compared by the macro's name.
`--timestamps` compares `Timestamp` records too, by their event name only (`Start`, `Req`,
`Fetch`, `Process` ...), so which events a transaction stamps and in what order is checked
while the times themselves are not.
Prints, per test, the first differing record of each differing transaction, and at the end how
many tests differ per tag (the tag of the first difference), most frequent first.
Exit status 0: it is a survey, not a check.
"""

import argparse
import collections
import concurrent.futures
import difflib
import re
import subprocess
import sys

# Records that differ between any two runs, or describe the harness rather than the daemon.
SKIP = {"Timestamp", "CLI", "Debug", "SessOpen", "ReqStart", "BackendOpen", "BackendReuse",
        "BackendClose", "VSL", "Witness", "ExpKill", "ExpBan", "WorkThread", "Proxy", "ObjProtocol",
        "VCL_use", "Backend_health", "H2RxHdr", "H2RxBody", "H2TxHdr", "H2TxBody", "SessClose",
        "Hash"}
NUM = re.compile(r"\b\d+\.\d+\b")
DATE = re.compile(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT")
ADDR = re.compile(r"127\.0\.0\.1[ :]\d+|::1 \d+")
EPOCH = re.compile(r"\b1[6-9]\d{8}\b")
PRODUCT = re.compile(r"\((Varnish|Lacquer)/[\d.]+\)")
LINE = re.compile(r"^\*{4} (v\d+)\s+vsl\|\s*(\d+) (\S+)\s+(\S) ?(.*)$")
MACRO = re.compile(r"^\*{4} \S+\s+macro def (\w+)=(.+)$")
# Macros whose value is chosen at run time (ports, temporary directories): a record that
# shows one (a test copying ${s1_port} into a header) is compared with the macro's name.
RUNTIME_MACRO = re.compile(r"_(port|sock|name)$|^tmpdir$")


def normalize(tag, data):
    data = DATE.sub("DATE", data)
    data = ADDR.sub("ADDR", data)
    data = PRODUCT.sub("(PRODUCT)", data)
    data = NUM.sub("N.N", data)
    data = EPOCH.sub("T", data)
    if tag in ("ReqAcct", "BereqAcct", "PipeAcct"):
        return data
    if tag == "Hit":
        return data.split()[0] if data else data
    if tag in ("RespHeader", "BerespHeader", "ObjHeader") and data.lower().startswith(("age:", "x-varnish:")):
        return data.split(":")[0] + ": ..."
    return data


def records(text, by_vxid=False, timestamps=False):
    """{instance: {transaction: [(tag, kind, data)]}} from a -v test output.

    A transaction is named by its place in the tree its Begin and Link records draw (the n-th
    session, its n-th request, that request's n-th fetch ...), not by its vxid, and vxids in
    Begin and Link records are replaced by those names: the two daemons may number the same
    transactions in another order (`--by-vxid` compares by vxid instead)."""
    macros = []
    raw = collections.defaultdict(lambda: collections.defaultdict(list))
    for line in text.splitlines():
        m = MACRO.match(line)
        if m and RUNTIME_MACRO.search(m.group(1)) and len(m.group(2)) >= 4:
            macros.append((m.group(2), "${" + m.group(1) + "}"))
            continue
        m = LINE.match(line)
        if not m:
            continue
        inst, vxid, tag, kind, data = m.groups()
        if (tag in SKIP and not (timestamps and tag == "Timestamp")) or vxid == "0":
            continue
        if tag == "Timestamp":
            data = data.split(":")[0]
        raw[inst][int(vxid)].append((tag, kind, data))
    macros.sort(key=lambda kv: -len(kv[0]))
    out = {}
    for inst, txs in raw.items():
        names = {v: str(v) for v in txs} if by_vxid else tree_names(txs)
        out[inst] = {}
        for vxid, recs in txs.items():
            norm = []
            for tag, kind, data in recs:
                for value, name in macros:
                    data = data.replace(value, name)
                if tag in ("Begin", "Link"):
                    f = data.split()
                    if len(f) >= 2 and f[1].isdigit():
                        f[1] = names.get(int(f[1]), f[1] if f[1] == "0" else "?")
                        data = " ".join(f)
                elif tag in ("Hit", "HitMiss", "HitPass"):
                    f = data.split()
                    if f and f[0].isdigit():
                        f[0] = names.get(int(f[0]), "?")
                        data = " ".join(f)
                elif tag in ("BereqHeader", "ReqHeader") and data.lower().startswith("x-varnish:"):
                    data = re.sub(r"\d+", lambda m: names.get(int(m.group()), m.group()), data)
                norm.append((tag, kind, normalize(tag, data)))
            out[inst][names[vxid]] = norm
    return out


def tree_names(txs):
    """{vxid: name}: sessions (and other roots) in vxid order, children in their parent's Link order."""
    parent, children = {}, collections.defaultdict(list)
    for vxid, recs in txs.items():
        for tag, _, data in recs:
            f = data.split()
            if tag == "Begin" and len(f) >= 2 and f[1].isdigit():
                parent[vxid] = int(f[1])
            elif tag == "Link" and len(f) >= 2 and f[1].isdigit():
                children[vxid].append((f[0], int(f[1])))
    names = {}

    def walk(vxid, name):
        if vxid in names:
            return
        names[vxid] = name
        seen = collections.Counter()
        for kind, child in children[vxid]:
            walk(child, f"{name}/{kind}{seen[kind]}")
            seen[kind] += 1

    def signature(vxid):
        # Clients that run at the same time open their sessions in any order: roots are sorted
        # by the requests they carry first, and by vxid among equals.
        reqs = [txs[c] for _, c in children[vxid] if c in txs] or [txs[vxid]]
        return [[d for t, _, d in r if t in ("ReqMethod", "ReqURL")] for r in reqs], vxid

    roots = collections.Counter()
    for vxid in sorted(txs, key=signature):
        if parent.get(vxid) in txs or vxid in names:
            continue
        kind = next((d.split()[0] for t, _, d in txs[vxid] if t == "Begin" and d), "tx")
        walk(vxid, f"{kind}{roots[kind]}")
        roots[kind] += 1
    for vxid in sorted(txs):
        if vxid not in names:
            kind = next((d.split()[0] for t, _, d in txs[vxid] if t == "Begin" and d), "tx")
            names[vxid] = f"unlinked-{kind}{roots['unlinked-' + kind]}"
            roots["unlinked-" + kind] += 1
    return names


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        return p.returncode, p.stdout.decode("latin-1")
    except subprocess.TimeoutExpired:
        return -1, ""


def compare(path, lacquer, only, detail=False, by_vxid=False, timestamps=False):
    rv, v = run(["varnishtest", "-v", path], 120)
    rl, l = run([lacquer, "vtc", "-v", path], 120)
    if rv != 0 or rl != 0:
        return path, None, f"skipped: varnishtest exit {rv}, lacquer vtc exit {rl}"
    rv_, rl_ = records(v, by_vxid, timestamps), records(l, by_vxid, timestamps)
    diffs = []
    for inst in sorted(set(rv_) | set(rl_)):
        a, b = rv_.get(inst, {}), rl_.get(inst, {})
        for vxid in sorted(set(a) | set(b), key=lambda n: [(len(p), p) for p in n.split("/")]):
            x, y = a.get(vxid, []), b.get(vxid, [])
            if only:
                x = [r for r in x if r[0] in only]
                y = [r for r in y if r[0] in only]
            if x == y:
                continue
            sm = difflib.SequenceMatcher(a=x, b=y, autojunk=False)
            ops = [o for o in sm.get_opcodes() if o[0] != "equal"]
            # A transaction without its End was cut off when the test stopped the daemon (an
            # HTTP/2 session or stream still open): what the other daemon logged after the
            # point it reached is not a difference.
            if x and ops and not ended(x) and ops[-1][0] == "insert" and ops[-1][1] == len(x):
                ops.pop()
            if y and ops and not ended(y) and ops[-1][0] == "delete" and ops[-1][3] == len(y):
                ops.pop()
            if not ops:
                continue
            for op, i1, i2, j1, j2 in ops:
                left = x[i1] if i1 < i2 else None
                right = y[j1] if j1 < j2 else None
                tag = (left or right)[0]
                diffs.append((tag, f"{inst} {vxid}: varnishd {fmt(left)} | lacquerd {fmt(right)}"))
                break
            if detail:
                print(f"--- {path} {inst} {vxid}")
                for d in difflib.unified_diff([fmt(r) for r in x], [fmt(r) for r in y], "varnishd", "lacquerd", lineterm="", n=2):
                    print("    " + d)
    return path, diffs, None


def ended(recs):
    return any(r[0] == "End" for r in recs)


def fmt(r):
    return "-" if r is None else f"{r[0]} {r[1]} {r[2]!r}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lacquer", default="target/debug/lacquer")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="", help="compare only these tags")
    ap.add_argument("--show", type=int, default=3, help="differences shown per test")
    ap.add_argument("--detail", action="store_true", help="print a diff of each differing transaction")
    ap.add_argument("--by-vxid", action="store_true", help="pair transactions by vxid, not by their place in the tree")
    ap.add_argument("--timestamps", action="store_true", help="compare Timestamp records by their event name")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    only = set(t for t in a.only.split(",") if t)
    per_tag = collections.Counter()
    same = differ = skipped = 0
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for path, diffs, err in ex.map(lambda f: compare(f, a.lacquer, only, a.detail, a.by_vxid, a.timestamps), a.files):
            if err:
                skipped += 1
                print(f"{path}: {err}")
                continue
            if not diffs:
                same += 1
                continue
            differ += 1
            print(f"{path}: {len(diffs)} transaction(s) differ")
            for _, d in diffs[: a.show]:
                print(f"    {d}")
            for t in {t for t, _ in diffs}:
                per_tag[t] += 1
            sys.stdout.flush()
    print(f"\n{same} same, {differ} differ, {skipped} skipped")
    for t, n in per_tag.most_common():
        print(f"  {n:4} {t}")


if __name__ == "__main__":
    main()
