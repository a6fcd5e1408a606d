#!/usr/bin/env python3
"""Writes the vmod call cases of tests/diff/vmoddiff.py (one JSON file a vmod, beside this file).

The calls come from each function's interface (its .vcc: argument types, optional arguments,
ENUM values) and from the branches of its C implementation: empty, unset and NULL arguments,
negative, huge and overflowing numbers, invalid text for every conversion with and without a
fallback, bad regular expressions, each encoding and letter case. Each call is its own case
(so a call that fails the VCL shows as the 503 it gives without hiding the others), its
result in a response header of a synthetic response unless the function is only legal
elsewhere.

Usage: tests/diff/vmod-calls/generate.py   (rewrites the *.json files here)
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
UNSET = "req.http.unset-header"


def q(s):
    """A VCL string literal of `s` (long strings for quotes and control bytes)."""
    if '"' in s or "\n" in s:
        return '{"%s"}' % s
    return '"%s"' % s


def synth(name, expr, **extra):
    """A case setting header r to `expr` in vcl_synth."""
    c = {"name": name, "recv": "return (synth(200));", "synth": "set resp.http.r = %s;" % expr}
    c.update(extra)
    return c


def deliver(name, expr, **extra):
    c = {"name": name, "deliver": "set resp.http.r = %s;" % expr}
    c.update(extra)
    return c


NUMS = ["", "0", "12", "-12", " 12", "12 ", "+5", "0x10", "1e3", "12.5", "12.", ".5", "-0",
        "9223372036854775807", "9223372036854775808", "-9223372036854775808",
        "-9223372036854775809", "99999999999999999999", "abc", "1_000", "1 2", "nan", "inf",
        "-inf", "1e400", "1e-400", "0.0000001", "999999999999999.9", "1.2.3", "--1", "5x"]
DURS = ["1s", "1ms", "1m", "1h", "1d", "1w", "1y", "1.5s", "-1s", "1", "1 s", " 1s", "1s ",
        "1x", "", "s", "1e3s", "inf", "0s", "-0.5m", "1.5", "99999999999y", "1S", "10ms",
        "1.2.3s", "+3s", "nan"]
BYTES = ["1", "1B", "1b", "1k", "1KB", "1K", "1kb", "1.5MB", "1G", "1T", "1P", "1Z", "-1k",
         "1 KB", "x", "", "1e3", "1.5", "0", "1KB ", " 1KB", "9999999999999999P", "1Kb", "1.k",
         "1KiB"]
TIMES = ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
         "Sun Nov  6 08:49:37 1994", "784111777", "784111777.5", "-1", "1994-11-06T08:49:37",
         "bad", "", "Sun, 06 Nov 1994 08:49:37", "Sun, 32 Nov 1994 08:49:37 GMT",
         "Mon, 06 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 25:49:37 GMT", "1e20", "0",
         "Thu, 01 Jan 1970 00:00:00 GMT", "Sun, 06 Nov 1994 08:49:37 UTC"]
FALLBACK_TIME = "std.real2time(1000000000, now)"


def std_cases():
    out = []
    for s in NUMS:
        out.append(synth("std.integer(%r, 99)" % s, "std.integer(%s, 99)" % q(s)))
        out.append(synth("std.real(%r, 9.5)" % s, "std.real(%s, 9.5)" % q(s)))
    for s in ["abc", "", "12", "1e400"]:
        out.append(synth("std.integer(%r) no fallback" % s, "std.integer(%s)" % q(s)))
        out.append(synth("std.real(%r) no fallback" % s, "std.real(%s)" % q(s)))
    for s, v in [("integer", "std.integer(%s, 3)" % UNSET), ("real", "std.real(%s, 3.5)" % UNSET)]:
        out.append(synth("std.%s(unset)" % s, v))
    for arg in ["real=12.7", "real=-12.7", "real=std.real(\"1e30\", 0.0)", "real=std.real(\"-1e30\", 0.0)", "bool=true", "bool=false",
                "bytes=10KB", "duration=1.9s", "duration=-1.9s", "time=%s" % FALLBACK_TIME,
                's="1", real=2.0', "real=std.real(\"1e30\", 0.0), fallback=5", "", "fallback=4"]:
        out.append(synth("std.integer(%s)" % arg, "std.integer(%s)" % arg))
    for arg in ["integer=12", "bool=true", "bytes=1KB", "duration=1.5s", "time=%s" % FALLBACK_TIME,
                's="1.5", integer=2', "", "fallback=4.5", 's="x", fallback=1.25']:
        out.append(synth("std.real(%s)" % arg, "std.real(%s)" % arg))
    for s in DURS:
        out.append(synth("std.duration(%r, 7s)" % s, "std.duration(%s, 7s)" % q(s)))
    for s in ["x", "", "1s"]:
        out.append(synth("std.duration(%r) no fallback" % s, "std.duration(%s)" % q(s)))
    for arg in ["real=1.5", "real=-1.5", "integer=3", "integer=-3", "real=std.real(\"1e300\", 0.0)", "",
                's="1s", real=2.0']:
        out.append(synth("std.duration(%s)" % arg, "std.duration(%s)" % arg))
    for s in BYTES:
        out.append(synth("std.bytes(%r, 7B)" % s, "std.bytes(%s, 7B)" % q(s)))
    for s in ["x", ""]:
        out.append(synth("std.bytes(%r) no fallback" % s, "std.bytes(%s)" % q(s)))
    for arg in ["real=1.5", "real=-1.5", "integer=3", "integer=-3", "real=std.real(\"1e300\", 0.0)", "", 'integer=5, real=1.0']:
        out.append(synth("std.bytes(%s)" % arg, "std.bytes(%s)" % arg))
    for s in TIMES:
        out.append(synth("std.time(%r, fallback)" % s, "std.time(%s, %s)" % (q(s), FALLBACK_TIME)))
    for arg in ["real=1.5", "real=-1.5", "integer=1000", "real=std.real(\"1e300\", 0.0)", "", 's="bad"',
                'integer=1, real=2.0']:
        out.append(synth("std.time(%s)" % arg, "std.time(%s)" % arg))
    for r in ["1.5", "-1.5", "2.5", "-2.5", "0.499", "std.real(\"1e30\", 0.0)", "-0.0", "3"]:
        out.append(synth("std.round(%s)" % r, "std.round(%s)" % r))
        out.append(synth("std.real2integer(%s, 7)" % r, "std.real2integer(%s, 7)" % r))
        out.append(synth("std.real2time(%s, fallback)" % r, "std.real2time(%s, %s)" % (r, FALLBACK_TIME)))
    out.append(synth("std.time2integer", "std.time2integer(std.real2time(1.9, now), 4)"))
    out.append(synth("std.time2real", "std.time2real(std.real2time(1.25, now), 4.0)"))
    for ip, extra in [("127.0.0.1", ""), ("::1", ""), ("1.2.3.4:80", ""), ("[::1]:80", ""),
                      ("localhost", ""), ("localhost", ", resolve=false"), ("bad", ""),
                      ("", ""), ("1.2.3.4", ', p="8080"'), ("1.2.3.4", ', p="http"'),
                      ("1.2.3.4", ', p="bad"'), ("256.1.1.1", ""), ("1.2.3", ""),
                      ("::ffff:1.2.3.4", ""), ("1.2.3.4 5", ""), (" 1.2.3.4", "")]:
        e = 'std.ip(%s, std.ip("9.9.9.9", client.ip)%s)' % (q(ip), extra)
        out.append(synth("std.ip(%r%s)" % (ip, extra), e))
        out.append(synth("std.port(std.ip(%r%s))" % (ip, extra), "std.port(%s)" % e))
    out.append(synth("std.ip no fallback bad", 'std.ip("bad")'))
    out.append(synth("std.ip no fallback good", 'std.ip("10.0.0.1")'))
    out.append(synth("std.ip unset", "std.ip(%s, std.ip(\"9.9.9.9\"))" % UNSET))
    for s in ["abcDEF", "", "é ü ß", "123-_~", "aBc\\x"]:
        out.append(synth("std.toupper(%r)" % s, "std.toupper(%s)" % q(s)))
        out.append(synth("std.tolower(%r)" % s, "std.tolower(%s)" % q(s)))
    out.append(synth("std.toupper(unset)", "std.toupper(%s)" % UNSET))
    for a, b in [("abc", "b"), ("abc", ""), ("", "x"), ("", ""), ("abcabc", "ca"), ("abc", "abcd")]:
        out.append(synth("std.strstr(%r,%r)" % (a, b), "std.strstr(%s, %s)" % (q(a), q(b))))
    out.append(synth("std.strstr(unset, x)", 'std.strstr(%s, "x")' % UNSET))
    out.append(synth("std.strstr(x, unset)", 'std.strstr("x", %s)' % UNSET))
    for pat, sub, extra in [("*.c", "a.c", ""), ("*.c", "a/b.c", ""), ("*.c", "a/b.c", ", pathname=false"),
                            ("\\\\*", "*", ""), ("\\\\*", "\\\\*", ", noescape=true"),
                            ("*", ".x", ""), ("*", ".x", ", period=true"), ("[a-", "a", ""),
                            ("", "", ""), ("a?c", "abc", ""), ("[!a]", "b", ""), ("[[:alpha:]]", "x", ""),
                            ("a/*", "a/.b", ", period=true"), ("*/b", "a/b", "")]:
        out.append(synth("std.fnmatch(%r,%r%s)" % (pat, sub, extra),
                         "std.fnmatch(%s, %s%s)" % (q(pat), q(sub), extra)))
    out.append(synth("std.fnmatch(unset pattern)", 'std.fnmatch(%s, "a")' % UNSET))
    out.append(synth("std.fnmatch(unset subject)", 'std.fnmatch("a", %s)' % UNSET))
    for u in ["/a?b=1&a=2", "/a?", "/a", "/a?&&b&a", "/a?b=2&b=1", "/a?a=1&a=", "?x", "/p?c&b&a#f",
              "/p?b=1&&&a=2&", "/?z&y&x=&x", "", "/a?=1&=0", "/a??b&a"]:
        out.append(synth("std.querysort(%r)" % u, "std.querysort(%s)" % q(u)))
    out.append(synth("std.querysort(unset)", "std.querysort(%s)" % UNSET))
    out.append(deliver("std.collect(req.http.x)", "req.http.x-m",
                       requests=[{"headers": [["x-m", "a"], ["x-m", "b"], ["x-m", "c"]]}],
                       recv="std.collect(req.http.x-m);"))
    out.append(deliver("std.collect(req.http.x, sep)", "req.http.x-m",
                       requests=[{"headers": [["x-m", "a"], ["x-m", "b"]]}],
                       recv='std.collect(req.http.x-m, "|");'))
    out.append(deliver("std.collect(resp.http)", "resp.http.x-be",
                       requests=[{"headers": {"x-be-x-be": "1"}}],
                       backend_response='set beresp.http.x-be2 = "2";',
                       **{"deliver": 'set resp.http.x-be = "a"; std.collect(resp.http.x-be); set resp.http.r = resp.http.x-be;'}))
    for m in ['std.log("hello")', 'std.log("")', "std.log(%s)" % UNSET, 'std.log("a" + "b")',
              'std.timestamp("foo")', 'std.timestamp("")', 'std.syslog(8 + 6, "vmoddiff")']:
        out.append({"name": m, "recv": m + "; return (synth(200));"})
        out.append({"name": m + " in deliver", "deliver": m + ";"})
        out.append({"name": m + " in backend_response", "backend_response": m.replace("req.", "bereq.") + ";"})
    out.append(synth("std.strftime epoch", 'std.strftime(std.real2time(0, now), "%Y-%m-%d %H:%M:%S")'))
    out.append(synth("std.strftime empty", 'std.strftime(std.real2time(0, now), "")'))
    out.append(synth("std.strftime %s", 'std.strftime(std.real2time(86400, now), "%s %a %b %j %%")'))
    out.append(synth("std.strftime long", 'std.strftime(std.real2time(0, now), "%Y' + "x" * 300 + '")'))
    out.append(synth("std.random(1,1)", "std.random(1, 1)"))
    out.append(synth("std.random(5,1) bounds", "std.random(5, 1) >= 1"))
    for v in ["4.0", "4.1", "5.0", "3.9"]:
        out.append(synth("std.syntax(%s)" % v, "std.syntax(%s)" % v))
    out.append(synth("std.getenv(unknown)", 'std.getenv("VMODDIFF_NOT_SET")'))
    out.append(synth("std.getenv(empty)", 'std.getenv("")'))
    out.append(synth("std.file_exists(/etc/passwd)", 'std.file_exists("/etc/passwd")'))
    out.append(synth("std.file_exists(missing)", 'std.file_exists("/nonexistent/x")'))
    out.append(synth("std.file_exists(dir)", 'std.file_exists("/etc")'))
    out.append(synth("std.fileread(missing)", 'std.fileread("/nonexistent/x")'))
    out.append(synth("std.fileread(/etc/hostname)", 'std.fileread("/etc/hostname") != ""'))
    out.append(synth("std.fileread(dir)", 'std.fileread("/etc")'))
    out.append(synth("std.healthy(default)", "std.healthy(default)"))
    out.append(synth("std.healthy(req.backend_hint)", "std.healthy(req.backend_hint)"))
    out.append(synth("std.ban(good)", 'std.ban("obj.http.x == y")'))
    out.append(synth("std.ban(bad)", 'std.ban("bad")'))
    out.append(synth("std.ban(empty)", 'std.ban("")'))
    for b in ["bad", "obj.http.x ~ [", "req.url == /x && obj.status == 200",
              "obj.status == abc", "obj.ttl > 1x", "foo == bar"]:
        out.append({"name": "std.ban_error(%r)" % b, "recv": 'if (std.ban("%s")) { set req.http.ok = "1"; } return (synth(200));' % b,
                    "synth": "set resp.http.r = std.ban_error(); set resp.http.ok = req.http.ok;"})
    out.append(synth("std.ban_error() without ban", "std.ban_error()"))
    out.append({"name": "std.rollback(req)", "recv": 'set req.url = "/changed"; set req.http.x-new = "1"; std.rollback(req); return (synth(200));',
                "synth": "set resp.http.r = req.url + req.http.x-new;"})
    out.append({"name": "std.rollback(bereq)", "backend_fetch": 'set bereq.url = "/changed"; std.rollback(bereq);',
                "deliver": "set resp.http.r = 1;"})
    # std.rollback(resp) and std.rollback(beresp) are left out: varnishd 7.1.1 panics
    # ("VRT_Rollback 'hp' invalid").
    for n in ["1KB", "0B", "1B"]:
        out.append({"name": "std.cache_req_body(%s)" % n,
                    "recv": "set req.http.r = std.cache_req_body(%s); return (pass);" % n,
                    "deliver": "set resp.http.r = req.http.r;",
                    "requests": [{"method": "POST", "body": "hello body"}]})
    out.append({"name": "std.cache_req_body(-1B)",
                "recv": "set req.http.r = std.cache_req_body(std.bytes(\"-1\", 0B)); return (pass);",
                "deliver": "set resp.http.r = req.http.r;",
                "requests": [{"method": "POST", "body": "hello"}]})
    out.append({"name": "std.cache_req_body in deliver", "deliver": "set resp.http.r = std.cache_req_body(1KB);"})
    out.append({"name": "std.late_100_continue(true)", "recv": "std.late_100_continue(true); return (synth(200));"})
    out.append({"name": "std.late_100_continue in deliver", "deliver": "std.late_100_continue(true);"})
    for tos in ["8", "0", "-1", "256", "4096"]:
        out.append({"name": "std.set_ip_tos(%s)" % tos, "recv": "std.set_ip_tos(%s); return (synth(200));" % tos})
    out.append(synth("std.blobread(missing)", 'blob.length(std.blobread("/nonexistent"))'))
    return out


BLOB_ENC = ["IDENTITY", "BASE64", "BASE64URL", "BASE64URLNOPAD", "BASE64CF", "HEX", "URL"]
BLOB_INPUTS = {
    "IDENTITY": ["", "hello", "a\\b"],
    "BASE64": ["", "aGVsbG8=", "aGVsbG8", "aGVsbA==", "a", "ab", "abc", "!!!!", "aGVs bG8=",
               "aGVsbG8===", "_-_-", "aGVsbG8=x"],
    "BASE64URL": ["", "aGVsbG8=", "aGVsbG8", "_-_-", "+/+/", "a"],
    "BASE64URLNOPAD": ["", "aGVsbG8", "aGVsbG8=", "_-_-", "a"],
    "BASE64CF": ["", "aGVsbG8~", "aGVsbG8", "-_._", "+/"],
    "HEX": ["", "68656c6c6f", "68656C6C6F", "abc", "zz", "0x41", "6 8", "F"],
    "URL": ["", "hello", "a%20b", "%zz", "%", "%2", "a+b", "%E2%82%AC", "%41%4a%4A"],
}


def blob_cases():
    out = []
    for dec, inputs in BLOB_INPUTS.items():
        for s in inputs:
            for enc in ["HEX", "IDENTITY"]:
                out.append(synth("blob.decode(%s,%r)->%s" % (dec, s, enc),
                                 "blob.encode(%s, blob=blob.decode(%s, encoded=%s))" % (enc, dec, q(s))))
        for s in inputs[:3]:
            for length in ["0", "1", "3", "-1", "100"]:
                out.append(synth("blob.decode(%s,%r,length=%s)" % (dec, s, length),
                                 "blob.encode(HEX, blob=blob.decode(%s, %s, %s))" % (dec, length, q(s))))
    for enc in BLOB_ENC:
        for case in ["LOWER", "UPPER", "DEFAULT"]:
            for s in ["", "hello", "\xff\xfe ~/+?"]:
                out.append(synth("blob.encode(%s,%s,%r)" % (enc, case, s),
                                 "blob.encode(%s, %s, blob.decode(encoded=%s))" % (enc, case, q(s))))
        out.append(synth("blob.transcode(IDENTITY->%s)" % enc,
                         'blob.transcode(IDENTITY, %s, encoded="Hello, World/+?&=")' % enc))
        out.append(synth("blob.transcode(HEX->%s UPPER)" % enc,
                         'blob.transcode(HEX, %s, UPPER, encoded="00ff10")' % enc))
    out.append(synth("blob.transcode(HEX->HEX length 2)", 'blob.transcode(HEX, HEX, length=2, encoded="0a0b0c")'))
    out.append(synth("blob.transcode(URL bad)", 'blob.transcode(URL, IDENTITY, encoded="%zz")'))
    out.append(synth("blob.transcode(unset)", "blob.transcode(encoded=%s)" % UNSET))
    out.append(synth("blob.decode(unset)", "blob.encode(HEX, blob=blob.decode(encoded=%s))" % UNSET))
    for a, b in [("abc", "abc"), ("abc", "abd"), ("", ""), ("a", "")]:
        out.append(synth("blob.same(%r,%r)" % (a, b),
                         "blob.same(blob.decode(encoded=%s), blob.decode(encoded=%s))" % (q(a), q(b))))
        out.append(synth("blob.equal(%r,%r)" % (a, b),
                         "blob.equal(blob.decode(encoded=%s), blob.decode(encoded=%s))" % (q(a), q(b))))
        out.append(synth("blob.length(%r)" % a, "blob.length(blob.decode(encoded=%s))" % q(a)))
    out.append({"name": "blob.same(obj,obj)", "init": 'new bsame = blob.blob(IDENTITY, "x");',
                "recv": "return (synth(200));", "synth": "set resp.http.r = blob.same(bsame.get(), bsame.get());"})
    for n, off in [("2B", "0B"), ("2B", "1B"), ("5B", "0B"), ("0B", "5B"), ("1B", "5B"), ("3B", "3B"), ("0B", "0B")]:
        out.append(synth("blob.sub(hello,%s,%s)" % (n, off),
                         'blob.encode(blob=blob.sub(blob.decode(encoded="hello"), %s, %s))' % (n, off)))
        out.append(synth("blob.sub(empty,%s,%s)" % (n, off),
                         'blob.encode(blob=blob.sub(blob.decode(encoded=""), %s, %s))' % (n, off)))
    for i, (dec, s) in enumerate([("HEX", "414243"), ("BASE64", "QUJD"), ("URL", "a%2fb"), ("IDENTITY", "")]):
        for enc in ["HEX", "BASE64", "URL", "IDENTITY"]:
            out.append({"name": "blob.blob(%s,%r).encode(%s)" % (dec, s, enc),
                        "init": "new bo%d%s = blob.blob(%s, %s);" % (i, enc.lower(), dec, q(s)),
                        "recv": "return (synth(200));",
                        "synth": "set resp.http.r = bo%d%s.encode(%s, UPPER); set resp.http.l = blob.length(bo%d%s.get());"
                        % (i, enc.lower(), enc, i, enc.lower())})
    for dec, s in [("HEX", "zz"), ("BASE64", "!"), ("URL", "%zz")]:
        out.append({"name": "blob.blob(%s,%r) fails vcl_init" % (dec, s), "compile": True,
                    "init": "new bbad = blob.blob(%s, %s);" % (dec, q(s))})
    out.append({"name": "blob.encode(HEX, blob=...) in compile with bad enum", "compile": True,
                "recv": 'set req.http.x = blob.encode(NOPE, blob=blob.decode(encoded="x"));'})
    return out


def cookie_cases():
    out = []
    cookies = ["a=1; b=2", "", "a", "a=1;;b=2", "=1", " a = 1 ;b=2", "a=1; a=2", "a=; b=2",
               "a=1;b=2;c=3;d=4", "x=y=z", "a=1; b", "  ", "a=\"q\"; b=2"]
    for ck in cookies:
        pre = "cookie.parse(%s); " % q(ck)
        for fn, e in [("get_string", "cookie.get_string()"), ("get a", 'cookie.get("a")'),
                      ("isset a", 'cookie.isset("a")'), ("isset b", 'cookie.isset("b")')]:
            out.append({"name": "cookie.parse(%r) %s" % (ck, fn), "recv": pre + "return (synth(200));",
                        "synth": "set resp.http.r = %s;" % e})
        for op in ['cookie.delete("a")', 'cookie.filter("a,c")', 'cookie.keep("a,c")',
                   'cookie.filter_re("^[ab]$")', 'cookie.keep_re("^[ab]$")', 'cookie.keep("")',
                   'cookie.filter("")', 'cookie.set("c", "3")', 'cookie.set("a", "9")', "cookie.clean()",
                   'cookie.keep(" a , b ")', 'cookie.filter(",,a,,")']:
            out.append({"name": "cookie.parse(%r) %s" % (ck, op),
                        "recv": pre + op + "; return (synth(200));",
                        "synth": "set resp.http.r = cookie.get_string();"})
    for e in ['cookie.get_re("^b")', 'cookie.get_re("x")', 'cookie.get_re("")', 'cookie.get("")',
              'cookie.isset("")', 'cookie.get_re("a|b")']:
        out.append({"name": "cookie %s" % e, "recv": 'cookie.parse("a=1; b=2; bb=3"); return (synth(200));',
                    "synth": "set resp.http.r = %s;" % e})
    out.append({"name": "cookie.get without parse", "recv": "return (synth(200));",
                "synth": 'set resp.http.r = cookie.get("a"); set resp.http.s = cookie.get_string();'})
    out.append({"name": "cookie.parse twice", "recv": 'cookie.parse("a=1"); cookie.parse("b=2"); return (synth(200));',
                "synth": "set resp.http.r = cookie.get_string();"})
    out.append({"name": "cookie.parse(unset)", "recv": "cookie.parse(%s); return (synth(200));" % UNSET,
                "synth": "set resp.http.r = cookie.get_string();"})
    out.append({"name": "cookie.parse(req.http.cookie)", "recv": "cookie.parse(req.http.cookie); return (synth(200));",
                "synth": "set resp.http.r = cookie.get_string();",
                "requests": [{"headers": {"Cookie": "s=1; t=2"}}]})
    out.append({"name": "cookie.filter_re bad regex", "compile": True,
                "recv": 'cookie.filter_re("(");'})
    out.append({"name": "cookie.keep_re bad regex", "compile": True, "recv": 'cookie.keep_re("[");'})
    out.append({"name": "cookie.get_re bad regex", "compile": True, "recv": 'set req.http.x = cookie.get_re("(");'})
    for t, d in [("0", "0s"), ("0", "1d"), ("784111777", "0s"), ("784111777", "-1d"), ("86400", "1s")]:
        out.append(synth("cookie.format_date(%s,%s)" % (t, d),
                         "cookie.format_date(std.real2time(%s, now), %s)" % (t, d)))
    out.append({"name": "cookie.set long value", "recv": 'cookie.set("a", "%s"); return (synth(200));' % ("v" * 2000),
                "synth": "set resp.http.r = cookie.get_string();"})
    out.append({"name": "cookie in backend", "backend_fetch": 'cookie.parse("a=1; b=2"); cookie.delete("a"); set bereq.http.x-be-r = cookie.get_string();',
                "deliver": "set resp.http.r2 = 1;"})
    return out


def str_cases():
    out = []
    for a, b in [("abc", "b"), ("", ""), ("abcabc", "bc"), ("aaa", "aa"), ("x", "")]:
        out.append(synth("str.contains(%r,%r)" % (a, b), "str.contains(%s, %s)" % (q(a), q(b))))
        out.append(synth("str.startswith(%r,%r)" % (a, b), "str.startswith(%s, %s)" % (q(a), q(b))))
        out.append(synth("str.endswith(%r,%r)" % (a, b), "str.endswith(%s, %s)" % (q(a), q(b))))
    for s, n, off in [("hello", 2, 0), ("hello", 2, 3), ("hello", 10, 0), ("hello", -2, 0), ("hello", 2, -2),
                      ("hello", 0, 0), ("", 1, 0), ("hello", 2, 10), ("hello", -10, 0),
                      ("hello", -2, 1), ("hello", -2, -1), ("hello", -2, 5), ("hello", 2, -1), ("hello", -1, 0),
                      ("hello", 0, -1), ("hello", -2, 4), ("hello", 3, -7), ("hello", -3, -7)]:
        out.append(synth("str.take(%r,%d,%d)" % (s, n, off), "str.take(%s, %d, %d)" % (q(s), n, off)))
    for s in ["hello", "", "a", "é"]:
        out.append(synth("str.reverse(%r)" % s, "str.reverse(%s)" % q(s)))
        out.append(synth("str.count(%r)" % s, "str.count(%s)" % q(s)))
    for s, i, sep in [("a b c", 0, ""), ("a b c", 2, ""), ("a b c", 3, ""), ("a,b,,c", 2, ","), ("a,b,,c", 3, ","),
                      ("a b", -1, ""), ("", 0, ""), ("  a  b ", 1, ""), ("a,b", 1, ",;"), ("a;b", 1, ",;")]:
        out.append(synth("str.split(%r,%d,%r)" % (s, i, sep), "str.split(%s, %d, %s)" % (q(s), i, q(sep))))
    out.append(synth("str.count(unset)", "str.count(%s)" % UNSET))
    out.append(synth("str.split(unset)", 'str.split(%s, 0)' % UNSET))
    return out


def var_cases():
    out = []
    out.append({"name": "var set/get", "recv": 'var.set("a", "1"); return (synth(200));',
                "synth": 'set resp.http.r = var.get("a") + var.get("nope");'})
    out.append({"name": "var typed", "recv": 'var.set_int("i", 5); var.set_real("r", 1.5); var.set_duration("d", 2s); var.set_string("s", "x"); var.set_ip("ip", std.ip("1.2.3.4", client.ip)); return (synth(200));',
                "synth": 'set resp.http.r = var.get_int("i") + 1; set resp.http.r2 = var.get_real("r"); set resp.http.r3 = var.get_duration("d"); set resp.http.r4 = var.get_string("s"); set resp.http.r5 = var.get_ip("ip");'})
    out.append({"name": "var missing typed", "recv": "return (synth(200));",
                "synth": 'set resp.http.r = var.get_int("i"); set resp.http.r2 = var.get_real("r"); set resp.http.r3 = var.get_duration("d"); set resp.http.r4 = var.get_string("s"); set resp.http.r5 = var.get_ip("ip");'})
    out.append({"name": "var clear", "recv": 'var.set("a", "1"); var.clear(); return (synth(200));',
                "synth": 'set resp.http.r = var.get("a");'})
    out.append({"name": "var global", "recv": 'var.global_set("g", "7"); return (synth(200));',
                "synth": 'set resp.http.r = var.global_get("g") + var.global_get("none");'})
    out.append({"name": "var get_int of string", "recv": 'var.set("i", "12x"); return (synth(200));',
                "synth": 'set resp.http.r = var.get_int("i");'})
    out.append({"name": "var set unset value", "recv": 'var.set("a", %s); return (synth(200));' % UNSET,
                "synth": 'set resp.http.r = var.get("a");'})
    out.append({"name": "var across backend", "recv": 'var.set("a", "1");',
                "backend_fetch": 'set bereq.http.x-be-va = var.get("a");', "deliver": 'set resp.http.r = var.get("a");'})
    out.append({"name": "var set_backend", "recv": 'var.set_backend("b", default); return (synth(200));',
                "synth": 'set resp.http.r = var.get_backend("b"); set resp.http.r2 = var.get_backend("none");'})
    out.append({"name": "var empty name", "recv": 'var.set("", "1"); return (synth(200));',
                "synth": 'set resp.http.r = var.get("");'})
    return out


def header_cases():
    out = []
    hdrs = [["x-a", "1"], ["x-a", "2"], ["x-b", "three"], ["x-a", "foo=bar"]]
    out.append({"name": "header.get", "recv": "return (synth(200));",
                "synth": 'set resp.http.r = header.get(req.http.x-a, "foo"); set resp.http.r2 = header.get(req.http.x-a, "^2"); set resp.http.r3 = header.get(req.http.x-a, "zzz");',
                "requests": [{"headers": hdrs}]})
    out.append({"name": "header.append", "recv": 'header.append(req.http.x-a, "new"); return (synth(200));',
                "synth": 'std.collect(req.http.x-a); set resp.http.r = req.http.x-a;', "requests": [{"headers": hdrs}]})
    out.append({"name": "header.remove", "recv": 'header.remove(req.http.x-a, "^[12]$"); return (synth(200));',
                "synth": 'std.collect(req.http.x-a); set resp.http.r = req.http.x-a;', "requests": [{"headers": hdrs}]})
    out.append({"name": "header.remove all", "recv": 'header.remove(req.http.x-a, "."); return (synth(200));',
                "synth": 'set resp.http.r = req.http.x-a;', "requests": [{"headers": hdrs}]})
    out.append({"name": "header.copy", "recv": 'header.copy(req.http.x-a, req.http.x-c); return (synth(200));',
                "synth": 'std.collect(req.http.x-c); set resp.http.r = req.http.x-c;', "requests": [{"headers": hdrs}]})
    for all_ in ["false", "true"]:
        out.append({"name": "header.regsub all=%s" % all_, "recv": 'header.regsub(req, "^x-a: (.)", "x-a: X\\1Y", %s); return (synth(200));' % all_,
                    "synth": 'std.collect(req.http.x-a); set resp.http.r = req.http.x-a;', "requests": [{"headers": hdrs}]})
    out.append({"name": "header.get missing", "recv": "return (synth(200));",
                "synth": 'set resp.http.r = header.get(req.http.x-none, ".");'})
    out.append({"name": "header.get bad regex", "compile": True,
                "recv": 'set req.http.y = header.get(req.http.x-a, "(");'})
    out.append({"name": "header.append in deliver", "deliver": 'header.append(resp.http.x-r, "1"); header.append(resp.http.x-r, "2"); std.collect(resp.http.x-r);'})
    return out


def directors_cases():
    top = ('backend b1 { .host = "127.0.0.1"; .port = "${backend_port}"; }\n'
           'backend b2 { .host = "127.0.0.1"; .port = "${backend_port}"; }\n'
           'backend b3 { .host = "127.0.0.1"; .port = "${backend_port}"; }\n'
           'backend sick { .host = "127.0.0.1"; .port = "${backend_port}"; .probe = { .url = "/"; .initial = 0; .window = 8; .threshold = 8; .interval = 1h; } }')
    out = [{"name": "directors backends", "setup": True, "top": top}]
    init = ("new rr = directors.round_robin(); rr.add_backend(b1); rr.add_backend(b2); rr.add_backend(b3);\n"
            "new fb = directors.fallback(); fb.add_backend(sick); fb.add_backend(b2); fb.add_backend(b3);\n"
            "new fbs = directors.fallback(sticky = true); fbs.add_backend(b1); fbs.add_backend(b2);\n"
            "new rnd1 = directors.random(); rnd1.add_backend(b2, 1.0); rnd1.add_backend(sick, 5.0);\n"
            "new rnd0 = directors.random();\n"
            "new hs = directors.hash(); hs.add_backend(b1, 1.0); hs.add_backend(b2, 1.0); hs.add_backend(b3, 2.0);\n"
            "new sh = directors.shard(); sh.add_backend(b1); sh.add_backend(b2); sh.add_backend(b3); sh.reconfigure();\n"
            "new sh2 = directors.shard(); sh2.add_backend(b1, ident=\"x\"); sh2.add_backend(b2, weight=2.0); sh2.add_backend(sick); sh2.reconfigure(replicas=25);\n"
            "new shempty = directors.shard();\n"
            "new sp = directors.shard_param(); sp.set(by=KEY, key=5, alt=1, warmup=0.5, rampup=false, healthy=IGNORE);\n"
            "new rrempty = directors.round_robin();\n"
            "new fbempty = directors.fallback();\n"
            "new hsempty = directors.hash();\n"
            "rr.remove_backend(b3); rr.add_backend(b3);\n")
    out[0]["init"] = init
    exprs = ["rr.backend()", "fb.backend()", "fbs.backend()", "rnd1.backend()", "rnd0.backend()",
             'hs.backend("a")', 'hs.backend("b")', 'hs.backend("")', "hs.backend(%s)" % UNSET,
             "sh.backend()", 'sh.backend(by=KEY, key=sh.key("a"))', 'sh.backend(by=KEY, key=0)',
             "sh.backend(by=KEY, key=4294967295)", "sh.backend(by=KEY, key=-1)",
             "sh.backend(by=KEY, key=1, alt=1)", "sh.backend(by=KEY, key=1, alt=2)",
             "sh.backend(by=KEY, key=1, alt=7)", "sh.backend(by=KEY, key=1, alt=-1)",
             "sh.backend(by=HASH)", "sh.backend(by=URL)", 'sh.backend(by=BLOB, key_blob=blob.decode(HEX, encoded="01020304"))',
             'sh.backend(by=BLOB, key_blob=blob.decode(HEX, encoded="01"))',
             "sh.backend(by=KEY, key=1, healthy=CHOSEN)", "sh.backend(by=KEY, key=1, healthy=ALL)",
             "sh.backend(by=KEY, key=1, healthy=IGNORE)", "sh.backend(by=KEY, key=1, warmup=2.0)", "sh.backend(by=KEY, key=1, warmup=-1)",
             "sh.backend(by=KEY, key=1, rampup=false)",
             # (warmup=0.5 is left out: both pick the alternative backend at random)
             "sh.backend(resolve=LAZY)", "sh.backend(resolve=NOW)",
             "sh.backend(param=sp.use())", "sh.backend(by=KEY, key=9, param=sp.use())",
             "sh2.backend(by=KEY, key=1)", "sh2.backend(by=KEY, key=2000000000)", "sh2.backend(by=KEY, key=7, healthy=ALL)",
             "shempty.backend()", 'sh.key("")', 'sh.key("abc")', "sh.key(%s)" % UNSET,
             "rrempty.backend()", "fbempty.backend()", 'hsempty.backend("x")',
             "sp.get_by()", "sp.get_key()", "sp.get_alt()", "sp.get_warmup()", "sp.get_rampup()", "sp.get_healthy()",
             'directors.lookup("b1")', "std.healthy(sick)", "std.healthy(fb.backend())", "std.healthy(sh.backend(resolve=LAZY))"]
    for e in exprs:
        out.append(synth("directors %s" % e, e))
        out.append(deliver("directors %s in deliver" % e, e))
    for e in ["rr.backend()", "fb.backend()", "sh.backend()", "sh.backend(resolve=LAZY)", 'hs.backend("a")']:
        out.append({"name": "directors bereq.backend = %s" % e, "recv": "set req.backend_hint = %s; return (pass);" % e,
                    "backend_response": "set beresp.http.r = bereq.backend; set beresp.http.r2 = beresp.backend;"})
        out.append({"name": "directors req.backend_hint = %s" % e, "recv": "set req.backend_hint = %s; return (synth(200));" % e,
                    "synth": "set resp.http.r = req.backend_hint;"})
    out.append({"name": "directors rr sequence",
                "recv": 'set req.http.a = rr.backend(); set req.http.b = rr.backend(); set req.http.c = rr.backend(); set req.http.d = rr.backend(); return (synth(200));',
                "synth": "set resp.http.r = req.http.a + req.http.b + req.http.c + req.http.d;"})
    out.append({"name": "directors sp.clear", "recv": "sp.clear(); return (synth(200));",
                "synth": "set resp.http.r = sp.get_by() + sp.get_key() + sp.get_alt() + sp.get_healthy();"})
    out.append({"name": "directors sp.set in recv", "recv": "sp.set(by=URL); return (synth(200));",
                "synth": "set resp.http.r = sp.get_by() + sp.get_key();"})
    out.append({"name": "directors sh.debug", "recv": "sh.debug(0); return (synth(200));"})
    out.append({"name": "directors lookup outside init", "compile": True,
                "recv": 'set req.backend_hint = directors.lookup("b1");'})
    out.append({"name": "directors shard by=KEY without key", "recv": "return (synth(200));",
                "synth": "set resp.http.r = sh.backend(by=KEY);"})
    out.append({"name": "directors shard by=BLOB without key_blob", "recv": "return (synth(200));",
                "synth": "set resp.http.r = sh.backend(by=BLOB);"})
    out.append({"name": "directors shard key with by=HASH", "recv": "return (synth(200));",
                "synth": "set resp.http.r = sh.backend(by=HASH, key=5);"})
    for tail in ["sh.add_backend(b1);", "sh.remove_backend(b1);", "sh.clear();", "sh.reconfigure();",
                 "sh.set_warmup(0.3);", "sh.set_rampup(1s);", "sh.associate(sp.use());", "rr.add_backend(b1);"]:
        out.append({"name": "directors %s in recv" % tail, "recv": tail + " return (synth(200));"})
    return out


def debug_cases():
    out = []
    for e in ['debug.author(phk)', 'debug.author(des)', 'debug.author(kristian)', 'debug.author(mithrandir)',
'debug.concatenate("a", "b", "")',
              'debug.collect("a", "b")', 'debug.return_strands("x")', 'debug.argtest("1", 2.0, "3", "4", 5)',
              'debug.argtest("1")', 'debug.argtest("1", opt="o")', 'debug.re_quote("a.b*")',
              'debug.re_quote("")', 'debug.test_priv_call()', 'debug.test_priv_vcl()', 'debug.test_priv_task("x")',
              'debug.test_priv_task_get()', 'debug.test_priv_top("y")', 'debug.validhdr("ok")', 'debug.validhdr("a b")',
              'debug.validhdr("")', 'debug.vre_limit()',
              'debug.client_ip()']:
        out.append(synth("debug %s" % e, e))
    out.append({"name": "debug.rot52", "recv": "debug.rot52(req); return (synth(200));",
                "synth": "set resp.http.r = req.http.x-r;", "requests": [{"headers": {"x-r": "abcXYZ"}}]})
    out.append({"name": "debug.fail", "recv": "debug.fail(); return (synth(200));"})
    out.append({"name": "debug.fail in deliver", "deliver": "debug.fail();"})
    out.append({"name": "debug.fail in backend_response", "backend_response": "debug.fail();"})
    out.append({"name": "debug.sethdr", "recv": 'debug.sethdr(req.http.x-s, "a", "b"); return (synth(200));',
                "synth": "set resp.http.r = req.http.x-s;"})
    out.append({"name": "debug.test_priv_task twice", "recv": 'debug.test_priv_task("a"); debug.test_priv_task("b"); return (synth(200));',
                "synth": 'set resp.http.r = debug.test_priv_task_get();'})
    out.append({"name": "debug.bad_memory", "compile": True, "recv": "debug.bad_memory(debug.obj_opt);"})
    out.append({"name": "debug obj", "init": 'new dobj = debug.obj("hello", fred);',
                "recv": "return (synth(200));",
                "synth": 'set resp.http.r = dobj.foo("bar"); set resp.http.r2 = dobj.string(); set resp.http.r3 = dobj.number(); set resp.http.r4 = dobj.enum();'})
    out.append({"name": "debug.vsc", "recv": "debug.vsc_new(); debug.vsc_count(5); debug.vsc_destroy(); return (synth(200));"})
    out.append({"name": "debug.sleep", "recv": "debug.sleep(10ms); return (synth(200));"})
    return out


def vtc_cases():
    out = []
    # typesize("") is left out: varnishd 7.1.1 panics.
    for ty in ["c", "s", "i", "l", "d", "f", "p", "j", "z", "o", "h", "x", "cs", "ll"]:
        out.append(synth("vtc.typesize(%r)" % ty, "vtc.typesize(%s)" % q(ty)))
    # A workspace the task does not have (backend in a client sub) panics varnishd 7.1.1.
    for ws in ["client", "session", "thread"]:
        out.append(synth("vtc.workspace_free(%s) > 0" % ws, "vtc.workspace_free(%s) > 0" % ws))
        out.append(synth("vtc.workspace_overflowed(%s)" % ws, "vtc.workspace_overflowed(%s)" % ws))
    out.append({"name": "vtc.workspace_alloc(client, -1)", "recv": "vtc.workspace_alloc(client, -1); return (synth(200));",
                "synth": "set resp.http.r = vtc.workspace_free(client);"})
    out.append({"name": "vtc.workspace_alloc(client, huge)", "recv": "vtc.workspace_alloc(client, 1000000000); return (synth(200));"})
    out.append({"name": "vtc.workspace_overflow(client)", "recv": "vtc.workspace_overflow(client); return (synth(200));"})
    out.append({"name": "vtc.workspace_overflow(client) in deliver", "deliver": "vtc.workspace_overflow(client);"})
    out.append({"name": "vtc.workspace_reserve(client, 0)", "recv": "return (synth(200));",
                "synth": "set resp.http.r = vtc.workspace_reserve(client, 0) > 0B;"})
    out.append({"name": "vtc.workspace_reserve(client, -1)", "recv": "return (synth(200));",
                "synth": "set resp.http.r = vtc.workspace_reserve(client, -1);"})
    out.append({"name": "vtc.workspace_snapshot/reset", "recv": "vtc.workspace_snapshot(client); vtc.workspace_alloc(client, 100); vtc.workspace_reset(client); return (synth(200));"})
    out.append({"name": "vtc.workspace_free(backend) in backend_response",
                "backend_response": "set beresp.http.r = vtc.workspace_free(backend) > 0;"})
    out.append({"name": "vtc.sleep", "recv": "vtc.sleep(10ms); return (synth(200));"})
    out.append({"name": "vtc.no_backend", "recv": "set req.backend_hint = vtc.no_backend(); return (pass);"})
    out.append(synth("vtc.no_ip", "vtc.no_ip()"))
    out.append({"name": "vtc.vsl", "recv": 'vtc.vsl(0, "Debug", c, "hello"); return (synth(200));'})
    out.append({"name": "vtc.vsl bad tag", "recv": 'vtc.vsl(0, "NoSuchTag", c, "hello"); return (synth(200));'})
    out.append(synth("vtc.proxy_header v1", 'blob.encode(HEX, blob=vtc.proxy_header(v1, std.ip("1.2.3.4:5", client.ip), std.ip("5.6.7.8:9", client.ip), "h"))'))
    out.append(synth("vtc.proxy_header v2", 'blob.encode(HEX, blob=vtc.proxy_header(v2, std.ip("1.2.3.4:5", client.ip), std.ip("5.6.7.8:9", client.ip), "h"))'))
    return out


def small_cases():
    out = []
    for fn in ["user", "group", "uid", "gid"]:
        out.append(synth("unix.%s() on TCP" % fn, "unix.%s()" % fn))
    for fn in ["alpn", "authority", "is_ssl", "client_has_cert_sess", "client_has_cert_conn",
               "ssl_verify_result", "ssl_version", "client_cert_cn", "ssl_cipher", "cert_sign", "cert_key"]:
        out.append(synth("proxy.%s() without PROXY" % fn, "proxy.%s()" % fn))
    out.append({"name": "purge.hard in recv", "compile": True, "recv": "purge.hard();"})
    out.append({"name": "purge.soft in synth", "recv": "return (synth(200));", "synth": "set resp.http.r = purge.soft();"})
    out.append({"name": "purge.hard in hit", "recv": "return (hash);", "hit": "set req.http.n = purge.hard(); return (synth(200));",
                "synth": "set resp.http.r = req.http.n;", "requests": [{}, {}]})
    out.append({"name": "purge.soft(1s) in hit", "recv": "return (hash);", "hit": "set req.http.n = purge.soft(1s, 2s, 3s); return (synth(200));",
                "synth": "set resp.http.r = req.http.n;", "requests": [{}, {}]})
    out.append({"name": "purge.soft(-1s) in miss", "recv": "return (hash);", "miss": "set req.http.n = purge.soft(-1s); return (synth(200));",
                "synth": "set resp.http.r = req.http.n;"})
    return out


def modules_cases():
    """varnish-modules beyond var/header/str: xkey, vsthrottle, bodyaccess."""
    out = []
    for k in ["k1", "", "a b"]:
        out.append({"name": "xkey.purge(%r) in recv" % k, "recv": 'set req.http.n = xkey.purge("%s"); return (synth(200));' % k,
                    "synth": "set resp.http.r = req.http.n;"})
        out.append({"name": "xkey.softpurge(%r) in recv" % k, "recv": 'set req.http.n = xkey.softpurge("%s"); return (synth(200));' % k,
                    "synth": "set resp.http.r = req.http.n;"})
    out.append({"name": "xkey.purge after a tagged fetch",
                "recv": 'if (req.http.p) { set req.http.n = xkey.purge("t1 t2"); return (synth(200)); }',
                "backend_response": 'set beresp.http.xkey = "t1 t3";',
                "synth": "set resp.http.r = req.http.n;",
                "requests": [{}, {"headers": {"p": "1"}}, {"headers": {"p": "1"}}]})
    for key, limit, period in [("a", 2, "10s"), ("b", 0, "10s"), ("c", 1, "0s"), ("d", -1, "10s")]:
        out.append({"name": "vsthrottle.is_denied(%r,%d,%s) x3" % (key, limit, period),
                    "recv": 'return (synth(200));',
                    "synth": 'set resp.http.r = vsthrottle.is_denied("%s", %d, %s); set resp.http.rem = vsthrottle.remaining("%s", %d, %s);'
                    % (key, limit, period, key, limit, period),
                    "requests": [{}, {}, {}]})
    out.append({"name": "vsthrottle.blocked unknown", "recv": "return (synth(200));",
                "synth": 'set resp.http.r = vsthrottle.blocked("zz", 1, 1s, 1s);'})
    out.append({"name": "vsthrottle.is_denied with block", "recv": "return (synth(200));",
                "synth": 'set resp.http.r = vsthrottle.is_denied("blk", 1, 10s, 30s); set resp.http.b = vsthrottle.blocked("blk", 1, 10s, 30s) > 0s;',
                "requests": [{}, {}, {}]})
    body = "hello body\nline2"
    for e in ["bodyaccess.len_req_body()", 'bodyaccess.rematch_req_body("body")', 'bodyaccess.rematch_req_body("^line2")',
              'bodyaccess.rematch_req_body("(?m)^line2")', 'bodyaccess.rematch_req_body("nope")']:
        out.append({"name": "bodyaccess %s" % e,
                    "recv": "std.cache_req_body(1KB); set req.http.r = %s; return (synth(200));" % e,
                    "synth": "set resp.http.r = req.http.r;",
                    "requests": [{"method": "POST", "body": body}]})
        out.append({"name": "bodyaccess %s without cached body" % e,
                    "recv": "set req.http.r = %s; return (synth(200));" % e,
                    "synth": "set resp.http.r = req.http.r;",
                    "requests": [{"method": "POST", "body": body}]})
    out.append({"name": "bodyaccess.log_req_body", "recv": 'std.cache_req_body(1KB); bodyaccess.log_req_body("p:", 4); return (synth(200));',
                "requests": [{"method": "POST", "body": body}]})
    out.append({"name": "bodyaccess.hash_req_body in hash", "recv": "std.cache_req_body(1KB); return (hash);",
                "hash": "bodyaccess.hash_req_body();", "miss": "return (synth(201));", "hit": "return (synth(202));",
                "requests": [{"method": "POST", "body": body}]})
    return out


def main():
    for name, fn in [("std", std_cases), ("blob", blob_cases), ("cookie", cookie_cases), ("str", str_cases),
                     ("var", var_cases), ("header", header_cases), ("directors", directors_cases),
                     ("debug", debug_cases), ("vtc", vtc_cases), ("misc", small_cases),
                     ("modules", modules_cases)]:
        with open(os.path.join(HERE, name + ".json"), "w") as f:
            json.dump(fn(), f, indent=0)
            f.write("\n")


if __name__ == "__main__":
    main()
