//! vmod std through the `Vmods` trait, with cases from Varnish's
//! std_*.vtc tests.

mod common;

use common::*;
use lacquer_vcl::exec::{HttpWhich, LogKind, Value};
use lacquer_vcl::subs::BuiltinSub;

fn rig() -> Rig {
    Rig::new(&["std"], &[])
}

fn hdr(which: HttpWhich, name: &str) -> Option<Value> {
    Some(Value::Header(
        which,
        std::sync::Arc::new(lacquer_vcl::exec::HeaderName::new(name)),
    ))
}

#[test]
fn registry_matches_implementations() {
    let reg = lacquer_vmods::registry();
    let mut names: Vec<&str> = reg.names().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "accept",
            "blob",
            "bodyaccess",
            "cookie",
            "curl",
            "directors",
            "header",
            "http",
            "kvstore",
            "mse",
            "proxy",
            "purge",
            "saintmode",
            "std",
            "str",
            "tcp",
            "tls",
            "unix",
            "urlplus",
            "utils",
            "var",
            "vsthrottle",
            "vtc",
            "wasm",
            "xkey"
        ]
    );
    // Loading every vmod resolves every declared function and method.
    Rig::new(&names, &[]);
}

#[test]
fn test_vmods_only_in_the_test_registry() {
    let reg = lacquer_vmods::registry_with_test_vmods();
    let prod = lacquer_vmods::registry();
    // vtc is installed with varnishd and importable everywhere; debug is
    // varnishtest's alone.
    assert!(
        prod.get("debug").is_none(),
        "debug in the production registry"
    );
    assert!(
        reg.get("debug").is_some(),
        "debug missing from the test registry"
    );
    assert!(prod.get("vtc").is_some() && reg.get("vtc").is_some());
    let mut names: Vec<&str> = reg.names().collect();
    names.retain(|n| prod.get(n).is_some() || *n == "debug");
    assert_eq!(names.len(), prod.names().count() + 1);
    Rig::new(&names, &[]);
}

#[test]
fn strings() {
    let r = rig();
    let c = &mut req();
    let t = |v: Result<Value, String>| text(&v.unwrap());
    assert_eq!(
        t(r.call(c, "std.toupper", vec![s("yes!")])).unwrap(),
        "YES!"
    );
    assert_eq!(
        t(r.call(c, "std.tolower", vec![s("VerY")])).unwrap(),
        "very"
    );
    assert_eq!(
        t(r.call(c, "std.strstr", vec![s("abcdef"), s("cd")])).unwrap(),
        "cdef"
    );
    assert_eq!(t(r.call(c, "std.strstr", vec![s("abc"), s("x")])), None);
    assert_eq!(
        t(r.call(c, "std.strstr", vec![Some(Value::Null), s("x")])),
        None
    );
    assert_eq!(
        t(r.call(c, "std.querysort", vec![s("/a?z=1&a=2")])).unwrap(),
        "/a?a=2&z=1"
    );
    assert_eq!(
        r.call(
            c,
            "std.fnmatch",
            vec![s("/foo/*/quux"), s("/foo/bar/baz/quux")]
        ),
        Ok(Value::Bool(false))
    );
    assert_eq!(
        r.call(
            c,
            "std.fnmatch",
            vec![
                s("/foo/*/quux"),
                s("/foo/bar/baz/quux"),
                Some(Value::Bool(false))
            ]
        ),
        Ok(Value::Bool(true))
    );
    assert!(
        r.call(c, "std.fnmatch", vec![Some(Value::Null), s("x")])
            .is_err()
    );
}

