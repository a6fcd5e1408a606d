//! vmod directors through the `Vmods` trait and the `Director` handles
//! the server resolves; expectations from Varnish's directors_*.vtc.

mod common;

use common::*;
use lacquer_vcl::exec::Context as _;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{Backend, Value};
use lacquer_vcl::subs::BuiltinSub;

fn name(v: &Value) -> String {
    match v {
        Value::Backend(b) => b.name.to_string(),
        other => panic!("not a backend: {other:?}"),
    }
}

fn backend(v: &Value) -> Backend {
    match v {
        Value::Backend(b) => b.clone(),
        other => panic!("not a backend: {other:?}"),
    }
}

fn init() -> lacquer_vcl::exec::mock::MockContext {
    let mut c = req();
    c.vmod.sub = Some(BuiltinSub::Init);
    c
}

#[test]
fn round_robin_skips_sick_and_layers_under_fallback() {
    let r = Rig::new(
        &["directors"],
        &[
            ("rr1", "directors", "round_robin"),
            ("rr2", "directors", "round_robin"),
            ("fb", "directors", "fallback"),
        ],
    );
    let c = &mut init();
    r.new_obj(c, "rr1", vec![]).unwrap();
    r.new_obj(c, "rr2", vec![]).unwrap();
    r.new_obj(c, "fb", vec![]).unwrap();
    for (d, b) in [
        ("rr1", (1, "s1")),
        ("rr1", (2, "s2")),
        ("rr2", (3, "s3")),
        ("rr2", (4, "s4")),
    ] {
        r.method(c, d, "add_backend", vec![Some(be(b.0, b.1))])
            .unwrap();
    }
    let rr1 = r.method(c, "rr1", "backend", vec![]).unwrap();
    let rr2 = r.method(c, "rr2", "backend", vec![]).unwrap();
    assert_eq!(name(&rr1), "rr1");
    r.method(c, "fb", "add_backend", vec![Some(rr1)]).unwrap();
    r.method(c, "fb", "add_backend", vec![Some(rr2)]).unwrap();
    let fb = backend(&r.method(c, "fb", "backend", vec![]).unwrap());
    let mut picks: Vec<String> = (0..4)
        .map(|_| r.host.resolve(c, &fb).unwrap().name.to_string())
        .collect();
    assert_eq!(picks, ["s1", "s2", "s1", "s2"]);
    r.host.set_sick("s1", true);
    r.host.set_sick("s2", true);
    picks = (0..3)
        .map(|_| r.host.resolve(c, &fb).unwrap().name.to_string())
        .collect();
    assert_eq!(picks, ["s3", "s4", "s3"]);
    r.host.set_sick("s3", true);
    r.host.set_sick("s4", true);
    assert!(r.host.resolve(c, &fb).is_none());
    assert!(!lacquer_vmods::Host::backend_healthy(&*r.host, &fb).unwrap());
}

#[test]
fn round_robin_remove_backend() {
    let r = Rig::new(&["directors", "std"], &[("rr", "directors", "round_robin")]);
    let c = &mut init();
    r.new_obj(c, "rr", vec![]).unwrap();
    for i in 1..=4 {
        r.method(c, "rr", "add_backend", vec![Some(be(i, &format!("s{i}")))])
            .unwrap();
    }
    for i in 1..=3 {
        r.method(
            c,
            "rr",
            "remove_backend",
            vec![Some(be(i, &format!("s{i}")))],
        )
        .unwrap();
    }
    let d = backend(&r.method(c, "rr", "backend", vec![]).unwrap());
    assert_eq!(r.host.resolve(c, &d).unwrap().name.as_ref(), "s4");
    assert_eq!(r.host.resolve(c, &d).unwrap().name.as_ref(), "s4");
    assert_eq!(
        r.call(c, "std.healthy", vec![Some(Value::Backend(d))]),
        Ok(Value::Bool(true))
    );
}

