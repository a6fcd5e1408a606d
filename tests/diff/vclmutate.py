#!/usr/bin/env python3
"""Mutation probes for the VCL compiler: takes the VCLs of the visible
tests (the `-vcl`, `-vcl+backend` and `-errvcl` blocks of the .vtc files),
changes each one a little (a token dropped, doubled or swapped with its
neighbour, a variable, literal or operator replaced by another of the
compiler's vocabulary, a subroutine renamed so its statements meet another
context) and compiles the result with `varnishd -C` and `lacquerd -C`.
It reports where the two disagree on accepting the VCL or, when both
refuse it, on the first line of the message (as tests/diff/vclprobe.py
compares them). Mutants are made by a seeded generator, so a run is
reproducible: `vclmutate.py --seed 7 --count 500`.

Differences found are printed with the mutant; `--save FILE` appends them
to a probe file (tests/diff/vcl-probes/*.vcls format) so that the fix is
kept by `vclprobe.py`. varnishd's answers are kept in `--cache FILE`
between runs (keyed by the VCL's text).

usage: vclmutate.py [--seed N] [--count N] [-j N] [--cache FILE] [--save FILE]
                    [--lacquerd PATH] [--varnishd PATH] [VTC...]
Exit status 1 when any mutant differs.
"""
import argparse
import concurrent.futures
import glob
import hashlib
import json
import os
import random
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vclprobe  # noqa: E402

CORPUS = os.environ.get("VTC_CORPUS", "/work/shared/vtc/varnish-7.1.1")

# What a mutation may put in place of a token of the same kind.
VARIABLES = [
    "req.url", "req.method", "req.http.x", "req.restarts", "req.ttl", "req.grace",
    "req.hash_always_miss", "req.backend_hint", "req.esi", "req.can_gzip", "req.xid",
    "req.is_hitmiss", "req.storage", "req.proto", "req.hash",
    "bereq.url", "bereq.http.x", "bereq.backend", "bereq.retries", "bereq.method",
    "bereq.first_byte_timeout", "bereq.uncacheable", "bereq.is_bgfetch",
    "beresp.ttl", "beresp.grace", "beresp.keep", "beresp.status", "beresp.reason",
    "beresp.http.x", "beresp.do_esi", "beresp.do_gzip", "beresp.uncacheable",
    "beresp.storage", "beresp.was_304", "beresp.backend", "beresp.filters",
    "beresp.age", "beresp.proto",
    "obj.ttl", "obj.hits", "obj.status", "obj.http.x", "obj.uncacheable", "obj.age",
    "obj.reason", "obj.storage",
    "resp.status", "resp.reason", "resp.http.x", "resp.is_streaming", "resp.filters",
    "resp.body", "beresp.body", "resp.do_esi",
    "client.ip", "client.identity", "server.ip", "server.hostname", "server.identity",
    "local.ip", "remote.ip", "local.endpoint", "local.socket", "now", "sess.xid",
    "sess.timeout_idle", "storage.Transient.free_space", "storage.s0.happy",
    "req_top.url", "req_top.http.x", "bereq.body",
]
LITERALS = [
    "1", "0", "-1", "1.5", "-0.5", "1s", "10m", "1h", "1d", "1w", "1y", "100ms",
    "-1s", "1.5s", '"s"', '""', '{"long"}', '"""triple"""', "true", "false",
    "10KB", "1MB", "1G", "100B", "0x10", "1e3", "999999999999999999999",
    "1 s", "b", "default",
]
OPERATORS = [
    "==", "!=", "~", "!~", "<", ">", "<=", ">=", "+", "-", "*", "/", "=", "+=",
    "-=", "*=", "/=", "&&", "||", "!", ".", ",", ";",
]
SUBS = [
    "vcl_recv", "vcl_pipe", "vcl_pass", "vcl_hash", "vcl_purge", "vcl_miss",
    "vcl_hit", "vcl_deliver", "vcl_synth", "vcl_backend_fetch",
    "vcl_backend_response", "vcl_backend_error", "vcl_init", "vcl_fini",
]
ACTIONS = [
    "lookup", "hash", "pass", "pipe", "synth(200)", "restart", "deliver",
    "fetch", "retry", "abandon", "miss", "fail", "ok", "purge", "vcl(x)",
    "error(503)", "restart()",
]

