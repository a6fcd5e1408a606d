#!/usr/bin/env python3
"""The conformance ratchet: run Varnish 7.1.1's own .vtc suite against
lacquerd with `lacquer vtc`, and fail if any test listed in passing.txt no
longer passes. Newly passing tests are printed so they can be added
(`--update` rewrites passing.txt with the current passes).

Our own regression tests, `tests/vtc/lacquer/*.vtc` (named `lacquer/…`),
run with every selection and must always pass; one that fails or does not
report is a regression. Each also passes under real varnishd (`varnishtest
FILE`): they pin down behaviour where Lacquer once differed from it.

Usage: tests/vtc/ratchet.py [--update] [--jobs N] [--only GLOB]
"""
import argparse
import collections
import fnmatch
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIST = os.path.join(ROOT, "tests", "vtc", "passing.txt")
OWN = os.path.join(ROOT, "tests", "vtc", "lacquer")


def corpus_dir():
    env = os.environ.get("LACQUER_VTC_CORPUS")
    if env:
        return env
    d = ROOT
    while True:
        cand = os.path.join(d, "shared", "vtc", "varnish-7.1.1")
        if os.path.isdir(cand):
            return cand
        parent = os.path.dirname(d)
        if parent == d:
            sys.exit("ratchet: cannot find shared/vtc/varnish-7.1.1 above %s "
                     "(set LACQUER_VTC_CORPUS)" % ROOT)
        d = parent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default="*")
    ap.add_argument("--timeout", type=int, default=60)
    a = ap.parse_args()
    corpus = corpus_dir()
    files = []
    for sub in ("tests", "vmod-tests"):
        d = os.path.join(corpus, sub)
        for f in sorted(os.listdir(d)):
            rel = "%s/%s" % (sub, f)
            if f.endswith(".vtc") and fnmatch.fnmatch(rel, a.only):
                files.append(os.path.join(d, f))
    own = set()
    for f in sorted(os.listdir(OWN)):
        if f.endswith(".vtc"):
            files.append(os.path.join(OWN, f))
            own.add("lacquer/" + f)

    def rel_of(path):
        if os.path.dirname(os.path.abspath(path)) == OWN:
            return "lacquer/" + os.path.basename(path)
        return os.path.relpath(path, corpus)
    lacquer = os.path.join(ROOT, "target", os.environ.get("LACQUER_PROFILE", "debug"), "lacquer")
    report = os.path.join(ROOT, "target", "vtc-report.json")
    cmd = [lacquer, "vtc", "-k", "-q", "-j", str(a.jobs), "-t", str(a.timeout),
           "--report", report] + files
    subprocess.run(cmd, cwd="/tmp", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(report) as fh:
        rep = json.load(fh)
    tests = rep["tests"] if isinstance(rep, dict) else rep
    status = {}
    reasons = collections.Counter()
    for t in tests:
        path = t.get("file") or t.get("path")
        rel = rel_of(path)
        status[rel] = t["status"]
        if t["status"] == "failed":
            first = t.get("failure") or {}
            msg = first.get("message") if isinstance(first, dict) else str(first)
            reasons[(msg or "?").split("\n")[0][:90]] += 1
    listed = set()
    if os.path.exists(LIST):
        with open(LIST) as fh:
            listed = {l.strip() for l in fh if l.strip() and not l.startswith("#")}
    listed |= own
    passing = {k for k, v in status.items() if v == "passed"}
    per_family = collections.defaultdict(lambda: [0, 0, 0])
    for k, v in status.items():
        fam = "lacquer" if k in own else k.split("/")[0] + ":" + os.path.basename(k)[0]
        idx = {"passed": 0, "failed": 1}.get(v, 2)
        per_family[fam][idx] += 1
    print("vtc conformance per family (passed/failed/skipped):")
    for fam in sorted(per_family):
        p, f, s = per_family[fam]
        print("  %-14s %4d %4d %4d" % (fam, p, f, s))
    print("most common first failures:")
    for msg, n in reasons.most_common(10):
        print("  %4d  %s" % (n, msg))
    regressed = sorted(t for t in listed if status.get(t) != "passed" and (t in status or t in own))
    if regressed:
        # A loaded machine can fail a timing-sensitive test: run the
        # regressed ones again, alone, before calling them regressions.
        print("re-running %d listed tests that failed, one at a time" % len(regressed))
        retry = os.path.join(ROOT, "target", "vtc-retry.json")
        subprocess.run([lacquer, "vtc", "-k", "-q", "-j", "1", "-t", str(a.timeout),
                        "--report", retry]
                       + [os.path.join(OWN, t[len("lacquer/"):]) if t in own else os.path.join(corpus, t)
                          for t in regressed],
                       cwd="/tmp", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(retry) as fh:
            again = json.load(fh)["tests"]
        for t in again:
            rel = rel_of(t["file"])
            if t["status"] == "passed":
                status[rel] = "passed"
                passing.add(rel)
        regressed = sorted(t for t in regressed if status.get(t) != "passed")
    new = sorted(passing - listed)
    if new:
        print("newly passing (add to tests/vtc/passing.txt, or run with --update):")
        for t in new:
            print("  " + t)
    if a.update:
        with open(LIST, "w") as fh:
            fh.write("# Varnish 7.1.1 corpus tests that lacquerd passes; CI fails if one stops passing.\n")
            for t in sorted((passing | (listed - set(status))) - own):
                fh.write(t + "\n")
    total = collections.Counter(status.values())
    print("vtc: %d passed, %d failed, %d skipped" % (total["passed"], total["failed"], total["skipped"]))
    if regressed:
        print("REGRESSIONS (listed as passing, now failing):")
        for t in regressed:
            print("  " + t)
        sys.exit(1)


if __name__ == "__main__":
    main()
