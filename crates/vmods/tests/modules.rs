//! The smaller vmods (var, header, cookie, str, blob, purge, proxy, unix,
//! vsthrottle, xkey, and the test-only vtc and debug) through the `Vmods`
//! trait; cookie, blob and debug cases come from Varnish's test corpus.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{HeaderName, HttpWhich, LogKind, Strands, Value};

fn hdr(which: HttpWhich, name: &str) -> Option<Value> {
    Some(Value::Header(which, Arc::new(HeaderName::new(name))))
}

fn t(v: Result<Value, String>) -> Option<String> {
    text(&v.unwrap())
}

#[test]
fn var_task_and_global() {
    let r = Rig::new(&["var"], &[]);
    let c = &mut req();
    r.call(c, "var.set", vec![s("foo"), s("bar")]).unwrap();
    assert_eq!(t(r.call(c, "var.get", vec![s("foo")])).unwrap(), "bar");
    r.call(c, "var.set_int", vec![s("ten"), Some(Value::Int(10))])
        .unwrap();
    assert_eq!(r.call(c, "var.get_int", vec![s("ten")]), Ok(Value::Int(10)));
    // Wrong type or unset: the type's zero.
    assert_eq!(r.call(c, "var.get_int", vec![s("foo")]), Ok(Value::Int(0)));
    assert_eq!(r.call(c, "var.get", vec![s("ten")]), Ok(Value::Null));
    r.call(c, "var.set_real", vec![s("r"), Some(Value::Real(1.5))])
        .unwrap();
    assert_eq!(
        r.call(c, "var.get_real", vec![s("r")]),
        Ok(Value::Real(1.5))
    );
    r.call(
        c,
        "var.set_duration",
        vec![s("d"), Some(Value::Duration(60.0))],
    )
    .unwrap();
    assert_eq!(
        r.call(c, "var.get_duration", vec![s("d")]),
        Ok(Value::Duration(60.0))
    );
    let ip = Value::Ip("10.0.0.1:80".parse().unwrap());
    r.call(c, "var.set_ip", vec![s("ip"), Some(ip.clone())])
        .unwrap();
    assert_eq!(r.call(c, "var.get_ip", vec![s("ip")]), Ok(ip));
    r.call(c, "var.set_backend", vec![s("b"), Some(be(3, "s3"))])
        .unwrap();
    assert_eq!(r.call(c, "var.get_backend", vec![s("b")]), Ok(be(3, "s3")));
    r.call(c, "var.set_string", vec![s("x"), s("y")]).unwrap();
    assert_eq!(t(r.call(c, "var.get_string", vec![s("x")])).unwrap(), "y");
    // Another task does not see them; clear() forgets them.
    assert_eq!(
        r.call(&mut req(), "var.get", vec![s("foo")]),
        Ok(Value::Null)
    );
    r.call(c, "var.clear", vec![]).unwrap();
    assert_eq!(r.call(c, "var.get", vec![s("foo")]), Ok(Value::Null));
    // Globals are shared by every task.
    r.call(c, "var.global_set", vec![s("open"), s("yes")])
        .unwrap();
    assert_eq!(
        t(r.call(&mut req(), "var.global_get", vec![s("open")])).unwrap(),
        "yes"
    );
    assert_eq!(
        r.call(c, "var.global_get", vec![s("nope-never-set")]),
        Ok(Value::Null)
    );
}

#[test]
fn header_functions() {
    let r = Rig::new(&["header"], &[]);
    let mut c = MockContext::new("GET", "/")
        .with_header(HttpWhich::Beresp, "Set-Cookie", "JSESSIONID=1")
        .with_header(HttpWhich::Beresp, "X", "y")
        .with_header(HttpWhich::Beresp, "set-cookie", "user=me");
    r.call(
        &mut c,
        "header.append",
        vec![hdr(HttpWhich::Beresp, "Set-Cookie"), s("VSESS=abbabeef")],
    )
    .unwrap();
    assert_eq!(c.http(HttpWhich::Beresp).headers.len(), 4);
    assert_eq!(
        t(r.call(
            &mut c,
            "header.get",
            vec![hdr(HttpWhich::Beresp, "set-cookie"), s("user=")]
        ))
        .unwrap(),
        "user=me"
    );
    assert_eq!(
        r.call(
            &mut c,
            "header.get",
            vec![hdr(HttpWhich::Beresp, "set-cookie"), s("nomatch")]
        ),
        Ok(Value::Null)
    );
    r.call(
        &mut c,
        "header.remove",
        vec![hdr(HttpWhich::Beresp, "Set-Cookie"), s("JSESSIONID=")],
    )
    .unwrap();
    let names: Vec<String> = c
        .http(HttpWhich::Beresp)
        .headers
        .iter()
        .map(|(n, v)| {
            format!(
                "{}: {}",
                String::from_utf8_lossy(n),
                String::from_utf8_lossy(v)
            )
        })
        .collect();
    assert_eq!(
        names,
        ["X: y", "set-cookie: user=me", "Set-Cookie: VSESS=abbabeef"]
    );
    r.call(
        &mut c,
        "header.copy",
        vec![
            hdr(HttpWhich::Beresp, "set-cookie"),
            hdr(HttpWhich::Beresp, "X-Old"),
        ],
    )
    .unwrap();
    assert_eq!(
        c.http(HttpWhich::Beresp)
            .headers
            .iter()
            .filter(|(n, _)| *n == b"X-Old")
            .count(),
        2
    );
    r.call(
        &mut c,
        "header.regsub",
        vec![
            Some(Value::Http(HttpWhich::Beresp)),
            s("^X: (.*)$"),
            s("Y: \\1\\1"),
        ],
    )
    .unwrap();
    assert_eq!(c.http(HttpWhich::Beresp).get("y"), Some(&b"yy"[..]));
    assert_eq!(c.http(HttpWhich::Beresp).get("x"), None);
    let dynh = r
        .call(
            &mut c,
            "header.dyn",
            vec![Some(Value::Http(HttpWhich::Req)), s("42")],
        )
        .unwrap();
    r.call(
        &mut c,
        "header.append",
        vec![Some(dynh), s("is the answer")],
    )
    .unwrap();
    assert_eq!(
        c.http(HttpWhich::Req).get("42"),
        Some(&b"is the answer"[..])
    );
    assert!(
        r.call(
            &mut c,
            "header.append",
            vec![hdr(HttpWhich::Obj, "x"), s("1")]
        )
        .is_err()
    );
}