#[test]
fn collect_headers() {
    let r = rig();
    let mut c = req()
        .with_header(HttpWhich::Req, "Accept", "a")
        .with_header(HttpWhich::Req, "X", "1")
        .with_header(HttpWhich::Req, "accept", "b");
    r.call(&mut c, "std.collect", vec![hdr(HttpWhich::Req, "accept")])
        .unwrap();
    assert_eq!(c.http(HttpWhich::Req).get("accept"), Some(&b"a, b"[..]));
    assert_eq!(c.http(HttpWhich::Req).headers.len(), 2);
    let mut c = req()
        .with_header(HttpWhich::Resp, "C", "a")
        .with_header(HttpWhich::Resp, "C", "b");
    r.call(
        &mut c,
        "std.collect",
        vec![hdr(HttpWhich::Resp, "c"), s("; ")],
    )
    .unwrap();
    assert_eq!(c.http(HttpWhich::Resp).get("c"), Some(&b"a; b"[..]));
    assert!(
        r.call(&mut c, "std.collect", vec![hdr(HttpWhich::Obj, "c")])
            .is_err()
    );
}

#[test]
fn duration_and_bytes() {
    let r = rig();
    let c = &mut req();
    let d = |v: &str| {
        r.call(
            &mut req(),
            "std.duration",
            vec![s(v), Some(Value::Duration(1.0))],
        )
        .unwrap()
    };
    assert_eq!(d("0.010s"), Value::Duration(0.01));
    assert_eq!(d("10m"), Value::Duration(600.0));
    assert_eq!(d("-100s"), Value::Duration(-100.0));
    for bad in ["s", "3wx", "-inf", "2x", "2h x", "100"] {
        assert_eq!(d(bad), Value::Duration(1.0), "{bad}");
    }
    assert!(r.call(c, "std.duration", vec![s("100")]).is_err());
    assert_eq!(
        r.call(c, "std.duration", vec![None, None, Some(Value::Real(1.5))]),
        Ok(Value::Duration(1.5))
    );
    assert_eq!(
        r.call(
            c,
            "std.duration",
            vec![None, None, None, Some(Value::Int(10))]
        ),
        Ok(Value::Duration(10.0))
    );
    assert!(r.call(c, "std.duration", vec![]).is_err());
    let b = |v: &str| {
        r.call(
            &mut req(),
            "std.bytes",
            vec![s(v), Some(Value::Bytes(10240))],
        )
        .unwrap()
    };
    assert_eq!(b("2k"), Value::Bytes(2048));
    assert_eq!(b("3 m"), Value::Bytes(3_145_728));
    assert_eq!(b("4.5 g"), Value::Bytes(4_831_838_208));
    assert_eq!(b("0.25 PB"), Value::Bytes(281_474_976_710_656));
    assert_eq!(b("34%"), Value::Bytes(10240));
    assert_eq!(
        r.call(
            c,
            "std.bytes",
            vec![None, None, Some(Value::Real(2048.999))]
        ),
        Ok(Value::Bytes(2048))
    );
    assert!(r.call(c, "std.bytes", vec![s("x")]).is_err());
    assert!(
        r.call(c, "std.bytes", vec![None, None, None, Some(Value::Int(-1))])
            .is_err()
    );
}

