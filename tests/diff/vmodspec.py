#!/usr/bin/env python3
"""Compares Lacquer's vmod declarations (the `$Module` texts in
crates/vmods/src) with the vmods installed beside varnishd: every vmod
shared object carries its interface as JSON (the `$VMOD` spec vcc reads),
so functions, methods, return types, argument types, names, defaults,
optional arguments and ENUM values can be checked one by one. PRIV_*
arguments are left out (Lacquer passes them implicitly).

usage: vmodspec.py [VMOD_DIR]   (default /usr/lib/x86_64-linux-gnu/varnish/vmods)
Prints one line a difference; exit status 1 when there is any.
Known and deliberate: tests/diff/DEVIATIONS.md (vtc.workspace_dump,
saintmode.status) and Lacquer-only additions (str.token_intersect,
debug's PRIV arguments).
"""
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
def lq_decls():
    out = {}
    for f in glob.glob(os.path.join(HERE, '../../crates/vmods/src/**/*.rs'), recursive=True):
        t = open(f).read()
        for m in re.finditer(r'r#"\s*(\$Module.*?)"#', t, re.S):
            text = m.group(1)
            mod = re.match(r'\$Module (\w+)', text).group(1)
            out[mod] = text
    return out
def split_args(s):
    args, depth, cur = [], 0, ''
    q = False
    for c in s:
        if c == '"': q = not q
        if q: cur += c; continue
        if c in '{[(': depth += 1
        if c in '}])': depth -= 1
        if c == ',' and depth == 0:
            args.append(cur.strip()); cur = ''
        else: cur += c
    if cur.strip(): args.append(cur.strip())
    return args
def parse_arg(a):
    opt = a.startswith('[')
    if opt: a = a[1:-1].strip()
    enum = None
    m = re.match(r'ENUM\s*\{([^}]*)\}\s*(.*)', a)
    if m:
        enum = [x.strip() for x in m.group(1).split(',') if x.strip()]
        ty, rest = 'ENUM', m.group(2)
    else:
        parts = a.split(None, 1)
        ty, rest = parts[0], parts[1] if len(parts) > 1 else ''
    name, default = rest, None
    if '=' in rest:
        name, default = [x.strip() for x in rest.split('=', 1)]
    return dict(ty=ty, name=name.strip() or None, default=default, enum=enum, opt=opt)


def visible(args):
    """The arguments VCL passes (PRIV_* ones are implicit)."""
    return [a for a in args if not a['ty'].startswith('PRIV_')]
def parse_lq(text):
    d = {}
    cur_obj = None
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r'\$(Function|Method|Object)\s+(?:(\w+)\s+)?\.?(\w+)\((.*)\)\s*$', line)
        if not m: continue
        kind, ret, name, args = m.groups()
        if kind == 'Object':
            cur_obj = name; key = name; ret = 'OBJ'
        elif kind == 'Method':
            key = cur_obj + '.' + name
        else:
            key = name
        d[key] = (ret, visible([parse_arg(a) for a in split_args(args)]))
    return d
def parse_js(js):
    d = {}
    def args(l):
        out = []
        for a in l:
            ty = a[0]; name = a[1] if len(a) > 1 else None
            default = a[2] if len(a) > 2 else None
            enum = a[3] if len(a) > 3 and ty == 'ENUM' else None
            opt = a[4] if len(a) > 4 else False
            if ty.startswith('PRIV_'): continue
            out.append(dict(ty=ty, name=name, default=default, enum=enum, opt=bool(opt)))
        return out
    for x in js:
        if x[0] == '$FUNC':
            d[x[1]] = (x[2][0][0], args(x[2][3:]))
        elif x[0] == '$ALIAS':
            d[x[1]] = ('ALIAS', x[2])
        elif x[0] == '$OBJ':
            for y in x[4:]:
                if y[0] == '$INIT': d[x[1]] = ('OBJ', args(y[1][3:]))
                if y[0] == '$METHOD': d[x[1] + '.' + y[1]] = (y[2][0][0], args(y[2][3:]))
    return d
def norm_default(v):
    """A default as text: quotes and backslash escapes undone."""
    return str(v).strip('"').encode().decode('unicode_escape')


def spec_of(so):
    """The JSON interface embedded in a vmod shared object."""
    data = open(so, 'rb').read()
    i = data.find(b'"$VMOD"')
    if i < 0:
        return None
    i = data.rfind(b'[', 0, data.rfind(b'[', 0, i))
    j = data.find(b'\0', i)
    return json.loads(data[i:j].decode())


def main():
    vmod_dir = sys.argv[1] if len(sys.argv) > 1 else '/usr/lib/x86_64-linux-gnu/varnish/vmods'
    out = []
    lq = lq_decls()
    for so in sorted(glob.glob(os.path.join(vmod_dir, 'libvmod_*.so'))):
        mod = os.path.basename(so)[len('libvmod_'):-3]
        js = spec_of(so)
        if js is None:
            continue
        if mod not in lq:
            out.append(f'{mod}: not declared in Lacquer')
            continue
        v = parse_js(js)
        l = parse_lq(lq[mod])
        for k in v:
            if k not in l:
                if v[k][0] == 'ALIAS' and v[k][1] in l: continue
                out.append(f'{mod}.{k}: missing in Lacquer {v[k]}')
                continue
            vr, va = v[k]
            if vr == 'ALIAS': continue
            lr, la = l[k]
            if vr != lr: out.append(f'{mod}.{k}: return {vr} vs {lr}')
            if len(va) != len(la):
                out.append(f'{mod}.{k}: args {[(a["ty"],a["name"]) for a in va]} vs {[(a["ty"],a["name"]) for a in la]}'); continue
            for i, (a, b) in enumerate(zip(va, la)):
                for fld in ('ty', 'name', 'enum', 'opt'):
                    if (a[fld] or None) != (b[fld] or None):
                        out.append(f'{mod}.{k} arg {i} {fld}: {a[fld]!r} vs {b[fld]!r}')
                da, db = a['default'], b['default']
                if (da is None) != (db is None) or (da is not None and norm_default(da) != norm_default(db)):
                    out.append(f'{mod}.{k} arg {i} default: {da!r} vs {db!r}')
        for k in l:
            if k not in v: out.append(f'{mod}.{k}: extra in Lacquer')
    for line in out:
        print(line)
    return 1 if out else 0


if __name__ == '__main__':
    sys.exit(main())