#[test]
fn cookie_jar() {
    let r = Rig::new(&["cookie"], &[]);
    let c = &mut req();
    for (k, v) in [
        ("cookie1", "cookie1BAD"),
        ("cookie2", "cookie2value"),
        ("cookie3", "cookie3value"),
        ("cookie4", "cookie4value"),
        ("cookie1", "cookie1value"),
    ] {
        r.call(c, "cookie.set", vec![s(k), s(v)]).unwrap();
    }
    r.call(c, "cookie.delete", vec![s("cookie2")]).unwrap();
    assert_eq!(
        t(r.call(c, "cookie.get_string", vec![])).unwrap(),
        "cookie1=cookie1value; cookie3=cookie3value; cookie4=cookie4value;"
    );
    assert_eq!(
        t(r.call(c, "cookie.get", vec![s("cookie3")])).unwrap(),
        "cookie3value"
    );
    assert_eq!(r.call(c, "cookie.get", vec![s("nope")]), Ok(Value::Null));
    assert_eq!(
        r.call(c, "cookie.isset", vec![s("cookie1")]),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        r.call(c, "cookie.isset", vec![s("")]),
        Ok(Value::Bool(false))
    );
    assert_eq!(
        r.call(c, "cookie.isset", vec![Some(Value::Null)]),
        Ok(Value::Bool(false))
    );
    r.call(c, "cookie.clean", vec![]).unwrap();
    assert_eq!(t(r.call(c, "cookie.get_string", vec![])).unwrap(), "");
    // Empty names and values are ignored.
    r.call(c, "cookie.set", vec![s(""), s("foo")]).unwrap();
    r.call(c, "cookie.set", vec![s("cookie1"), s("")]).unwrap();
    r.call(c, "cookie.set", vec![Some(Value::Null), s("foo")])
        .unwrap();
    assert_eq!(t(r.call(c, "cookie.get_string", vec![])).unwrap(), "");
    let parse = |c: &mut MockContext, h: &str| {
        r.call(c, "cookie.parse", vec![s(h)]).unwrap();
        t(r.call(c, "cookie.get_string", vec![])).unwrap()
    };
    assert_eq!(
        parse(c, "csrftoken=0e0c; sessionid=a707"),
        "csrftoken=0e0c; sessionid=a707;"
    );
    // An empty header leaves the jar as it was, as in varnishd.
    assert_eq!(parse(c, ""), "csrftoken=0e0c; sessionid=a707;");
    assert_eq!(parse(c, "emptycookie="), "");
    assert_eq!(parse(c, "csrftoken=0e0c;="), "csrftoken=0e0c;");
    parse(
        c,
        "biscuit=standard; bredela=eggwhites; chocolatechip=verychippy; empire=jellytots",
    );
    r.call(c, "cookie.keep", vec![s("bredela,empire,baz")])
        .unwrap();
    assert_eq!(
        t(r.call(c, "cookie.get_string", vec![])).unwrap(),
        "bredela=eggwhites; empire=jellytots;"
    );
    r.call(c, "cookie.keep", vec![s(",,,,bredela,    ,empire,baz,")])
        .unwrap();
    assert_eq!(
        t(r.call(c, "cookie.get_string", vec![])).unwrap(),
        "bredela=eggwhites; empire=jellytots;"
    );
    r.call(c, "cookie.keep", vec![Some(Value::Null)]).unwrap();
    assert_eq!(t(r.call(c, "cookie.get_string", vec![])).unwrap(), "");
    parse(
        c,
        "biscuit=standard; bredela=eggwhites; chocolatechip=verychippy; empire=jellytots",
    );
    r.call(c, "cookie.filter", vec![s("bredela,empire,baz")])
        .unwrap();
    assert_eq!(
        t(r.call(c, "cookie.get_string", vec![])).unwrap(),
        "biscuit=standard; chocolatechip=verychippy;"
    );
    parse(c, "foo=bar; bar=baz;");
    r.call(c, "cookie.filter", vec![Some(Value::Null)]).unwrap();
    assert_eq!(
        t(r.call(c, "cookie.get_string", vec![])).unwrap(),
        "foo=bar; bar=baz;"
    );
    parse(c, "biscuit=standard; bredela=eggwhites; empire=jellytots;");
    r.call(c, "cookie.filter_re", vec![s("^bredela")]).unwrap();
    assert_eq!(
        t(r.call(c, "cookie.get_string", vec![])).unwrap(),
        "biscuit=standard; empire=jellytots;"
    );
    parse(c, "biscuit=standard; bredela=eggwhites; empire=jellytots;");
    r.call(c, "cookie.keep_re", vec![s("^b")]).unwrap();
    assert_eq!(
        t(r.call(c, "cookie.get_string", vec![])).unwrap(),
        "biscuit=standard; bredela=eggwhites;"
    );
    assert_eq!(
        t(r.call(c, "cookie.get_re", vec![s("^bre")])).unwrap(),
        "eggwhites"
    );
    assert_eq!(
        r.call(c, "cookie.get_re", vec![s("DOES_NOT_EXIST")]),
        Ok(Value::Null)
    );
    assert_eq!(
        t(r.call(
            c,
            "cookie.format_rfc1123",
            vec![
                Some(Value::Time(784_111_777.0)),
                Some(Value::Duration(86_400.0))
            ]
        ))
        .unwrap(),
        "Mon, 07 Nov 1994 08:49:37 GMT"
    );
}

#[test]
fn str_functions() {
    let r = Rig::new(&["str"], &[]);
    let c = &mut req();
    assert_eq!(r.call(c, "str.count", vec![s("abc")]), Ok(Value::Int(3)));
    assert_eq!(
        r.call(c, "str.count", vec![Some(Value::Null)]),
        Ok(Value::Int(-1))
    );
    assert_eq!(
        r.call(c, "str.startswith", vec![s("abc"), s("ab")]),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        r.call(c, "str.endswith", vec![s("abc"), s("ab")]),
        Ok(Value::Bool(false))
    );
    assert_eq!(
        r.call(c, "str.contains", vec![s("abc"), s("bc")]),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        r.call(c, "str.contains", vec![Some(Value::Null), s("bc")]),
        Ok(Value::Bool(false))
    );
    assert_eq!(
        t(r.call(c, "str.take", vec![s("abcdef"), Some(Value::Int(3))])).unwrap(),
        "abc"
    );
    assert_eq!(
        t(r.call(
            c,
            "str.take",
            vec![s("abcdef"), Some(Value::Int(-2)), Some(Value::Int(-1))]
        ))
        .unwrap(),
        "de"
    );
    assert_eq!(t(r.call(c, "str.reverse", vec![s("abc")])).unwrap(), "cba");
    assert_eq!(
        t(r.call(c, "str.split", vec![s("a b\tc"), Some(Value::Int(2))])).unwrap(),
        "b"
    );
    assert_eq!(
        t(r.call(c, "str.split", vec![s("a b\tc"), Some(Value::Int(-1))])).unwrap(),
        "c"
    );
    assert_eq!(
        r.call(c, "str.split", vec![s("a b"), Some(Value::Int(5))]),
        Ok(Value::Null)
    );
    assert_eq!(
        t(r.call(c, "str.split", vec![s("a,b"), Some(Value::Int(2)), s(",")])).unwrap(),
        "b"
    );
    assert_eq!(
        r.call(c, "str.token_intersect", vec![s("a, b"), s("c b")]),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        r.call(c, "str.token_intersect", vec![s("a;b"), s("b"), s(",")]),
        Ok(Value::Bool(false))
    );
}