#[test]
fn integer_and_real() {
    let r = rig();
    let c = &mut req();
    let i = |v: &str| {
        r.call(&mut req(), "std.integer", vec![s(v), Some(Value::Int(0))])
            .unwrap()
    };
    assert_eq!(i("1"), Value::Int(1));
    assert_eq!(i("-1"), Value::Int(-1));
    assert_eq!(i("999999999999999"), Value::Int(999_999_999_999_999));
    assert_eq!(i("bar"), Value::Int(0));
    assert_eq!(i("9007199254740992"), Value::Int(0));
    assert!(
        r.call(c, "std.integer", vec![s("9007199254740992")])
            .is_err()
    );
    let with = |idx: usize, v: Value| {
        let mut a = vec![None; idx + 1];
        a[idx] = Some(v);
        r.call(&mut req(), "std.integer", a)
    };
    assert_eq!(with(2, Value::Bool(true)), Ok(Value::Int(1)));
    assert_eq!(with(3, Value::Bytes(1)), Ok(Value::Int(1)));
    assert_eq!(
        with(4, Value::Duration(999_999_999_999.999)),
        Ok(Value::Int(999_999_999_999))
    );
    assert_eq!(with(5, Value::Real(1.9)), Ok(Value::Int(1)));
    assert_eq!(with(6, Value::Time(1.0)), Ok(Value::Int(1)));
    assert!(with(5, Value::Real(1e20)).is_err());
    assert!(
        r.call(
            c,
            "std.integer",
            vec![
                None,
                None,
                Some(Value::Bool(true)),
                None,
                None,
                Some(Value::Real(1.0))
            ]
        )
        .is_err()
    );
    let re = |v: &str| {
        r.call(&mut req(), "std.real", vec![s(v), Some(Value::Real(0.0))])
            .unwrap()
    };
    for ok in ["1.00", "1.", "1.0 ", " 1.0", " 1.0 "] {
        assert_eq!(re(ok), Value::Real(1.0), "{ok}");
    }
    assert_eq!(re("1.00a"), Value::Real(0.0));
    for bad in ["NAN", "-INF", "x"] {
        assert!(r.call(c, "std.real", vec![s(bad)]).is_err());
    }
    assert_eq!(
        r.call(c, "std.round", vec![Some(Value::Real(-42.5))]),
        Ok(Value::Real(-43.0))
    );
    let v = r
        .call(
            c,
            "std.random",
            vec![Some(Value::Real(1.0)), Some(Value::Real(2.0))],
        )
        .unwrap();
    assert!(matches!(v, Value::Real(x) if (1.0..2.0).contains(&x)));
}

#[test]
fn time_conversions() {
    let r = rig();
    let c = &mut req();
    let now = Some(Value::Time(5.0));
    assert_eq!(
        r.call(
            c,
            "std.time",
            vec![s("Mon, 20 Dec 2010 00:00:00 GMT"), now.clone()]
        ),
        Ok(Value::Time(1_292_803_200.0))
    );
    assert_eq!(
        r.call(
            c,
            "std.time",
            vec![s("Monday, 30-Feb-15 00:00:00 GMT"), now.clone()]
        ),
        Ok(Value::Time(5.0))
    );
    assert!(
        r.call(c, "std.time", vec![s("Monday, 20-Dec-30 00:00:00 GMT")])
            .is_err()
    );
    assert_eq!(
        r.call(
            c,
            "std.time",
            vec![None, None, None, Some(Value::Int(1_923_955_200))]
        ),
        Ok(Value::Time(1_923_955_200.0))
    );
    // A negative REAL is a time too (varnishd does not check it).
    assert_eq!(
        r.call(c, "std.time", vec![None, None, Some(Value::Real(-1.0))]),
        Ok(Value::Time(-1.0))
    );
    assert_eq!(
        text(
            &r.call(
                c,
                "std.strftime",
                vec![Some(Value::Time(1_292_803_200.0)), s("%Y%m%dT%H%M%SZ")]
            )
            .unwrap()
        ),
        Some("20101220T000000Z".into())
    );
    assert_eq!(
        r.call(
            c,
            "std.real2integer",
            vec![Some(Value::Real(0.5)), Some(Value::Int(7))]
        ),
        Ok(Value::Int(1))
    );
    assert_eq!(
        r.call(
            c,
            "std.real2integer",
            vec![Some(Value::Real(1e30)), Some(Value::Int(7))]
        ),
        Ok(Value::Int(7))
    );
    assert_eq!(
        r.call(
            c,
            "std.real2time",
            vec![Some(Value::Real(1.6)), Some(Value::Time(0.0))]
        ),
        // Not rounded; time2integer() rounds (varnishd, tests/diff/vmoddiff.py).
        Ok(Value::Time(1.6))
    );
    assert_eq!(
        r.call(
            c,
            "std.time2integer",
            vec![Some(Value::Time(3.7)), Some(Value::Int(0))]
        ),
        Ok(Value::Int(4))
    );
    assert_eq!(
        r.call(
            c,
            "std.time2real",
            vec![Some(Value::Time(3.5)), Some(Value::Real(0.0))]
        ),
        Ok(Value::Real(3.5))
    );
}