#[test]
fn sticky_fallback() {
    let r = Rig::new(&["directors"], &[("fb", "directors", "fallback")]);
    let c = &mut init();
    r.new_obj(c, "fb", vec![Some(Value::Bool(true))]).unwrap();
    r.method(c, "fb", "add_backend", vec![Some(be(1, "s1"))])
        .unwrap();
    r.method(c, "fb", "add_backend", vec![Some(be(2, "s2"))])
        .unwrap();
    let d = backend(&r.method(c, "fb", "backend", vec![]).unwrap());
    assert_eq!(r.host.resolve(c, &d).unwrap().name.as_ref(), "s1");
    r.host.set_sick("s1", true);
    assert_eq!(r.host.resolve(c, &d).unwrap().name.as_ref(), "s2");
    r.host.set_sick("s1", false);
    // Sticky: stays on s2 although s1 is back.
    assert_eq!(r.host.resolve(c, &d).unwrap().name.as_ref(), "s2");
    // Removing a backend before the current one keeps it current.
    r.method(c, "fb", "add_backend", vec![Some(be(3, "s3"))])
        .unwrap();
    r.method(c, "fb", "remove_backend", vec![Some(be(1, "s1"))])
        .unwrap();
    assert_eq!(r.host.resolve(c, &d).unwrap().name.as_ref(), "s2");
}

#[test]
fn random_spreads_by_weight_among_healthy() {
    let r = Rig::new(&["directors"], &[("rnd", "directors", "random")]);
    let c = &mut init();
    r.new_obj(c, "rnd", vec![]).unwrap();
    r.method(
        c,
        "rnd",
        "add_backend",
        vec![Some(be(1, "s1")), Some(Value::Real(3.0))],
    )
    .unwrap();
    r.method(
        c,
        "rnd",
        "add_backend",
        vec![Some(be(2, "s2")), Some(Value::Real(1.0))],
    )
    .unwrap();
    let d = backend(&r.method(c, "rnd", "backend", vec![]).unwrap());
    let n1 = (0..4000)
        .filter(|_| r.host.resolve(c, &d).unwrap().name.as_ref() == "s1")
        .count();
    assert!((2700..3300).contains(&n1), "{n1}");
    r.host.set_sick("s1", true);
    assert!((0..50).all(|_| r.host.resolve(c, &d).unwrap().name.as_ref() == "s2"));
    r.method(c, "rnd", "remove_backend", vec![Some(be(2, "s2"))])
        .unwrap();
    assert!(r.host.resolve(c, &d).is_none());
}

#[test]
fn hash_director_matches_varnish() {
    // directors_b00003.vtc: which of s1/s2 each key lands on.
    let r = Rig::new(&["directors"], &[("h1", "directors", "hash")]);
    let c = &mut init();
    r.new_obj(c, "h1", vec![]).unwrap();
    r.method(c, "h1", "add_backend", vec![Some(be(1, "s1"))])
        .unwrap();
    r.method(
        c,
        "h1",
        "add_backend",
        vec![Some(be(2, "s2")), Some(Value::Real(1.0))],
    )
    .unwrap();
    let c = &mut req();
    for (key, want) in [
        ("/1", "s2"),
        ("/3", "s1"),
        ("/13", "s1"),
        ("/8", "s2"),
        ("", "s1"),
        ("127.0.0.1", "s2"),
    ] {
        let got = r.method(c, "h1", "backend", vec![s(key)]).unwrap();
        assert_eq!(name(&got), want, "key {key:?}");
    }
    r.method(c, "h1", "remove_backend", vec![Some(be(1, "s1"))])
        .unwrap();
    assert_eq!(
        name(&r.method(c, "h1", "backend", vec![s("/3")]).unwrap()),
        "s2"
    );
}

