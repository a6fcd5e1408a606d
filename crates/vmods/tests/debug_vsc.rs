//! vmod debug's `DEBUG` counters: one set for the process, published by
//! `vsc_new()`, counted by `vsc_count()`, withdrawn by `vsc_destroy()` or
//! with the last VCL importing the vmod. (A test binary of its own: the
//! set and the count of loaded VCLs are process-wide.)

mod common;

use common::*;
use lacquer_vcl::exec::Value;
use lacquer_vmods::{EventCtx, VclEvent};

struct Quiet;

impl EventCtx for Quiet {
    fn vcl_name(&self) -> &str {
        "vcl1"
    }
    fn param(&self, _: &str) -> Option<String> {
        None
    }
    fn log_debug(&self, _: &str) {}
    fn log(&self, _: lacquer_vcl::exec::LogKind, _: &[u8]) {}
}

#[test]
fn debug_counters_come_and_go() {
    let r = Rig::new(&["debug"], &[]);
    let c = &mut req();
    let count = || r.host.counters.lock().unwrap().get("DEBUG").cloned();
    r.rt.event(VclEvent::Load, &Quiet).unwrap();
    // Counting before the set exists fails the task.
    assert!(r.call(c, "debug.vsc_count", vec![]).is_err());
    r.call(c, "debug.vsc_new", vec![]).unwrap();
    assert_eq!(count(), Some(vec![0]));
    r.call(c, "debug.vsc_count", vec![]).unwrap();
    r.call(c, "debug.vsc_count", vec![Some(Value::Int(5))])
        .unwrap();
    // A second vsc_new() keeps the set and its count.
    r.call(c, "debug.vsc_new", vec![]).unwrap();
    assert_eq!(count(), Some(vec![6]));
    r.call(c, "debug.vsc_destroy", vec![]).unwrap();
    assert_eq!(count(), None);
    r.call(c, "debug.vsc_new", vec![]).unwrap();
    assert_eq!(count(), Some(vec![0]));
    // A second VCL importing debug: the set stays until both are gone.
    let r2 = Rig::new(&["debug"], &[]);
    r2.rt.event(VclEvent::Load, &Quiet).unwrap();
    r2.rt.event(VclEvent::Discard, &Quiet).unwrap();
    assert_eq!(count(), Some(vec![0]));
    r.rt.event(VclEvent::Discard, &Quiet).unwrap();
    assert_eq!(count(), None);
}