#[test]
fn ip_and_port() {
    let r = rig();
    let c = &mut req();
    let fb: std::net::SocketAddr = "127.0.0.2:80".parse().unwrap();
    let ip = |s_: &str, resolve: bool| {
        r.call(
            &mut req(),
            "std.ip",
            vec![s(s_), Some(Value::Ip(fb)), Some(Value::Bool(resolve))],
        )
        .unwrap()
    };
    assert_eq!(
        ip("1.2.3.5", false),
        Value::Ip("1.2.3.5:80".parse().unwrap())
    );
    assert_eq!(ip("8.8.8.*", true), Value::Ip(fb));
    assert_eq!(ip("2001::db8::", false), Value::Ip(fb));
    assert_eq!(ip("localhost", false), Value::Ip(fb));
    assert_eq!(
        ip("[::1]:8080", false),
        Value::Ip("[::1]:8080".parse().unwrap())
    );
    assert_eq!(
        r.call(
            c,
            "std.ip",
            vec![s("1.2.3.4"), None, Some(Value::Bool(false)), s("8080")]
        ),
        Ok(Value::Ip("1.2.3.4:8080".parse().unwrap()))
    );
    assert!(r.call(c, "std.ip", vec![s("nope nope")]).is_err());
    assert_eq!(
        r.call(
            c,
            "std.port",
            vec![Some(Value::Ip("1.2.3.4:8080".parse().unwrap()))]
        ),
        Ok(Value::Int(8080))
    );
}