#[test]
fn shard_by_key_matches_varnish() {
    // directors_c00003.vtc
    let r = Rig::new(&["directors"], &[("vd", "directors", "shard")]);
    let c = &mut init();
    r.new_obj(c, "vd", vec![]).unwrap();
    for (i, n) in ["s1", "s2", "s3"].iter().enumerate() {
        assert_eq!(
            r.method(c, "vd", "add_backend", vec![Some(be(i as u32 + 1, n))]),
            Ok(Value::Bool(true))
        );
    }
    assert_eq!(
        r.method(c, "vd", "reconfigure", vec![Some(Value::Int(25))]),
        Ok(Value::Bool(true))
    );
    let c = &mut req();
    for (key, want) in [(1i64, "s1"), (2_147_483_647, "s2"), (4_294_967_295, "s3")] {
        let got = r
            .method(c, "vd", "backend", vec![e("KEY"), Some(Value::Int(key))])
            .unwrap();
        assert_eq!(name(&got), want, "key {key}");
    }
    // alt picks a different backend; with everything sick CHOSEN gives none.
    let first = r
        .method(c, "vd", "backend", vec![e("KEY"), Some(Value::Int(1))])
        .unwrap();
    let alt = r
        .method(
            c,
            "vd",
            "backend",
            vec![e("KEY"), Some(Value::Int(1)), None, Some(Value::Int(1))],
        )
        .unwrap();
    assert_ne!(first, alt);
    for n in ["s1", "s2", "s3"] {
        r.host.set_sick(n, true);
    }
    assert_eq!(
        r.method(c, "vd", "backend", vec![e("KEY"), Some(Value::Int(1))]),
        Ok(Value::Null)
    );
    let ignore = r
        .method(
            c,
            "vd",
            "backend",
            vec![
                e("KEY"),
                Some(Value::Int(1)),
                None,
                None,
                None,
                None,
                e("IGNORE"),
            ],
        )
        .unwrap();
    assert_eq!(name(&ignore), "s1");
}

#[test]
fn shard_key_and_lazy_resolution() {
    let r = Rig::new(
        &["directors"],
        &[
            ("vd", "directors", "shard"),
            ("p", "directors", "shard_param"),
        ],
    );
    let c = &mut init();
    r.new_obj(c, "vd", vec![]).unwrap();
    r.new_obj(c, "p", vec![]).unwrap();
    for (i, n) in ["s1", "s2", "s3"].iter().enumerate() {
        r.method(c, "vd", "add_backend", vec![Some(be(i as u32 + 1, n))])
            .unwrap();
    }
    // No explicit reconfigure: the changes apply (with 67 replicas) when
    // the vcl_init task ends and drops its private state.
    c.privs().clear();
    let key = r.method(c, "vd", "key", vec![s("foo")]).unwrap();
    assert!(matches!(key, Value::Int(k) if (0..=u32::MAX as i64).contains(&k)));
    r.method(c, "p", "set", vec![e("KEY"), Some(Value::Int(1))])
        .unwrap();
    assert_eq!(
        text(&r.method(c, "p", "get_by", vec![]).unwrap()).unwrap(),
        "KEY"
    );
    assert_eq!(r.method(c, "p", "get_key", vec![]), Ok(Value::Int(1)));
    assert_eq!(
        text(&r.method(c, "p", "get_healthy", vec![]).unwrap()).unwrap(),
        "CHOSEN"
    );
    let blob = r.method(c, "p", "use", vec![]).unwrap();
    r.method(c, "vd", "associate", vec![Some(blob)]).unwrap();
    // In vcl_init, backend() is lazy: the director itself.
    let lazy = r.method(c, "vd", "backend", vec![]).unwrap();
    assert_eq!(name(&lazy), "vd");
    assert!(
        r.method(c, "vd", "backend", vec![e("KEY"), Some(Value::Int(1))])
            .is_err()
    );
    // Resolved at fetch time with the associated parameter set (key 1 -> s1
    // with the default 67 replicas too).
    let mut bc = req();
    bc.vmod.sub = Some(BuiltinSub::BackendFetch);
    let picked = r.host.resolve(&mut bc, &backend(&lazy)).unwrap();
    let now = r
        .method(
            &mut req(),
            "vd",
            "backend",
            vec![e("KEY"), Some(Value::Int(1))],
        )
        .unwrap();
    assert_eq!(Value::Backend(picked.clone()), now);
    // A per-task override of the parameter set changes the pick.
    r.method(
        &mut bc,
        "p",
        "set",
        vec![None, None, None, Some(Value::Int(1))],
    )
    .unwrap();
    assert_eq!(r.method(&mut bc, "p", "get_alt", vec![]), Ok(Value::Int(1)));
    let alt = r.host.resolve(&mut bc, &backend(&lazy)).unwrap();
    assert_ne!(alt, picked);
    // Not on the client side (directors_c00015.vtc).
    assert_eq!(
        r.method(&mut req(), "p", "set", vec![e("HASH")]),
        Err("vmod_directors: shard p: shard_param.set() may only be used in vcl_init and in backend/pipe context".into())
    );
    // ...but not the VCL defaults seen by other tasks.
    assert_eq!(
        r.method(&mut req(), "p", "get_alt", vec![]),
        Ok(Value::Int(0))
    );
    assert!(
        r.method(c, "vd", "remove_backend", vec![])
            .unwrap_err()
            .ends_with(".remove_backend(): either backend or ident are required")
    );
    assert_eq!(
        r.method(c, "vd", "remove_backend", vec![Some(be(1, "s1"))]),
        Ok(Value::Bool(true))
    );
    assert_eq!(r.method(c, "vd", "clear", vec![]), Ok(Value::Bool(true)));
    let pick = |r: &Rig| {
        r.method(
            &mut req(),
            "vd",
            "backend",
            vec![e("KEY"), Some(Value::Int(1))],
        )
    };
    // Other tasks keep the old ring until the changes are applied.
    assert_eq!(pick(&r), Ok(Value::Backend(picked)));
    assert_eq!(
        r.method(c, "vd", "reconfigure", vec![Some(Value::Int(0))]),
        Ok(Value::Bool(false))
    );
    // Clearing everything leaves no backend: reconfigure says so.
    assert_eq!(
        r.method(c, "vd", "reconfigure", vec![]),
        Ok(Value::Bool(false))
    );
    assert_eq!(pick(&r), Ok(Value::Null));
}