#[test]
fn blob_functions_and_object() {
    let r = Rig::new(&["blob"], &[("b", "blob", "blob")]);
    let c = &mut req();
    let dec = |enc: &str, v: &str| r.call(&mut req(), "blob.decode", vec![e(enc), None, s(v)]);
    let hex = dec("HEX", "666f6f00626172").unwrap();
    assert_eq!(
        r.call(c, "blob.length", vec![Some(hex.clone())]),
        Ok(Value::Int(7))
    );
    assert_eq!(
        t(r.call(c, "blob.encode", vec![e("BASE64"), None, Some(hex.clone())])).unwrap(),
        "Zm9vAGJhcg=="
    );
    assert_eq!(
        t(r.call(
            c,
            "blob.encode",
            vec![e("HEX"), e("UPPER"), Some(dec("IDENTITY", "Man").unwrap())]
        ))
        .unwrap(),
        "4D616E"
    );
    assert_eq!(
        r.call(
            c,
            "blob.encode",
            vec![e("IDENTITY"), e("LOWER"), Some(hex.clone())]
        ),
        Err("vmod blob error: case LOWER is illegal with encoding IDENTITY".into())
    );
    assert_eq!(
        dec("HEX", "gh"),
        Err("vmod blob error: cannot decode, illegal encoding beginning with \"gh\"".into())
    );
    // A STRANDS argument given in parts: decoded joined, an error quotes
    // the first part (b00002 `"g" + req.http.foo`).
    let parts = |p: &[Option<&str>]| {
        let parts: Box<[Option<Bytes>]> = p
            .iter()
            .map(|x| x.map(|x| Bytes::copy_from_slice(x.as_bytes())))
            .collect();
        let joined = Bytes::from(p.iter().flatten().copied().collect::<String>());
        Some(Value::Strands(Arc::new(Strands { parts, joined })))
    };
    assert_eq!(
        t(r.call(
            c,
            "blob.transcode",
            vec![
                e("HEX"),
                e("IDENTITY"),
                None,
                None,
                parts(&[Some("66"), None, Some("6f6f")])
            ]
        ))
        .unwrap(),
        "foo"
    );
    assert_eq!(
        r.call(
            c,
            "blob.decode",
            vec![e("HEX"), None, parts(&[Some("g"), Some("123")])]
        ),
        Err("vmod blob error: cannot decode, illegal encoding beginning with \"g\"".into())
    );
    assert_eq!(
        r.call(
            c,
            "blob.decode",
            vec![e("HEX"), None, parts(&[None, Some("g1")])]
        ),
        Err("vmod blob error: cannot decode, illegal encoding beginning with \"(null)\"".into())
    );
    assert_eq!(
        dec("URL", "a%2q"),
        Err("vmod blob error: cannot decode, illegal encoding beginning with \"a%2q\"".into())
    );
    assert_eq!(
        t(r.call(
            c,
            "blob.transcode",
            vec![e("BASE64"), e("BASE64CF"), None, None, s("+/Y=")]
        ))
        .unwrap(),
        "-~Y_"
    );
    assert_eq!(
        t(r.call(
            c,
            "blob.transcode",
            vec![
                e("IDENTITY"),
                e("URL"),
                None,
                Some(Value::Int(3)),
                s("a b c")
            ]
        ))
        .unwrap(),
        "a%20b"
    );
    let sub = r
        .call(
            c,
            "blob.sub",
            vec![
                Some(hex.clone()),
                Some(Value::Bytes(3)),
                Some(Value::Bytes(4)),
            ],
        )
        .unwrap();
    assert_eq!(
        t(r.call(c, "blob.encode", vec![None, None, Some(sub)])).unwrap(),
        "bar"
    );
    assert!(
        r.call(
            c,
            "blob.sub",
            vec![Some(hex.clone()), Some(Value::Bytes(8))]
        )
        .is_err()
    );
    assert_eq!(
        r.call(
            c,
            "blob.equal",
            vec![
                Some(hex.clone()),
                Some(dec("HEX", "666F6F00626172").unwrap())
            ]
        ),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        r.call(
            c,
            "blob.same",
            vec![
                Some(hex.clone()),
                Some(dec("HEX", "666F6F00626172").unwrap())
            ]
        ),
        Ok(Value::Bool(false))
    );
    assert_eq!(
        r.call(c, "blob.same", vec![Some(hex.clone()), Some(hex.clone())]),
        Ok(Value::Bool(true))
    );
    r.new_obj(c, "b", vec![e("HEX"), s("666F6F")]).unwrap();
    let g1 = r.method(c, "b", "get", vec![]).unwrap();
    let g2 = r.method(c, "b", "get", vec![]).unwrap();
    assert_eq!(
        r.call(c, "blob.same", vec![Some(g1), Some(g2)]),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        t(r.method(c, "b", "encode", vec![e("BASE64URLNOPAD")])).unwrap(),
        "Zm9v"
    );
    assert_eq!(t(r.method(c, "b", "encode", vec![])).unwrap(), "foo");
}

#[test]
fn purge_calls_the_server() {
    let r = Rig::new(&["purge"], &[]);
    let mut c = req();
    // Outside vcl_hit and vcl_miss a purge fails at run time (VRT_purge).
    assert_eq!(
        r.call(&mut c, "purge.hard", vec![]),
        Err("purge can only happen in vcl_hit{} or vcl_miss{}".to_string())
    );
    c.vmod.sub = Some(lacquer_vcl::subs::BuiltinSub::Hit);
    c.vmod.purge_count = 2;
    assert_eq!(r.call(&mut c, "purge.hard", vec![]), Ok(Value::Int(2)));
    assert_eq!(r.call(&mut c, "purge.soft", vec![]), Ok(Value::Int(2)));
    r.call(
        &mut c,
        "purge.soft",
        vec![Some(Value::Duration(5.0)), Some(Value::Duration(10.0))],
    )
    .unwrap();
    assert_eq!(
        c.vmod.purges,
        [(0.0, 0.0, 0.0), (0.0, -1.0, -1.0), (5.0, 10.0, -1.0)]
    );
}

