#!/usr/bin/env python3
"""Compare the counters varnishd and lacquerd hold at the end of the same .vtc files.

Varnish's regression tests check counters (`varnish v1 -expect MAIN.x == N`) as often as log
records, and a counter Lacquer counts differently (or lacks) fails tests nobody here can see.
This runs each test under varnishtest 7.1.1 and under `lacquer vtc`, with a line appended that
copies every varnish instance's counters (`varnishstat -1`; under `lacquer vtc` that name runs
`lacquer stat`) to a file half a second after the test's own steps are done, and compares the two sets: counters
varnishd has and lacquerd lacks, and counters whose values differ. Counters that differ between
any two runs of the same daemon (uptimes, thread and pool gauges, memory pools, locks, addresses
and sizes of the manager) are left out; see VOLATILE.

Usage: tests/diff/statcmp.py [--lacquer BIN] [--jobs N] [--show N] [--only PREFIX[,PREFIX]] FILE.vtc...
Prints, per test, the differing counters (`name: varnishd N | lacquerd M`), and at the end how
many tests differ per counter and which counters lacquerd lacks, most frequent first.
A test is copied next to its original directory's files (its `${testdir}` stays right) into a
scratch directory; a test that fails under either runner is reported as skipped.
Exit status 0: it is a survey, not a check.
"""

import argparse
import collections
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

VOLATILE = re.compile(
    r"^(MGT\.|LCK\.|MEMPOOL\.|MAIN\.(uptime|threads|thread_queue_len|pools|summs|vsm_|shm_|"
    r"n_vcl|vmods|bans_persisted))"
)
INSTANCE = re.compile(r"^\s*varnish\s+(v\w+)\s", re.M)
LINE = re.compile(r"^(\S+)\s+(\d+)\s")


def run(cmd, timeout, cwd=None):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, cwd=cwd)
        return p.returncode, p.stdout.decode("latin-1")
    except subprocess.TimeoutExpired:
        return -1, "timeout"


def counters(path):
    out = {}
    try:
        with open(path, encoding="latin-1") as f:
            for line in f:
                m = LINE.match(line)
                if m:
                    out[m.group(1)] = int(m.group(2))
    except OSError:
        return None
    return out


def compare(path, lacquer, only):
    src = open(path, encoding="latin-1").read()
    names = sorted(set(INSTANCE.findall(src)))
    if not names:
        return path, None, None, "skipped: no varnish instance"
    scratch = tempfile.mkdtemp(prefix="statcmp.")
    # The copy lives beside the original so `${testdir}` still finds its files.
    copy = os.path.join(os.path.dirname(os.path.abspath(path)), f".statcmp.{os.getpid()}.{os.path.basename(scratch)}.vtc")
    results = {}
    try:
        for impl in ("varnishd", "lacquerd"):
            # lacquerd publishes its counters every 100 ms and varnishd's
            # workers add theirs when they finish a task: a moment first.
            extra = "\ndelay 0.5\n" + "".join(
                f'shell {{varnishstat -1 -n ${{{n}_name}} > {scratch}/{n}.{impl} 2>/dev/null || true}}\n'
                for n in names
            )
            with open(copy, "w", encoding="latin-1") as f:
                f.write(src + extra)
            cmd = ["varnishtest", copy] if impl == "varnishd" else [lacquer, "vtc", copy]
            rc, text = run(cmd, 180)
            if rc != 0:
                return path, None, None, f"skipped: {impl} run exit {rc}"
            results[impl] = {n: counters(f"{scratch}/{n}.{impl}") for n in names}
    finally:
        if os.path.exists(copy):
            os.unlink(copy)
    diffs, missing = [], []
    for n in names:
        a, b = results["varnishd"][n], results["lacquerd"][n]
        if not a or b is None:
            continue
        for k, va in a.items():
            if VOLATILE.match(k) or (only and not k.startswith(only)):
                continue
            if k not in b:
                missing.append(k)
            elif b[k] != va:
                diffs.append((k, f"{n} {k}: varnishd {va} | lacquerd {b[k]}"))
    return path, diffs, missing, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lacquer", default="target/debug/lacquer")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--show", type=int, default=8, help="differences shown per test")
    ap.add_argument("--only", default="", help="compare only counters starting with these prefixes")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    only = tuple(p for p in a.only.split(",") if p)
    per_counter, lacking = collections.Counter(), collections.Counter()
    same = differ = skipped = 0
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for path, diffs, missing, err in ex.map(lambda f: compare(f, a.lacquer, only), a.files):
            if err:
                skipped += 1
                print(f"{path}: {err}")
                continue
            for k in set(missing):
                lacking[k] += 1
            if not diffs:
                same += 1
                continue
            differ += 1
            print(f"{path}: {len(diffs)} counter(s) differ")
            for _, d in diffs[: a.show]:
                print(f"    {d}")
            for k in {k for k, _ in diffs}:
                per_counter[k] += 1
            sys.stdout.flush()
    print(f"\n{same} same, {differ} differ, {skipped} skipped")
    for k, n in per_counter.most_common():
        print(f"{n:6} {k}")
    if lacking:
        print("\ncounters varnishd has and lacquerd lacks (tests):")
        for k, n in lacking.most_common():
            print(f"{n:6} {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
