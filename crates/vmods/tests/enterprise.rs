//! The Varnish Enterprise vmods the StorageGRID guide's VCL imports
//! (`kvstore`, `urlplus`, `utils`) through the `Vmods` trait, each
//! function with the semantics that VCL relies on.

mod common;

use common::*;
use lacquer_vcl::exec::Value;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;

fn t(v: Result<Value, String>) -> Option<String> {
    text(&v.unwrap())
}

fn int(v: i64) -> Option<Value> {
    Some(Value::Int(v))
}

fn dur(v: f64) -> Option<Value> {
    Some(Value::Duration(v))
}

#[test]
fn kvstore_global_store() {
    let r = Rig::new(&["kvstore"], &[("hits", "kvstore", "init")]);
    let c = &mut req();
    r.new_obj(c, "hits", vec![]).unwrap();
    // get: the default, then what set stored.
    assert_eq!(r.method(c, "hits", "get", vec![s("a")]), Ok(Value::Null));
    assert_eq!(
        t(r.method(c, "hits", "get", vec![s("a"), s("none")])).unwrap(),
        "none"
    );
    r.method(c, "hits", "set", vec![s("a"), s("one")]).unwrap();
    assert_eq!(
        t(r.method(c, "hits", "get", vec![s("a"), s("none")])).unwrap(),
        "one"
    );
    // The guide's hit counter: +1 per 304, read with 0, reset by delete.
    let key = "/bucket/object";
    assert_eq!(
        r.method(c, "hits", "counter", vec![s(key), int(0)]),
        Ok(Value::Int(0))
    );
    for n in 1..=3 {
        assert_eq!(
            r.method(c, "hits", "counter", vec![s(key), int(1)]),
            Ok(Value::Int(n))
        );
    }
    // Another task sees the same store.
    assert_eq!(
        r.method(&mut req(), "hits", "counter", vec![s(key), int(0)]),
        Ok(Value::Int(3))
    );
    assert_eq!(r.method(c, "hits", "size", vec![]), Ok(Value::Int(2)));
    r.method(c, "hits", "delete", vec![s(key)]).unwrap();
    assert_eq!(
        r.method(c, "hits", "counter", vec![s(key), int(0)]),
        Ok(Value::Int(0))
    );
    // TTLs: expired keys read as absent and compact() drops them.
    r.method(c, "hits", "set", vec![s("ttl"), s("v"), dur(10.0)])
        .unwrap();
    assert_eq!(
        r.method(c, "hits", "counter", vec![s("c"), int(1), dur(5.0)]),
        Ok(Value::Int(1))
    );
    c.now += 7.0;
    assert_eq!(
        r.method(c, "hits", "counter", vec![s("c"), int(0)]),
        Ok(Value::Int(0))
    );
    assert_eq!(t(r.method(c, "hits", "get", vec![s("ttl")])).unwrap(), "v");
    c.now += 3.0;
    assert_eq!(r.method(c, "hits", "get", vec![s("ttl")]), Ok(Value::Null));
    assert_eq!(r.method(c, "hits", "size", vec![]), Ok(Value::Int(1)));
    r.method(c, "hits", "compact", vec![]).unwrap();
    assert_eq!(r.method(c, "hits", "size", vec![]), Ok(Value::Int(1)));
}

#[test]
fn kvstore_request_scope_is_per_task() {
    let r = Rig::new(&["kvstore"], &[("kv", "kvstore", "init")]);
    let c = &mut req();
    r.new_obj(c, "kv", vec![e("REQUEST")]).unwrap();
    r.method(c, "kv", "set", vec![s("k"), s("v")]).unwrap();
    assert_eq!(
        r.method(c, "kv", "counter", vec![s("n"), int(2)]),
        Ok(Value::Int(2))
    );
    assert_eq!(t(r.method(c, "kv", "get", vec![s("k")])).unwrap(), "v");
    assert_eq!(r.method(c, "kv", "size", vec![]), Ok(Value::Int(2)));
    let other = &mut req();
    assert_eq!(r.method(other, "kv", "get", vec![s("k")]), Ok(Value::Null));
    assert_eq!(r.method(other, "kv", "size", vec![]), Ok(Value::Int(0)));
    r.method(c, "kv", "delete", vec![s("k")]).unwrap();
    r.method(c, "kv", "compact", vec![]).unwrap();
    assert_eq!(r.method(c, "kv", "size", vec![]), Ok(Value::Int(1)));
}