#[test]
fn xkey_purges_through_the_host() {
    let r = Rig::new(&["xkey"], &[]);
    let c = &mut req();
    assert_eq!(
        r.call(c, "xkey.purge", vec![s("a  b,c")]),
        Ok(Value::Int(3))
    );
    assert_eq!(r.call(c, "xkey.softpurge", vec![s("k")]), Ok(Value::Int(1)));
    assert_eq!(
        r.call(c, "xkey.purge", vec![Some(Value::Null)]),
        Ok(Value::Int(0))
    );
    let calls = r.host.xkey_calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        [
            (vec!["a".to_string(), "b".into(), "c".into()], false),
            (vec!["k".to_string()], true)
        ]
    );
}

#[test]
fn proxy_tlvs() {
    let r = Rig::new(&["proxy"], &[]);
    let mut c = req();
    assert_eq!(r.call(&mut c, "proxy.alpn", vec![]), Ok(Value::Null));
    assert_eq!(
        r.call(&mut c, "proxy.is_ssl", vec![]),
        Ok(Value::Bool(false))
    );
    c.vmod.proxy_tlvs.insert(0x01, b"h2".to_vec());
    c.vmod.proxy_tlvs.insert(0x02, b"example.com".to_vec());
    let mut ssl = vec![0x01 | 0x04, 0, 0, 0, 0];
    for (k, v) in [
        (0x21u8, &b"TLSv1.3"[..]),
        (0x22, b"client"),
        (0x23, b"TLS_AES_256_GCM_SHA384"),
        (0x24, b"SHA256"),
        (0x25, b"RSA2048"),
    ] {
        ssl.push(k);
        ssl.extend_from_slice(&(v.len() as u16).to_be_bytes());
        ssl.extend_from_slice(v);
    }
    c.vmod.proxy_tlvs.insert(0x20, ssl);
    let st = |c: &mut MockContext, f: &str| t(r.call(c, f, vec![]));
    assert_eq!(st(&mut c, "proxy.alpn").unwrap(), "h2");
    assert_eq!(st(&mut c, "proxy.authority").unwrap(), "example.com");
    assert_eq!(
        r.call(&mut c, "proxy.is_ssl", vec![]),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        r.call(&mut c, "proxy.client_has_cert_sess", vec![]),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        r.call(&mut c, "proxy.client_has_cert_conn", vec![]),
        Ok(Value::Bool(false))
    );
    assert_eq!(
        r.call(&mut c, "proxy.ssl_verify_result", vec![]),
        Ok(Value::Int(0))
    );
    assert_eq!(st(&mut c, "proxy.ssl_version").unwrap(), "TLSv1.3");
    assert_eq!(st(&mut c, "proxy.client_cert_cn").unwrap(), "client");
    assert_eq!(
        st(&mut c, "proxy.ssl_cipher").unwrap(),
        "TLS_AES_256_GCM_SHA384"
    );
    assert_eq!(st(&mut c, "proxy.cert_sign").unwrap(), "SHA256");
    assert_eq!(st(&mut c, "proxy.cert_key").unwrap(), "RSA2048");
}

#[test]
fn unix_credentials() {
    let r = Rig::new(&["unix"], &[]);
    let mut c = req();
    assert_eq!(r.call(&mut c, "unix.uid", vec![]), Ok(Value::Int(-1)));
    assert_eq!(r.call(&mut c, "unix.user", vec![]), Ok(Value::Null));
    assert_eq!(c.logs_of(LogKind::Error).len(), 2);
    c.vmod.peer_cred = Some((0, 0));
    assert_eq!(r.call(&mut c, "unix.uid", vec![]), Ok(Value::Int(0)));
    assert_eq!(r.call(&mut c, "unix.gid", vec![]), Ok(Value::Int(0)));
    assert_eq!(
        t(r.call(&mut c, "unix.user", vec![])).as_deref(),
        Some("root")
    );
    assert_eq!(
        t(r.call(&mut c, "unix.group", vec![])).as_deref(),
        Some("root")
    );
}

#[test]
fn vsthrottle_buckets() {
    let r = Rig::new(&["vsthrottle"], &[]);
    let mut c = req();
    c.now = 1000.0;
    let key = format!("k{}", std::process::id());
    let args = |k: &str, block: f64| {
        vec![
            s(k),
            Some(Value::Int(3)),
            Some(Value::Duration(10.0)),
            Some(Value::Duration(block)),
        ]
    };
    for _ in 0..3 {
        assert_eq!(
            r.call(&mut c, "vsthrottle.is_denied", args(&key, 0.0)),
            Ok(Value::Bool(false))
        );
    }
    assert_eq!(
        r.call(&mut c, "vsthrottle.remaining", args(&key, 0.0)),
        Ok(Value::Int(0))
    );
    assert_eq!(
        r.call(&mut c, "vsthrottle.is_denied", args(&key, 0.0)),
        Ok(Value::Bool(true))
    );
    r.call(&mut c, "vsthrottle.return_token", args(&key, 0.0))
        .unwrap();
    assert_eq!(
        r.call(&mut c, "vsthrottle.is_denied", args(&key, 0.0)),
        Ok(Value::Bool(false))
    );
    // A third of the period earns one token back.
    c.now = 1003.5;
    assert_eq!(
        r.call(&mut c, "vsthrottle.remaining", args(&key, 0.0)),
        Ok(Value::Int(1))
    );
    // Blocking: once empty, denied for the whole block time.
    let bkey = format!("b{}", std::process::id());
    c.now = 2000.0;
    for _ in 0..3 {
        r.call(&mut c, "vsthrottle.is_denied", args(&bkey, 30.0))
            .unwrap();
    }
    assert_eq!(
        r.call(&mut c, "vsthrottle.is_denied", args(&bkey, 30.0)),
        Ok(Value::Bool(true))
    );
    c.now = 2020.0;
    assert_eq!(
        r.call(&mut c, "vsthrottle.blocked", args(&bkey, 30.0)),
        Ok(Value::Duration(10.0))
    );
    assert_eq!(
        r.call(&mut c, "vsthrottle.is_denied", args(&bkey, 30.0)),
        Ok(Value::Bool(true))
    );
    c.now = 2031.0;
    assert_eq!(
        r.call(&mut c, "vsthrottle.is_denied", args(&bkey, 30.0)),
        Ok(Value::Bool(false))
    );
    // A limit that is not positive denies without failing the VCL, and
    // remaining() is the limit as an unsigned number (varnish-modules).
    assert_eq!(
        r.call(
            &mut c,
            "vsthrottle.is_denied",
            vec![s("x"), Some(Value::Int(0)), Some(Value::Duration(1.0))]
        ),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        r.call(
            &mut c,
            "vsthrottle.remaining",
            vec![s("x"), Some(Value::Int(-1)), Some(Value::Duration(1.0))]
        ),
        Ok(Value::Int(4_294_967_295))
    );
}