#[test]
fn files_env_and_syntax() {
    let r = rig();
    let c = &mut req();
    let dir = std::env::temp_dir().join(format!("lacquer-vmods-std-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("one");
    std::fs::write(&f, "File One").unwrap();
    let p = f.to_str().unwrap();
    assert_eq!(
        text(&r.call(c, "std.fileread", vec![s(p)]).unwrap()).unwrap(),
        "File One"
    );
    // Cached: later changes are not seen.
    std::fs::write(&f, "changed").unwrap();
    assert_eq!(
        text(&r.call(c, "std.fileread", vec![s(p)]).unwrap()).unwrap(),
        "File One"
    );
    assert_eq!(
        r.call(c, "std.blobread", vec![s(p)]),
        Ok(Value::Blob(bytes::Bytes::from_static(b"File One")))
    );
    assert_eq!(
        r.call(c, "std.fileread", vec![s("/this/file/should/not/exist")]),
        Ok(Value::Null)
    );
    assert_eq!(
        r.call(c, "std.file_exists", vec![s(p)]),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        r.call(c, "std.file_exists", vec![s("/nope/x")]),
        Ok(Value::Bool(false))
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(text(&r.call(c, "std.getenv", vec![s("PATH")]).unwrap()).is_some());
    assert_eq!(
        r.call(c, "std.getenv", vec![s("LACQUER_SURELY_UNSET_VAR")]),
        Ok(Value::Null)
    );
    assert_eq!(
        r.call(c, "std.syntax", vec![Some(Value::Real(4.0))]),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        r.call(c, "std.syntax", vec![Some(Value::Real(4.1))]),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        r.call(c, "std.syntax", vec![Some(Value::Real(4.2))]),
        Ok(Value::Bool(false))
    );
}

#[test]
fn health() {
    let r = rig();
    let c = &mut req();
    assert_eq!(
        r.call(c, "std.healthy", vec![Some(be(1, "s1"))]),
        Ok(Value::Bool(true))
    );
    r.host.set_sick("s1", true);
    assert_eq!(
        r.call(c, "std.healthy", vec![Some(be(1, "s1"))]),
        Ok(Value::Bool(false))
    );
    assert_eq!(
        r.call(c, "std.healthy", vec![Some(Value::Null)]),
        Ok(Value::Bool(false))
    );
}

#[test]
fn logging_and_task_services() {
    let r = rig();
    let mut c = req();
    r.call(&mut c, "std.log", vec![s("hello")]).unwrap();
    r.call(
        &mut c,
        "std.syslog",
        vec![Some(Value::Int(9)), s("to syslog")],
    )
    .unwrap();
    r.call(&mut c, "std.timestamp", vec![s("t0")]).unwrap();
    assert_eq!(c.logs_of(LogKind::Log), ["hello"]);
    assert_eq!(c.vmod.timestamps, ["t0"]);
    r.call(
        &mut c,
        "std.late_100_continue",
        vec![Some(Value::Bool(true))],
    )
    .unwrap();
    assert_eq!(c.vmod.late_100, Some(true));
    r.call(&mut c, "std.set_ip_tos", vec![Some(Value::Int(8))])
        .unwrap();
    assert_eq!(c.vmod.ip_tos, Some(8));
    c.vmod.req_body = Some(vec![0; 100]);
    assert_eq!(
        r.call(&mut c, "std.cache_req_body", vec![Some(Value::Bytes(10))]),
        Ok(Value::Bool(false))
    );
    assert_eq!(
        r.call(&mut c, "std.cache_req_body", vec![Some(Value::Bytes(1000))]),
        Ok(Value::Bool(true))
    );
    // Past vcl_recv, varnishd refuses to cache the body: false and a
    // VCL_Error, the task goes on.
    c.vmod.sub = Some(BuiltinSub::Deliver);
    assert_eq!(
        r.call(&mut c, "std.cache_req_body", vec![Some(Value::Bytes(1000))]),
        Ok(Value::Bool(false))
    );
    assert!(
        c.logs_of(LogKind::Error)
            .contains(&"req.body can only be cached in vcl_recv{}")
    );
    c = c.with_header(HttpWhich::Bereq, "A", "1");
    c.snapshot(HttpWhich::Bereq);
    c = c.with_header(HttpWhich::Bereq, "B", "2");
    c.vmod.sub = Some(BuiltinSub::BackendFetch);
    r.call(
        &mut c,
        "std.rollback",
        vec![Some(Value::Http(HttpWhich::Bereq))],
    )
    .unwrap();
    assert_eq!(c.http(HttpWhich::Bereq).headers.len(), 1);
}

#[test]
fn bans() {
    let r = rig();
    let mut c = req();
    assert_eq!(
        r.call(&mut c, "std.ban_error", vec![]).map(|v| text(&v)),
        Ok(Some(String::new()))
    );
    assert_eq!(
        r.call(&mut c, "std.ban", vec![s("req.url ~ x")]),
        Ok(Value::Bool(true))
    );
    assert_eq!(c.bans, [b"req.url ~ x".to_vec()]);
    c.ban_error = Some("Unknown or unsupported field \"foo\"".into());
    assert_eq!(
        r.call(&mut c, "std.ban", vec![s("foo == x")]),
        Ok(Value::Bool(false))
    );
    assert_eq!(
        text(&r.call(&mut c, "std.ban_error", vec![]).unwrap()).unwrap(),
        "Unknown or unsupported field \"foo\""
    );
    c.ban_error = None;
    assert_eq!(
        r.call(&mut c, "std.ban", vec![s("req.url ~ y")]),
        Ok(Value::Bool(true))
    );
    assert_eq!(
        text(&r.call(&mut c, "std.ban_error", vec![]).unwrap()).unwrap(),
        ""
    );
    assert_eq!(
        r.call(&mut c, "std.ban", vec![Some(Value::Null)]),
        Ok(Value::Bool(false))
    );
}

#[test]
fn runtime_is_shareable_between_worker_threads() {
    fn check<T: Send + Sync>() {}
    check::<lacquer_vmods::Runtime>();
    let r = std::sync::Arc::new(rig());
    let t = std::thread::spawn({
        let r = r.clone();
        move || text(&r.call(&mut req(), "std.toupper", vec![s("x")]).unwrap())
    });
    assert_eq!(t.join().unwrap().as_deref(), Some("X"));
}