#[test]
fn kvstore_get_is_fast() {
    let r = Rig::new(&["kvstore"], &[("kv", "kvstore", "init")]);
    let c = &mut req();
    r.new_obj(c, "kv", vec![]).unwrap();
    for i in 0..1000 {
        r.method(
            c,
            "kv",
            "set",
            vec![s(&format!("/bucket/key-{i}")), s("value")],
        )
        .unwrap();
    }
    let args = vec![s("/bucket/key-500"), s("")];
    let n = 20_000;
    let start = std::time::Instant::now();
    for _ in 0..n {
        r.method(c, "kv", "get", args.clone()).unwrap();
    }
    let per = start.elapsed() / n;
    // Well under a microsecond even in a debug build on a loaded machine;
    // a store behind one global lock, or a scan, would not be.
    assert!(
        per < std::time::Duration::from_micros(20),
        "{per:?} per get"
    );
}

fn url_of(c: &MockContext, var: VarId) -> String {
    c.string(var).unwrap().to_string()
}

#[test]
fn urlplus_reads_the_url() {
    let r = Rig::new(&["urlplus"], &[]);
    let c = &mut MockContext::new(
        "GET",
        "/bucket/dir/photo.JPG?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=abc&versionId=",
    );
    assert_eq!(
        t(r.call(c, "urlplus.url_get", vec![])).unwrap(),
        "/bucket/dir/photo.JPG"
    );
    assert_eq!(
        t(r.call(c, "urlplus.get_extension", vec![])).unwrap(),
        "JPG"
    );
    assert_eq!(
        t(r.call(c, "urlplus.get_filename", vec![])).unwrap(),
        "photo.JPG"
    );
    assert_eq!(
        t(r.call(c, "urlplus.get_dirname", vec![])).unwrap(),
        "/bucket/dir"
    );
    assert_eq!(
        t(r.call(c, "urlplus.query_get", vec![s("X-Amz-Signature")])).unwrap(),
        "abc"
    );
    assert_eq!(
        t(r.call(c, "urlplus.query_get", vec![s("versionId")])).unwrap(),
        ""
    );
    assert_eq!(
        r.call(c, "urlplus.query_get", vec![s("nope")]),
        Ok(Value::Null)
    );
    assert_eq!(
        t(r.call(c, "urlplus.query_get", vec![s("nope"), s("d")])).unwrap(),
        "d"
    );
    assert_eq!(r.call(c, "urlplus.query_count", vec![]), Ok(Value::Int(3)));
    // Reading changes nothing.
    assert!(url_of(c, VarId::ReqUrl).contains("X-Amz-Signature=abc"));
    // A URL VCL set since is read afresh while the copy is unchanged.
    c.strings.insert(VarId::ReqUrl, b"/other/file.txt".to_vec());
    assert_eq!(
        t(r.call(c, "urlplus.url_get", vec![])).unwrap(),
        "/other/file.txt"
    );
    assert_eq!(r.call(c, "urlplus.query_count", vec![]), Ok(Value::Int(0)));
    // In the backend subroutines it is bereq.url.
    let b = &mut MockContext::new("GET", "/client");
    b.vmod.sub = Some(BuiltinSub::BackendResponse);
    b.strings
        .insert(VarId::BereqUrl, b"/bucket/key?partNumber=1".to_vec());
    assert_eq!(
        t(r.call(b, "urlplus.url_get", vec![])).unwrap(),
        "/bucket/key"
    );
    // parse() replaces the copy with any URL; reset() goes back to the task's.
    r.call(c, "urlplus.parse", vec![s("/p/q.tar.gz?a=1")])
        .unwrap();
    assert_eq!(t(r.call(c, "urlplus.get_extension", vec![])).unwrap(), "gz");
    assert_eq!(
        t(r.call(c, "urlplus.query_get", vec![s("a")])).unwrap(),
        "1"
    );
    r.call(c, "urlplus.reset", vec![]).unwrap();
    assert_eq!(
        t(r.call(c, "urlplus.url_get", vec![])).unwrap(),
        "/other/file.txt"
    );
}

