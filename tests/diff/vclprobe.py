#!/usr/bin/env python3
"""Acceptance probes: compile each VCL with `varnishd -C` and `lacquerd -C`
and compare whether both accept it and, when both refuse it, the first line
of the compiler's message. Probe files (tests/diff/vcl-probes/*.vcls) hold
VCLs separated by lines of `----`; a probe that does not begin with `vcl `
gets `vcl 4.1;` and `backend b none;` put in front. A line `#! text` in a
probe is a note and is removed before compiling.

Matrix files (*.vclm) generate probe families: each chunk (chunks are
separated by `----` as above) is a template whose `{NAME}` fields are
filled with every combination of the values its `#= NAME value` lines
give (one value a line, in order; a value may hold fields too), e.g. `#= T 1s` and `#= T now` with
`set req.ttl = {T};`. Probes are named `file#chunk.i.j...` by the index
of each value.

usage: vclprobe.py [--lacquerd PATH] [--varnishd PATH] [-j N] [--cache FILE] [FILE...]
`--cache tests/diff/vclprobe-varnishd.json` reuses varnishd 7.1.1's
answers to every committed probe (a full run then takes minutes, not
the better part of an hour); new probes are added to the file.
Files ending in .args hold one command line a line (shell words; `{tmp}`
stands for a scratch directory): both daemons run it with their own `-n`,
and the exit status and, on failure, the first line of standard error are
compared (for `-s`, `-p`, `-a` ... argument checks).

Exit status 1 when any probe differs; each difference is printed with its
probe so it can be added to crates/vcl's tests.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PRELUDE = "vcl 4.1;\nbackend b none;\n"


def probes(path):
    text = open(path, encoding="utf-8", newline="").read()
    out = []
    for n, chunk in enumerate(re.split(r"^----\s*$", text, flags=re.M)):
        body = "\n".join(
            line for line in chunk.strip("\n").split("\n") if not line.startswith("#!")
        ).strip()
        if not body:
            continue
        if not body.startswith("vcl "):
            body = PRELUDE + body
        out.append((f"{os.path.basename(path)}#{n}", body + "\n"))
    return out


def matrix_probes(path):
    text = open(path, encoding="utf-8", newline="").read()
    out = []
    for n, chunk in enumerate(re.split(r"^----\s*$", text, flags=re.M)):
        values = {}
        body = []
        for line in chunk.strip("\n").split("\n"):
            m = re.match(r"#=\s*(\w+)\s(.*)$", line)
            if m:
                values.setdefault(m.group(1), []).append(m.group(2).strip())
            elif not line.startswith("#!"):
                body.append(line)
        template = "\n".join(body).strip()
        if not template:
            continue
        # A value may itself hold fields: expand until none is left.
        done = []
        todo = [((), template)]
        while todo:
            idx, t = todo.pop()
            k = next((k for k in values if "{" + k + "}" in t), None)
            if k is None:
                done.append((idx, t))
                continue
            todo.extend(
                (idx + (i,), t.replace("{" + k + "}", v))
                for i, v in reversed(list(enumerate(values[k])))
            )
        for idx, t in done:
            if not t.startswith("vcl "):
                t = PRELUDE + t
            tag = ".".join(str(i) for i in idx)
            out.append((f"{os.path.basename(path)}#{n}.{tag}", t + "\n"))
    return out


def message(stderr):
    """The compiler's first message text, leaving out the location line and
    the source excerpt under it (vcc prints the location first for some
    errors and last for others; `-errvcl` in tests matches the text)."""
    lines = stderr.splitlines()
    for i, l in enumerate(lines):
        if l.startswith("Message from VCC-compiler"):
            lines = lines[i + 1 :]
            break
    skip = 0
    for l in lines:
        if skip:
            skip -= 1
            continue
        if l.startswith("('") or l.startswith("(input Line"):
            skip = 2
            continue
        if l.strip() and not l.startswith("Could not delete"):
            return l.strip()
    return ""


def run(cmd, vcl, workdir, name):
    f = os.path.join(workdir, name.replace("#", "_") + ".vcl")
    with open(f, "w", encoding="utf-8") as fh:
        fh.write(vcl)
    try:
        p = subprocess.run(
            cmd + ["-C", "-f", f, "-n", os.path.join(workdir, "n-" + os.path.basename(cmd[0]))],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        return ("timeout", "")
    err = p.stderr.decode("utf-8", "replace").replace(f, "<probe>")
    return ("ok" if p.returncode == 0 else "refused", message(err) if p.returncode else "")


def arg_probes(path):
    out = []
    for n, line in enumerate(open(path, encoding="utf-8", newline="").read().splitlines()):
        line = line.strip()
        if line and not line.startswith("#"):
            out.append((f"{os.path.basename(path)}:{n + 1}", line))
    return out


def run_args(cmd, line, workdir):
    os.makedirs(workdir, exist_ok=True)
    args = [w.replace("{tmp}", workdir) for w in shlex.split(line)]
    try:
        p = subprocess.run(
            cmd + ["-n", os.path.join(workdir, "n")] + args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        return ("timeout", "")
    err = p.stderr.decode("utf-8", "replace").replace(workdir, "{tmp}")
    # getopt names the program as it was run: compare without it.
    err = re.sub(r"^\S*(varnishd|lacquerd): ", "{prog}: ", err, flags=re.M)
    lines = [l.strip() for l in err.splitlines() if l.strip() and not l.startswith("Could not delete")]
    # varnishd puts a -p error's text on the line after "Error:"
    if len(lines) > 1 and lines[0] == "Error:":
        lines = ["Error: " + lines[1]]
    return (f"exit {p.returncode}", lines[0] if p.returncode and lines else "")


def compare(a, all_probes, one, per_file):
    """Runs the probes; prints and counts those that differ."""
    diffs = 0
    with concurrent.futures.ThreadPoolExecutor(a.j) as ex:
        for name, vcl, v, l in ex.map(one, all_probes):
            # some vcc messages end in their location on the same line
            v, l = [(s, re.sub(r"\('[^']*' Line \d+ Pos \d+\)$", "", m)) for s, m in (v, l)]
            fam = re.split(r"[#:]", name)[0]
            tally = per_file.setdefault(fam, [0, 0])
            tally[0] += 1
            if tuple(v) != tuple(l):
                diffs += 1
                tally[1] += 1
                print(f"=== {name}\n{vcl}--- varnishd: {v[0]}: {v[1]}\n--- lacquerd: {l[0]}: {l[1]}\n")
    return diffs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lacquerd", default=os.path.join(HERE, "../../target/debug/lacquerd"))
    ap.add_argument("--varnishd", default="/usr/sbin/varnishd")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument(
        "--cache",
        help="JSON file keeping varnishd's answers between runs (they do not change)",
    )
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    files = a.files or sorted(glob.glob(os.path.join(HERE, "vcl-probes", "*.*")))
    all_probes = [p for f in files if f.endswith(".vcls") for p in probes(f)]
    all_probes += [p for f in files if f.endswith(".vclm") for p in matrix_probes(f)]
    all_probes += [("args", p) for f in files if f.endswith(".args") for p in arg_probes(f)]
    diffs = 0
    per_file = {}
    cache = {}
    if a.cache and os.path.exists(a.cache):
        cache = json.load(open(a.cache, encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="vclprobe") as tmp:
        # varnishd compiles as its unprivileged user: it must read the probes
        os.chmod(tmp, 0o755)
        def one(p):
            if p[0] == "args":
                name, line = p[1]
                d = os.path.join(tmp, name.replace(":", "_"))
                key = "args:" + line
                v = cache.get(key) or run_args([a.varnishd], line, os.path.join(d, "v"))
                cache[key] = list(v)
                return name, line + "\n", v, run_args([a.lacquerd], line, os.path.join(d, "l"))
            name, vcl = p
            d = os.path.join(tmp, name.replace("#", "_"))
            os.makedirs(d, exist_ok=True)
            key = "vcl:" + vcl
            v = cache.get(key) or run([a.varnishd], vcl, d, name)
            cache[key] = list(v)
            return name, vcl, v, run([a.lacquerd], vcl, d, name)

        try:
            diffs = compare(a, all_probes, one, per_file)
        finally:
            # varnishd's answers so far are kept even when a run breaks off.
            if a.cache:
                json.dump(cache, open(a.cache, "w", encoding="utf-8"), indent=0, sort_keys=True)
    for fam, (n, d) in sorted(per_file.items()):
        print(f"{fam}: {n} probes, {d} differ")
    print(f"{len(all_probes)} probes, {diffs} differ")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