#[test]
fn bodyaccess_on_the_cached_body() {
    use lacquer_vcl::subs::BuiltinSub;
    let r = Rig::new(&["bodyaccess"], &[]);
    let mut c = MockContext::new("POST", "/");
    c.vmod.req_body = Some(b"hello world".to_vec());
    assert_eq!(
        r.call(&mut c, "bodyaccess.len_req_body", vec![]),
        Ok(Value::Int(-1))
    );
    assert_eq!(
        r.call(&mut c, "bodyaccess.rematch_req_body", vec![s("wor")]),
        Ok(Value::Int(-1))
    );
    // As varnish-modules: a body not cached is logged so.
    assert_eq!(
        c.logs_of(LogKind::Error),
        ["Unbuffered req.body", "Unbuffered req.body"]
    );
    c.vmod.body_cached = true;
    assert_eq!(
        r.call(&mut c, "bodyaccess.len_req_body", vec![]),
        Ok(Value::Int(11))
    );
    assert_eq!(
        r.call(&mut c, "bodyaccess.rematch_req_body", vec![s("^hel+o")]),
        Ok(Value::Int(1))
    );
    assert_eq!(
        r.call(&mut c, "bodyaccess.rematch_req_body", vec![s("HELLO")]),
        Ok(Value::Int(0))
    );
    r.call(
        &mut c,
        "bodyaccess.log_req_body",
        vec![s("B:"), Some(Value::Int(4))],
    )
    .unwrap();
    assert_eq!(c.logs_of(LogKind::Debug), ["B:hell", "B:o wo", "B:rld"]);
    r.call(&mut c, "bodyaccess.hash_req_body", vec![]).unwrap();
    assert!(c.hash.is_empty());
    c.vmod.sub = Some(BuiltinSub::Hash);
    r.call(&mut c, "bodyaccess.hash_req_body", vec![]).unwrap();
    assert_eq!(c.hash, [Some(b"hello world".to_vec())]);
    // len_req_body is for vcl_recv only.
    assert_eq!(
        r.call(&mut c, "bodyaccess.len_req_body", vec![]),
        Ok(Value::Int(-1))
    );
    assert_eq!(
        c.logs_of(LogKind::Error).last().copied(),
        Some("len_req_body can only be used in vcl_recv{}")
    );
    assert!(
        r.call(
            &mut c,
            "bodyaccess.log_req_body",
            vec![s(""), Some(Value::Int(0))]
        )
        .is_err()
    );
}

#[test]
fn tcp_socket_options() {
    use lacquer_vcl::exec::TcpInfo;
    let r = Rig::new(&["tcp"], &[]);
    let mut c = req();
    assert_eq!(
        r.call(&mut c, "tcp.get_estimated_rtt", vec![]),
        Ok(Value::Real(0.0))
    );
    assert_eq!(
        r.call(&mut c, "tcp.congestion_algorithm", vec![s("cubic")]),
        Ok(Value::Int(-1))
    );
    c.vmod.tcp = Some(TcpInfo {
        rtt_us: 152_000,
        snd_mss: 1448,
        congestion: b"reno".to_vec(),
        ..TcpInfo::default()
    });
    assert_eq!(
        r.call(&mut c, "tcp.get_estimated_rtt", vec![]),
        Ok(Value::Real(152.0))
    );
    assert_eq!(
        r.call(&mut c, "tcp.congestion_algorithm", vec![s("hybla")]),
        Ok(Value::Int(0))
    );
    assert_eq!(
        r.call(&mut c, "tcp.congestion_algorithm", vec![s("nope")]),
        Ok(Value::Int(-1))
    );
    r.call(&mut c, "tcp.set_socket_pace", vec![Some(Value::Int(1000))])
        .unwrap();
    assert_eq!(c.vmod.pacing, [1_024_000]);
    r.call(&mut c, "tcp.dump_info", vec![]).unwrap();
    let logs = c.logs_of(LogKind::Log);
    assert_eq!(logs[0], "getsockopt() returned: hybla");
    assert_eq!(logs[1], "tcpi: snd_mss=1448 rcv_mss=0 lost=0 retrans=0");
    assert!(
        logs[2].starts_with("tcpi2: pmtu=0 rtt=152000 "),
        "{}",
        logs[2]
    );
}

#[test]
fn vtc_barrier_and_helpers() {
    use std::io::Write;
    let r = Rig::new(&["vtc"], &[]);
    let mut c = req();
    // A one-party barrier: accept, then close.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(b"x").unwrap();
    });
    let addr = format!("127.0.0.1 {port}");
    assert_eq!(
        r.call(
            &mut c,
            "vtc.barrier_sync",
            vec![s(&addr), Some(Value::Duration(5.0))]
        ),
        Ok(Value::Null)
    );
    t.join().unwrap();
    assert!(r.call(&mut c, "vtc.barrier_sync", vec![s("nope")]).is_err());
    assert_eq!(r.call(&mut c, "vtc.no_backend", vec![]), Ok(Value::Null));
    assert_eq!(
        r.call(&mut c, "vtc.typesize", vec![s("pi")]),
        Ok(Value::Int(16))
    );
    assert!(
        r.call(&mut c, "vtc.panic", vec![s("boom")])
            .unwrap_err()
            .contains("boom")
    );
    r.call(&mut c, "vtc.sleep", vec![Some(Value::Duration(0.001))])
        .unwrap();
    let ip = |a: &str| Some(Value::Ip(a.parse().unwrap()));
    let Value::Blob(b) = r
        .call(
            &mut c,
            "vtc.proxy_header",
            vec![e("v1"), ip("1.2.3.4:1"), ip("5.6.7.8:2")],
        )
        .unwrap()
    else {
        panic!("not a blob");
    };
    assert_eq!(&b[..], b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n");
}