#[test]
fn directors_are_unregistered_with_their_vcl() {
    let r = Rig::new(
        &["directors"],
        &[
            ("rr", "directors", "round_robin"),
            ("h", "directors", "hash"),
        ],
    );
    let c = &mut init();
    r.new_obj(c, "rr", vec![]).unwrap();
    r.new_obj(c, "h", vec![]).unwrap();
    let host = r.host.clone();
    // Every director is registered (backend.list shows the hash director
    // too, though VCL has no handle to it).
    assert_eq!(host.directors.lock().unwrap().len(), 2);
    drop(r);
    let removed = host.removed.lock().unwrap().clone();
    let mut names: Vec<&str> = removed.iter().map(|b| b.name.as_ref()).collect();
    names.sort();
    assert_eq!(names, ["h", "rr"]);
}

#[test]
fn lookup_by_name() {
    let r = Rig::new(&["directors"], &[]);
    r.host.backends.lock().unwrap().push(Backend {
        id: 7,
        name: "www".into(),
    });
    let c = &mut init();
    assert_eq!(
        name(&r.call(c, "directors.lookup", vec![s("www")]).unwrap()),
        "www"
    );
    assert_eq!(
        r.call(c, "directors.lookup", vec![s("nope")]),
        Ok(Value::Null)
    );
    // Only in vcl_init / vcl_fini (b00016.vtc: a VCL failure in vcl_recv).
    assert!(
        r.call(&mut req(), "directors.lookup", vec![s("www")])
            .is_err()
    );
}

