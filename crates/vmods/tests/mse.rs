//! `vmod_mse`'s `set_stores()`: the store with the most free space among
//! those named, `none` for memory only, clear errors otherwise.

mod common;

use common::*;
use lacquer_vcl::exec::mock::MockContext;
use lacquer_vcl::exec::{Context, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;

fn beresp() -> MockContext {
    let mut c = MockContext::new("GET", "/");
    c.vmod.sub = Some(BuiltinSub::BackendResponse);
    c
}

fn storage(c: &MockContext) -> Value {
    c.get(VarId::BerespStorage).unwrap()
}

#[test]
fn set_stores_picks_a_named_store_or_memory() {
    let r = Rig::new(&["mse"], &[]);
    let c = &mut beresp();
    r.call(c, "mse.set_stores", vec![s("store-1, store-2")])
        .unwrap();
    // The mock reports the same free space for every store: the first wins.
    assert_eq!(storage(c), Value::Stevedore("store-1".into()));
    r.call(c, "mse.set_stores", vec![s("none")]).unwrap();
    assert_eq!(storage(c), Value::Stevedore("Transient".into()));
    let e = r.call(c, "mse.set_stores", vec![s(" , ")]).unwrap_err();
    assert!(e.contains("no store given"), "{e}");
    let e = r
        .call(c, "mse.set_stores", vec![s("none,store-1")])
        .unwrap_err();
    assert!(e.contains("cannot be combined"), "{e}");
}