TOKEN = re.compile(
    r'''(?P<ws>\s+)
      |(?P<comment>//[^\n]*|\#[^\n]*|/\*.*?\*/)
      |(?P<str>\{"[\s\S]*?"\}|"""[\s\S]*?"""|"(?:[^"\n])*")
      |(?P<num>\d+(?:\.\d+)?(?:ms|s|m|h|d|w|y|B|KB|MB|GB|TB)?)
      |(?P<id>[A-Za-z_][\w.\-]*)
      |(?P<op>==|!=|!~|<=|>=|\+=|-=|\*=|/=|&&|\|\||[-+*/=<>!~.,;:(){}\[\]])
      |(?P<other>.)''',
    re.X | re.S,
)


def tokens(text):
    return [(m.lastgroup, m.group()) for m in TOKEN.finditer(text)]


def blocks(path):
    """The VCLs of a .vtc file: the brace blocks after -vcl, -vcl+backend
    and -errvcl, with the backend -vcl+backend would add."""
    text = open(path, encoding="utf-8", errors="replace").read()
    out = []
    for m in re.finditer(r"-(vcl\+backend|vcl|errvcl)\b", text):
        i = text.find("{", m.end())
        if i < 0:
            continue
        if m.group(1) != "errvcl" and text[m.end():i].strip():
            continue
        depth, j = 0, i
        while j < len(text):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        body = text[i + 1 : j]
        if m.group(1) == "vcl+backend":
            body = 'vcl 4.1;\nbackend s1 { .host = "127.0.0.1"; .port = "80"; }\n' + body
        # Macros become what a test run would make of them.
        body = re.sub(r"\$\{\w+_sock\}", "127.0.0.1:80", body)
        body = re.sub(r"\$\{\w+_addr\}", "127.0.0.1", body)
        body = re.sub(r"\$\{\w+_port\}", "80", body)
        body = re.sub(r"\$\{bad_backend\}", "127.0.0.1:1", body)
        body = re.sub(r"\$\{[^}]*\}", "127.0.0.1", body)
        if "C{" in body:
            continue
        out.append(body)
    return out