#[test]
fn saintmode_blacklists_objects_per_backend() {
    use lacquer_vcl::vars::VarId;
    let r = Rig::new(&["saintmode"], &[("sm", "saintmode", "saintmode")]);
    let c = &mut init();
    r.new_obj(c, "sm", vec![Some(be(1, "s1")), Some(Value::Int(2))])
        .unwrap();
    let d = backend(&r.method(c, "sm", "backend", vec![]).unwrap());
    let mut bc = req();
    bc.vmod.sub = Some(BuiltinSub::BackendResponse);
    bc.vmod.digest = Some([1; 32]);
    bc.vars.insert(VarId::BerespBackend, be(1, "s1"));
    assert_eq!(r.host.resolve(&mut bc, &d).unwrap().name.as_ref(), "s1");
    r.call(
        &mut bc,
        "saintmode.blacklist",
        vec![Some(Value::Duration(20.0))],
    )
    .unwrap();
    assert_eq!(
        r.method(&mut bc, "sm", "blacklist_count", vec![]),
        Ok(Value::Int(1))
    );
    // Sick for that object only.
    assert!(r.host.resolve(&mut bc, &d).is_none());
    bc.vmod.digest = Some([2; 32]);
    assert_eq!(r.host.resolve(&mut bc, &d).unwrap().name.as_ref(), "s1");
    assert_eq!(
        r.method(&mut bc, "sm", "is_healthy", vec![]),
        Ok(Value::Bool(true))
    );
    // Reaching the threshold makes the whole backend sick.
    r.call(
        &mut bc,
        "saintmode.blacklist",
        vec![Some(Value::Duration(20.0))],
    )
    .unwrap();
    assert_eq!(
        r.method(&mut bc, "sm", "is_healthy", vec![]),
        Ok(Value::Bool(false))
    );
    bc.vmod.digest = Some([3; 32]);
    assert!(r.host.resolve(&mut bc, &d).is_none());
    // Only in vcl_backend_response.
    let mut c2 = req();
    r.call(
        &mut c2,
        "saintmode.blacklist",
        vec![Some(Value::Duration(1.0))],
    )
    .unwrap();
    assert_eq!(c2.logs_of(lacquer_vcl::exec::LogKind::Error).len(), 1);
}

#[test]
fn shard_by_url_in_client_context_matches_varnish() {
    // directors_c00005.vtc: the default by=HASH hashes req.url on the
    // client side.
    let r = Rig::new(&["directors"], &[("vd", "directors", "shard")]);
    let c = &mut init();
    r.new_obj(c, "vd", vec![]).unwrap();
    for (i, n) in ["s1", "s2", "s3"].iter().enumerate() {
        r.method(c, "vd", "add_backend", vec![Some(be(i as u32 + 1, n))])
            .unwrap();
    }
    r.method(c, "vd", "reconfigure", vec![Some(Value::Int(25))])
        .unwrap();
    for (url, want) in [
        ("/Boo0aixe", "s1"),
        ("/eishoSu2", "s2"),
        ("/Aunah3uo", "s3"),
    ] {
        let mut c = MockContext::new("GET", url);
        let got = r.method(&mut c, "vd", "backend", vec![]).unwrap();
        assert_eq!(name(&got), want, "{url}");
    }
}

fn three_shard(r: &Rig) {
    let c = &mut init();
    r.new_obj(c, "vd", vec![]).unwrap();
    for (i, n) in ["s1", "s2", "s3"].iter().enumerate() {
        r.method(c, "vd", "add_backend", vec![Some(be(i as u32 + 1, n))])
            .unwrap();
    }
    r.method(c, "vd", "reconfigure", vec![Some(Value::Int(25))])
        .unwrap();
}

fn fetch_ctx(url: &str) -> MockContext {
    let mut c = MockContext::new("GET", url);
    c.strings
        .insert(lacquer_vcl::vars::VarId::BereqUrl, url.as_bytes().to_vec());
    c.vmod.sub = Some(BuiltinSub::BackendFetch);
    c
}

#[test]
fn shard_by_blob_on_the_backend_side_matches_varnish() {
    // directors_c00008.vtc: key_blob = the URL's hex digits.
    let r = Rig::new(&["directors", "blob"], &[("vd", "directors", "shard")]);
    three_shard(&r);
    for (hex, want) in [("68b902f7", "s1"), ("39dc4613", "s2"), ("c7793505", "s3")] {
        let mut c = fetch_ctx(&format!("/{hex}"));
        let blob = r
            .call(&mut c, "blob.decode", vec![e("HEX"), None, s(hex)])
            .unwrap();
        let got = r
            .method(&mut c, "vd", "backend", vec![e("BLOB"), None, Some(blob)])
            .unwrap();
        assert_eq!(name(&got), want, "{hex}");
    }
}