#[test]
fn debug_private_state() {
    let r = Rig::new(&["debug"], &[("o", "debug", "obj"), ("o2", "debug", "obj")]);
    let c = &mut req();
    r.new_obj(c, "o", vec![]).unwrap();
    r.new_obj(c, "o2", vec![]).unwrap();
    // Function PRIV_TASK: starts, appends with a space, reads.
    assert_eq!(t(r.call(c, "debug.test_priv_task", vec![])).unwrap(), "");
    assert_eq!(
        t(r.call(c, "debug.test_priv_task", vec![s("a")])).unwrap(),
        "a"
    );
    assert_eq!(
        t(r.call(c, "debug.test_priv_task", vec![s("b")])).unwrap(),
        "a b"
    );
    assert_eq!(
        t(r.call(c, "debug.test_priv_task", vec![s("")])).unwrap(),
        "a b"
    );
    // Shared with priv_task_with_option: the first value sticks.
    assert_eq!(
        t(r.call(c, "debug.priv_task_with_option", vec![s("x")])).unwrap(),
        "a b"
    );
    let c = &mut req();
    assert_eq!(
        t(r.call(c, "debug.priv_task_with_option", vec![])).unwrap(),
        ""
    );
    assert_eq!(
        t(r.call(c, "debug.priv_task_with_option", vec![s("one")])).unwrap(),
        "one"
    );
    assert_eq!(
        t(r.call(c, "debug.priv_task_with_option", vec![s("two")])).unwrap(),
        "one"
    );
    // PRIV_TOP: the first call sets it.
    assert_eq!(
        t(r.call(c, "debug.test_priv_top", vec![s("/a0")])).unwrap(),
        "/a0"
    );
    assert_eq!(
        t(r.call(c, "debug.test_priv_top", vec![s("/b")])).unwrap(),
        "/a0"
    );
    // An ESI include shares its top request's PRIV_TOP store.
    let include = &mut req();
    include.vmod.top_privs = c.vmod.top_privs.clone();
    assert_eq!(
        t(r.call(include, "debug.test_priv_top", vec![s("/foo1")])).unwrap(),
        "/a0"
    );
    // Per-instance state: replaced, separate per object and per task.
    assert_eq!(t(r.method(c, "o", "test_priv_task", vec![])).unwrap(), "");
    assert_eq!(
        t(r.method(c, "o", "test_priv_task", vec![s("c1")])).unwrap(),
        "c1"
    );
    assert_eq!(
        t(r.method(c, "o", "test_priv_task", vec![s("d1")])).unwrap(),
        "d1"
    );
    assert_eq!(t(r.method(c, "o", "test_priv_task", vec![])).unwrap(), "d1");
    assert_eq!(t(r.method(c, "o2", "test_priv_task", vec![])).unwrap(), "");
    assert_eq!(
        t(r.method(c, "o2", "test_priv_top", vec![s("t")])).unwrap(),
        "t"
    );
    assert_eq!(t(r.method(c, "o", "test_priv_top", vec![])).unwrap(), "");
    assert_eq!(
        t(r.method(&mut req(), "o", "test_priv_task", vec![])).unwrap(),
        ""
    );
    // store_ip / get_ip within one task.
    assert_eq!(r.call(c, "debug.get_ip", vec![]), Ok(Value::Null));
    let ip: std::net::SocketAddr = "10.0.0.1:0".parse().unwrap();
    r.call(c, "debug.store_ip", vec![Some(Value::Ip(ip))])
        .unwrap();
    assert_eq!(r.call(c, "debug.get_ip", vec![]), Ok(Value::Ip(ip)));
}