def mutate(rng, text):
    toks = tokens(text)
    idx = [i for i, (k, _) in enumerate(toks) if k not in ("ws", "comment")]
    if len(idx) < 4:
        return None
    # Not the first statement (`vcl 4.x;`): it is checked on its own.
    idx = idx[3:]
    i = rng.choice(idx)
    kind, val = toks[i]
    how = rng.randrange(8)
    if how == 0:
        toks[i] = ("ws", " ")
    elif how == 1:
        toks.insert(i, (kind, val + " "))
    elif how == 2:
        later = [j for j in idx if j > i]
        if not later:
            return None
        j = later[0]
        toks[i], toks[j] = toks[j], toks[i]
    elif kind == "id" and val.startswith("vcl_") and how < 5:
        toks[i] = ("id", rng.choice(SUBS))
    elif kind == "id" and "." in val:
        toks[i] = ("id", rng.choice(VARIABLES))
    elif kind in ("num", "str") or (kind == "id" and val in ("true", "false")):
        toks[i] = ("num", rng.choice(LITERALS))
    elif kind == "op":
        toks[i] = ("op", rng.choice(OPERATORS))
    elif kind == "id" and i >= 2 and toks[i - 2][1] == "(" and how < 6:
        toks[i] = ("id", rng.choice(ACTIONS))
    else:
        toks[i] = ("id", rng.choice(VARIABLES + LITERALS))
    out = "".join(v for _, v in toks)
    # Where the change is, for the report: the mutant's line at the token.
    at = sum(len(v) for _, v in toks[:i])
    line = out[:at].count("\n") + 1
    return out, f"line {line}: {val!r} -> {out.splitlines()[line - 1].strip()!r}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lacquerd", default=os.path.join(HERE, "../../target/debug/lacquerd"))
    ap.add_argument("--varnishd", default="/usr/sbin/varnishd")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("--cache", help="JSON file keeping varnishd's answers between runs")
    ap.add_argument("--save", help="probe file (.vcls) the differing mutants are appended to")
    ap.add_argument("vtcs", nargs="*")
    a = ap.parse_args()
    files = a.vtcs or sorted(
        glob.glob(os.path.join(CORPUS, "tests", "*.vtc"))
        + glob.glob(os.path.join(CORPUS, "vmod-tests", "*.vtc"))
        + glob.glob(os.path.join(HERE, "../vtc/lacquer/*.vtc"))
    )
    sources = [b for f in files for b in blocks(f)]
    if not sources:
        sys.exit(f"vclmutate: no VCL found in {len(files)} files (is VTC_CORPUS {CORPUS} right?)")
    rng = random.Random(a.seed)
    mutants, seen = [], set()
    tries = 0
    while len(mutants) < a.count and tries < a.count * 20:
        tries += 1
        r = mutate(rng, rng.choice(sources))
        if r is None or r[0] in seen:
            continue
        seen.add(r[0])
        mutants.append((f"seed{a.seed}#{len(mutants)} ({r[1]})", r[0]))
    cache = {}
    if a.cache and os.path.exists(a.cache):
        cache = json.load(open(a.cache, encoding="utf-8"))
    work = tempfile.mkdtemp(prefix="vclmutate-")
    os.chmod(work, 0o755)  # varnishd's compiler runs as another user

    def one(p):
        name, vcl = p
        key = hashlib.sha256(vcl.encode()).hexdigest()
        # A directory a mutant: two compilers must not share an instance.
        wd = os.path.join(work, name.split()[0].replace("#", "_"))
        os.makedirs(wd, mode=0o755, exist_ok=True)
        v = cache.get(key)
        if v is None:
            v = vclprobe.run([a.varnishd], vcl, wd, "v")
        # vmod debug is a test vmod in Lacquer: vtc_mode makes it importable.
        l = vclprobe.run([a.lacquerd, "-p", "debug=+vtc_mode"], vcl, wd, "l")
        shutil.rmtree(wd, ignore_errors=True)
        return name, vcl, key, tuple(v), tuple(l)

    diffs, kinds = [], {}
    with concurrent.futures.ThreadPoolExecutor(a.j) as ex:
        for name, vcl, key, v, l in ex.map(one, mutants):
            cache[key] = list(v)
            v2, l2 = [(s, re.sub(r"\('[^']*' Line \d+ Pos \d+\)$", "", t).strip()) for s, t in (v, l)]
            if v2 != l2:
                kind = "acceptance" if v2[0] != l2[0] else "message"
                kinds[kind] = kinds.get(kind, 0) + 1
                diffs.append((name, vcl, v2, l2))
                print(f"=== {kind}: {name}\n{vcl}\n--- varnishd: {v2[0]}: {v2[1]}\n--- lacquerd: {l2[0]}: {l2[1]}\n")
    shutil.rmtree(work, ignore_errors=True)
    if a.cache:
        with open(a.cache, "w", encoding="utf-8") as fh:
            json.dump(cache, fh, indent=0, sort_keys=True)
    if a.save and diffs:
        with open(a.save, "a", encoding="utf-8") as fh:
            for name, vcl, v, l in diffs:
                fh.write(f"----\n#! {name}: varnishd {v[0]} {v[1]!r}\n{vcl.strip()}\n")
    print(f"vclmutate: {len(mutants)} mutants of {len(sources)} VCLs (seed {a.seed}), "
          f"{len(diffs)} differ: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