#[test]
fn shard_lazy_with_parameter_sets_matches_varnish() {
    // directors_c00004.vtc
    let r = Rig::new(
        &["directors"],
        &[
            ("vd", "directors", "shard"),
            ("p", "directors", "shard_param"),
            ("p3", "directors", "shard_param"),
        ],
    );
    three_shard(&r);
    let c = &mut init();
    r.new_obj(c, "p", vec![]).unwrap();
    r.method(c, "p", "set", vec![e("KEY"), Some(Value::Int(1))])
        .unwrap();
    let pu = r.method(c, "p", "use", vec![]).unwrap();
    r.method(c, "vd", "associate", vec![Some(pu)]).unwrap();
    r.new_obj(c, "p3", vec![]).unwrap();
    r.method(
        c,
        "p3",
        "set",
        vec![e("KEY"), Some(Value::Int(4_294_967_295))],
    )
    .unwrap();
    for (url, want) in [("/1", "s1"), ("/2", "s2"), ("/3", "s3")] {
        let mut bc = fetch_ctx(url);
        let d = backend(
            &r.method(
                &mut bc,
                "vd",
                "backend",
                vec![None, None, None, None, None, None, None, None, e("LAZY")],
            )
            .unwrap(),
        );
        assert_eq!(d.name.as_ref(), "vd");
        if url == "/2" {
            r.method(
                &mut bc,
                "p",
                "set",
                vec![e("KEY"), Some(Value::Int(2_147_483_647))],
            )
            .unwrap();
        }
        if url == "/3" {
            let p3 = r.method(&mut bc, "p3", "use", vec![]).unwrap();
            r.method(
                &mut bc,
                "vd",
                "backend",
                vec![
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    Some(p3),
                    e("LAZY"),
                ],
            )
            .unwrap();
        }
        assert_eq!(
            r.host.resolve(&mut bc, &d).unwrap().name.as_ref(),
            want,
            "{url}"
        );
    }
}

#[test]
fn shard_rampup_and_warmup() {
    let r = Rig::new(&["directors"], &[("vd", "directors", "shard")]);
    three_shard(&r);
    let c = &mut req();
    let key = |c: &mut MockContext| {
        name(
            &r.method(c, "vd", "backend", vec![e("KEY"), Some(Value::Int(1))])
                .unwrap(),
        )
    };
    assert_eq!(key(c), "s1");
    let alt = name(
        &r.method(
            c,
            "vd",
            "backend",
            vec![e("KEY"), Some(Value::Int(1)), None, Some(Value::Int(1))],
        )
        .unwrap(),
    );
    // s1 just became healthy and ramps up over 100s: at 1% of the way it
    // gets about 1% of the requests, the rest go to the next backend.
    r.method(
        &mut init(),
        "vd",
        "set_rampup",
        vec![Some(Value::Duration(100.0))],
    )
    .unwrap();
    r.host
        .changed
        .lock()
        .unwrap()
        .insert("s1".into(), c.now - 1.0);
    let n_s1 = (0..1000).filter(|_| key(c) == "s1").count();
    assert!(n_s1 < 60, "{n_s1}");
    assert!((0..20).any(|_| key(c) == alt));
    // rampup=false turns it off.
    let off = name(
        &r.method(
            c,
            "vd",
            "backend",
            vec![
                e("KEY"),
                Some(Value::Int(1)),
                None,
                None,
                None,
                Some(Value::Bool(false)),
            ],
        )
        .unwrap(),
    );
    assert_eq!(off, "s1");
    // Ramped up: back to s1; warmup=1 always sends to the alternative.
    r.host
        .changed
        .lock()
        .unwrap()
        .insert("s1".into(), c.now - 1000.0);
    assert_eq!(key(c), "s1");
    let warm = name(
        &r.method(
            c,
            "vd",
            "backend",
            vec![
                e("KEY"),
                Some(Value::Int(1)),
                None,
                None,
                Some(Value::Real(1.0)),
            ],
        )
        .unwrap(),
    );
    assert_eq!(warm, alt);
}