/// The log of a task's `test_priv_task` calls and of its end, each record
/// with its addresses replaced by `P` (they differ from run to run).
fn debug_lines(c: &mut MockContext) -> Vec<String> {
    use lacquer_vcl::exec::Context as _;
    let mut privs = std::mem::take(c.privs());
    privs.finish(&mut |kind, msg| c.log(kind, msg));
    let mask = |l: &str| {
        let mut out = String::new();
        let mut rest = l;
        while let Some(i) = rest.find("0x") {
            out.push_str(&rest[..i]);
            out.push('P');
            rest = rest[i + 2..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
        }
        out + rest
    };
    c.logs_of(LogKind::Debug).into_iter().map(mask).collect()
}

#[test]
fn debug_priv_task_logs_and_ends() {
    let r = Rig::new(&["debug"], &[("objc", "debug", "obj")]);
    let c = &mut req();
    r.new_obj(c, "objc", vec![]).unwrap();
    r.call(c, "debug.test_priv_task", vec![s("")]).unwrap();
    r.call(c, "debug.test_priv_task", vec![s("a")]).unwrap();
    r.method(c, "objc", "test_priv_task", vec![]).unwrap();
    r.method(c, "objc", "test_priv_task", vec![s("x")]).unwrap();
    r.call(c, "debug.test_priv_task", vec![s("b")]).unwrap();
    r.method(c, "objc", "test_priv_task", vec![s("y")]).unwrap();
    r.method(c, "objc", "test_priv_task", vec![]).unwrap();
    assert_eq!(
        debug_lines(c),
        [
            "test_priv_task(P) = (nil) (exists)",
            "test_priv_task(P) = P (new)",
            "objc.priv_task() = NULL",
            "objc.priv_task() = P .priv = P (\"x\") [new]",
            "test_priv_task(P) = P (update)",
            "objc.priv_task() = P .priv = P (\"y\") [update]",
            "objc.priv_task() = P .priv = P (\"y\")",
            // The task's end, in the order the values were created.
            "priv_task_fini(P)",
            "obj_priv_task_fini(P)",
        ]
    );
}

#[test]
fn debug_arguments_and_objects() {
    let r = Rig::new(
        &["debug"],
        &[
            ("obj0", "debug", "obj"),
            ("obj3", "debug", "obj"),
            ("bad", "debug", "obj"),
            ("cc", "debug", "concat"),
        ],
    );
    let c = &mut req();
    // m00019.vtc
    let arg = |args| t(r.call(&mut req(), "debug.argtest", args)).unwrap();
    assert_eq!(
        arg(vec![s("1"), Some(Value::Real(2.1)), s("3a")]),
        "1 2.1 3a , 4 0 <undef>"
    );
    assert_eq!(
        arg(vec![
            s("1"),
            Some(Value::Real(2.4)),
            s("3d"),
            None,
            Some(Value::Int(-1))
        ]),
        "1 2.4 3d , -1 0 <undef>"
    );
    assert_eq!(
        arg(vec![s("1"), None, None, None, None, s("7")]),
        "1 2 3 , 4 1 7"
    );
    r.new_obj(c, "obj0", vec![]).unwrap();
    r.new_obj(c, "obj3", vec![s("s_two"), e("two")]).unwrap();
    assert_eq!(t(r.method(c, "obj0", "string", vec![])).unwrap(), "default");
    assert_eq!(t(r.method(c, "obj0", "number", vec![])).unwrap(), "one");
    assert_eq!(t(r.method(c, "obj3", "string", vec![])).unwrap(), "s_two");
    assert_eq!(t(r.method(c, "obj3", "number", vec![])).unwrap(), "two");
    assert_eq!(t(r.method(c, "obj0", "foo", vec![s("x")])).unwrap(), "BOO");
    assert_eq!(t(r.method(c, "obj0", "bar", vec![s("x")])).unwrap(), "BOO");
    assert_eq!(r.method(c, "obj0", "date", vec![]), Ok(Value::Time(21.4)));
    assert!(r.method(c, "obj0", "enum", vec![e("martin")]).is_ok());
    assert!(r.method(c, "obj0", "enum", vec![e("phk")]).is_err());
    assert!(r.new_obj(c, "bad", vec![s("fail")]).is_err());
    r.new_obj(c, "cc", vec![s("ab")]).unwrap();
    assert_eq!(t(r.method(c, "cc", "get", vec![])).unwrap(), "ab");
    // m00000.vtc
    assert_eq!(
        t(r.call(c, "debug.author", vec![])).unwrap(),
        "Poul-Henning"
    );
    assert_eq!(
        t(r.call(c, "debug.author", vec![e("mithrandir")])).unwrap(),
        "Tollef"
    );
    assert_eq!(
        r.call(c, "debug.fail", vec![]),
        Err("Forced failure".into())
    );
    assert_eq!(
        r.call(c, "debug.fail2", vec![]),
        Err("Forced failure".into())
    );
    // Strands and headers.
    assert_eq!(
        t(r.call(c, "debug.concatenate", vec![s("foobar")])).unwrap(),
        "foobar"
    );
    assert_eq!(
        t(r.call(c, "debug.collect", vec![Some(Value::Null)])).unwrap(),
        ""
    );
    r.call(
        c,
        "debug.sethdr",
        vec![hdr(HttpWhich::Req, "Hdr-7"), Some(Value::Null)],
    )
    .unwrap();
    r.call(
        c,
        "debug.sethdr",
        vec![hdr(HttpWhich::Req, "Hdr-1"), s("foobarbaz")],
    )
    .unwrap();
    let h = |n: &str| {
        use lacquer_vcl::exec::Context;
        c.header(HttpWhich::Req, &HeaderName::new(n))
            .map(|v| v.to_vec())
    };
    assert_eq!(h("Hdr-7").as_deref(), Some(&b""[..]));
    assert_eq!(h("hdr-1").as_deref(), Some(&b"foobarbaz"[..]));
    assert_eq!(
        r.call(&mut req(), "debug.validhdr", vec![s("\n\t")]),
        Ok(Value::Bool(false))
    );
    assert_eq!(
        t(r.call(&mut req(), "debug.re_quote", vec![s(r"hello\E")])).unwrap(),
        r"\Qhello\\EE"
    );
    // ACL pass-through.
    assert_eq!(r.call(c, "debug.null_acl", vec![]), Ok(Value::Null));
    assert_eq!(
        r.call(c, "debug.acl", vec![Some(Value::Acl(3))]),
        Ok(Value::Acl(3))
    );
}

#[test]
fn debug_client_address_and_priv_perf() {
    let r = Rig::new(&["debug"], &[]);
    let c = &mut req();
    c.vars.insert(
        lacquer_vcl::vars::VarId::ClientIp,
        Value::Ip("[::1]:4711".parse().unwrap()),
    );
    assert_eq!(t(r.call(c, "debug.client_ip", vec![])).unwrap(), "::1");
    assert_eq!(t(r.call(c, "debug.client_port", vec![])).unwrap(), "4711");
    let perf = |size, rounds| {
        r.call(
            &mut req(),
            "debug.priv_perf",
            vec![Some(Value::Int(size)), Some(Value::Int(rounds))],
        )
    };
    assert!(matches!(perf(10, 10), Ok(Value::Duration(d)) if d >= 0.0));
    assert!(perf(0, 10).is_err());
    assert!(perf(10, -1).is_err());
}

#[test]
fn debug_optional_arguments_with_privs() {
    // m00019.vtc
    let r = Rig::new(
        &["debug"],
        &[
            ("oo0", "debug", "obj_opt"),
            ("oo1", "debug", "obj_opt"),
            ("oo2", "debug", "obj_opt"),
        ],
    );
    let c = &mut req();
    r.new_obj(c, "oo0", vec![]).unwrap();
    r.new_obj(c, "oo1", vec![s("string")]).unwrap();
    r.new_obj(c, "oo2", vec![None, Some(Value::Bool(true))])
        .unwrap();
    assert_eq!(
        t(r.method(c, "oo0", "meth_opt", vec![s("s1")])).unwrap(),
        "obj oo0 obj_s *undef* obj_b *undef* met_s s1 met_b *undef*"
    );
    assert_eq!(
        t(r.method(c, "oo1", "meth_opt", vec![None, Some(Value::Bool(false))])).unwrap(),
        "obj oo1 obj_s string obj_b *undef* met_s *undef* met_b false"
    );
    assert_eq!(
        t(r.method(c, "oo2", "meth_opt", vec![])).unwrap(),
        "obj oo2 obj_s *undef* obj_b true met_s *undef* met_b *undef*"
    );
}

/// d00008.vtc / d00032.vtc: `debug.dyn` makes a backend through the host
/// and every refresh replaces (and retires) it; `dyn_uds` checks its path.
#[test]
fn debug_dynamic_backends() {
    use lacquer_vmods::Endpoint;
    let r = Rig::new(
        &["debug"],
        &[
            ("d", "debug", "dyn"),
            ("u", "debug", "dyn_uds"),
            ("bad", "debug", "dyn"),
        ],
    );
    let c = &mut req();
    let err = r.new_obj(c, "bad", vec![s(""), s("")]).unwrap_err();
    assert_eq!(err, "Missing dynamic backend address or port");
    r.new_obj(c, "d", vec![s("127.0.0.1"), s("8080")]).unwrap();
    let Ok(Value::Backend(first)) = r.method(c, "d", "backend", vec![]) else {
        panic!("dyn.backend() is not a backend");
    };
    assert_eq!(&*first.name, "d");
    r.method(c, "d", "refresh", vec![s("127.0.0.2"), s("9090")])
        .unwrap();
    let Ok(Value::Backend(second)) = r.method(c, "d", "backend", vec![]) else {
        panic!("dyn.backend() is not a backend");
    };
    assert_ne!(first, second);
    assert_eq!(*r.host.deleted.lock().unwrap(), vec![first]);
    let made = r.host.dynamic.lock().unwrap().clone();
    assert_eq!(
        made[1].endpoint,
        Endpoint::Tcp("127.0.0.2:9090".parse().unwrap())
    );
    assert_eq!(made[1].host_header.as_deref(), Some("127.0.0.2"));
    let rel = r.new_obj(c, "u", vec![s("s1.sock")]).unwrap_err();
    assert_eq!(rel, "path must be an absolute path: s1.sock");
    let dir = std::env::temp_dir();
    let e = r
        .new_obj(c, "u", vec![s(dir.to_str().unwrap())])
        .unwrap_err();
    assert!(e.ends_with("is not a socket"), "{e}");
}

/// An event context that keeps what the handlers log.
#[derive(Default)]
struct Events(std::sync::Mutex<Vec<String>>);

impl lacquer_vmods::EventCtx for Events {
    fn vcl_name(&self) -> &str {
        "vcl1"
    }
    fn param(&self, _: &str) -> Option<String> {
        None
    }
    fn log_debug(&self, msg: &str) {
        self.0.lock().unwrap().push(msg.to_string());
    }
    fn log(&self, _: LogKind, msg: &[u8]) {
        self.log_debug(&String::from_utf8_lossy(msg));
    }
}

#[test]
fn debug_object_events_last_as_long_as_the_vcl() {
    use lacquer_vmods::ObjectEvent;
    let r = Rig::new(&["debug"], &[]);
    let c = &mut req();
    r.call(c, "debug.register_obj_events", vec![]).unwrap();
    assert!(r.call(c, "debug.register_obj_events", vec![]).is_err());
    r.host.object_event(ObjectEvent::Insert, 0x2a);
    r.host.object_event(ObjectEvent::Expire, 0x2a);
    let logged: Vec<String> = r
        .host
        .logged
        .lock()
        .unwrap()
        .iter()
        .map(|(_, m)| m.clone())
        .collect();
    assert_eq!(
        logged,
        [
            "Subscribed to Object Events",
            "Object Event: insert 0x2a",
            "Object Event: expire 0x2a"
        ]
    );
    let ev = Events::default();
    r.rt.event(lacquer_vmods::VclEvent::Discard, &ev).unwrap();
    assert_eq!(*ev.0.lock().unwrap(), ["Unsubscribed from Object Events"]);
    assert!(
        r.host
            .subscribers
            .lock()
            .unwrap()
            .iter()
            .all(Option::is_none)
    );
}

#[test]
fn debug_catflap_is_for_client_requests() {
    // The mock context has no lookup to hook: the call fails the task.
    let r = Rig::new(&["debug"], &[]);
    let c = &mut req();
    let err = r.call(c, "debug.catflap", vec![e("first")]).unwrap_err();
    assert!(err.starts_with("debug.catflap(): "), "{err}");
}

#[test]
fn debug_holds_a_warm_vcl_until_it_goes_cold() {
    use lacquer_vmods::VclEvent;
    let r = Rig::new(&["debug"], &[]);
    let ev = Events::default();
    r.rt.event(VclEvent::Warm, &ev).unwrap();
    assert_eq!(
        *r.host.holds.lock().unwrap(),
        [Some("vmod-debug ref on vcl1".to_string())]
    );
    r.rt.event(VclEvent::Cold, &ev).unwrap();
    assert_eq!(*r.host.holds.lock().unwrap(), [None]);
    assert!(r.host.dynamic.lock().unwrap().is_empty());
    assert_eq!(
        *ev.0.lock().unwrap(),
        ["vcl1: VCL_EVENT_WARM", "vcl1: VCL_EVENT_COLD"]
    );

    // cold_backend(): no hold, and the cold event asks for a backend; a
    // host that makes one sees it retired at once, reported as an error.
    let r = Rig::new(&["debug"], &[]);
    r.call(&mut req(), "debug.cold_backend", vec![]).unwrap();
    let ev = Events::default();
    r.rt.event(VclEvent::Warm, &ev).unwrap();
    assert!(r.host.holds.lock().unwrap().is_empty());
    r.rt.event(VclEvent::Cold, &ev).unwrap();
    assert_eq!(r.host.dynamic.lock().unwrap()[0].name, "doomed");
    assert_eq!(r.host.deleted.lock().unwrap().len(), 1);
    assert!(ev.0.lock().unwrap()[2].contains("got a backend while going cold"));
}

#[test]
fn tls_reads_what_proxy_reads() {
    let r = Rig::new(&["tls", "proxy"], &[]);
    let mut c = req();
    assert_eq!(r.call(&mut c, "tls.is_tls", vec![]), Ok(Value::Bool(false)));
    assert_eq!(r.call(&mut c, "tls.version", vec![]), Ok(Value::Null));
    c.vmod.proxy_tlvs.insert(0x01, b"h2".to_vec());
    c.vmod.proxy_tlvs.insert(0x02, b"www.example.com".to_vec());
    let mut ssl = vec![0x01, 0, 0, 0, 0];
    for (k, v) in [
        (0x21u8, &b"TLSv1.2"[..]),
        (0x23, b"ECDHE-RSA-AES128-GCM-SHA256"),
        (0x24, b"RSA-SHA256"),
        (0x25, b"RSA2048"),
    ] {
        ssl.push(k);
        ssl.extend_from_slice(&(v.len() as u16).to_be_bytes());
        ssl.extend_from_slice(v);
    }
    c.vmod.proxy_tlvs.insert(0x20, ssl);
    assert_eq!(r.call(&mut c, "tls.is_tls", vec![]), Ok(Value::Bool(true)));
    for (tls_fn, proxy_fn, want) in [
        ("tls.version", "proxy.ssl_version", "TLSv1.2"),
        (
            "tls.cipher",
            "proxy.ssl_cipher",
            "ECDHE-RSA-AES128-GCM-SHA256",
        ),
        ("tls.authority", "proxy.authority", "www.example.com"),
        ("tls.alpn", "proxy.alpn", "h2"),
        ("tls.cert_sign", "proxy.cert_sign", "RSA-SHA256"),
        ("tls.cert_key", "proxy.cert_key", "RSA2048"),
    ] {
        assert_eq!(t(r.call(&mut c, tls_fn, vec![])).unwrap(), want);
        assert_eq!(t(r.call(&mut c, proxy_fn, vec![])).unwrap(), want);
    }
}