#[test]
fn urlplus_rewrites_the_url() {
    let r = Rig::new(&["urlplus"], &[]);
    let c = &mut MockContext::new("GET", "/x?utm_source=a&b=2&utm_medium=b&a=1&&c");
    r.call(c, "urlplus.query_delete_regex", vec![s("^utm_")])
        .unwrap();
    r.call(c, "urlplus.query_add", vec![s("z"), s("26")])
        .unwrap();
    r.call(c, "urlplus.query_add", vec![s("flag")]).unwrap();
    assert_eq!(
        t(r.call(c, "urlplus.url_as_string", vec![])).unwrap(),
        "/x?b=2&a=1&c&z=26&flag"
    );
    assert_eq!(
        t(r.call(c, "urlplus.query_as_string", vec![])).unwrap(),
        "b=2&a=1&c&z=26&flag"
    );
    // Nothing is written until write(); it sorts by default.
    assert!(url_of(c, VarId::ReqUrl).contains("utm_source"));
    r.call(c, "urlplus.write", vec![]).unwrap();
    assert_eq!(url_of(c, VarId::ReqUrl), "/x?a=1&b=2&c&flag&z=26");
    r.call(c, "urlplus.query_delete", vec![s("c")]).unwrap();
    r.call(c, "urlplus.write", vec![Some(Value::Bool(false))])
        .unwrap();
    assert_eq!(url_of(c, VarId::ReqUrl), "/x?a=1&b=2&flag&z=26");
    // keep: only kept (and added) parameters are written.
    r.call(c, "urlplus.query_keep", vec![s("b")]).unwrap();
    r.call(c, "urlplus.query_keep_regex", vec![s("^[yz]$")])
        .unwrap();
    r.call(c, "urlplus.write", vec![]).unwrap();
    assert_eq!(url_of(c, VarId::ReqUrl), "/x?b=2&z=26");
    r.call(c, "urlplus.query_keep", vec![s("none")]).unwrap();
    r.call(c, "urlplus.write", vec![]).unwrap();
    assert_eq!(url_of(c, VarId::ReqUrl), "/x");
    // Errors say what failed.
    assert!(r.call(c, "urlplus.query_add", vec![s("")]).is_err());
    assert!(
        r.call(c, "urlplus.query_delete_regex", vec![s("(")])
            .is_err()
    );
    // A backend task writes bereq.url and leaves req.url alone.
    let b = &mut MockContext::new("GET", "/client");
    b.vmod.sub = Some(BuiltinSub::BackendFetch);
    b.strings.insert(VarId::BereqUrl, b"/k?b&a".to_vec());
    r.call(b, "urlplus.write", vec![]).unwrap();
    assert_eq!(url_of(b, VarId::BereqUrl), "/k?a&b");
    assert_eq!(url_of(b, VarId::ReqUrl), "/client");
}

#[test]
fn utils_functions() {
    let r = Rig::new(&["utils"], &[]);
    let c = &mut req();
    assert_eq!(t(r.call(c, "utils.newline", vec![])).unwrap(), "\n");
    c.now = 1_000_000_000.25;
    assert_eq!(
        t(r.call(c, "utils.time_format", vec![s("%Y-%m-%dT%H:%M:%S%z")])).unwrap(),
        "2001-09-09T01:46:40+0000"
    );
    assert_eq!(
        t(r.call(
            c,
            "utils.time_format",
            vec![
                s("%a %s"),
                Some(Value::Bool(false)),
                Some(Value::Time(86_400.0))
            ]
        ))
        .unwrap(),
        "Fri 86400"
    );
    // Local time: the same instant, whatever the host's zone.
    let local = t(r.call(
        c,
        "utils.time_format",
        vec![s("%s"), Some(Value::Bool(true))],
    ))
    .unwrap();
    assert_eq!(local, "1000000000");
    // Only a fetch has a 304 to refresh from; elsewhere it fails (and
    // is_fast_304 is false).
    assert!(
        r.call(c, "utils.fast_304", vec![])
            .unwrap_err()
            .contains("backend fetch")
    );
    assert_eq!(
        r.call(c, "utils.is_fast_304", vec![]),
        Ok(Value::Bool(false))
    );
}
