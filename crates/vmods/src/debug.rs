//! `vmod_debug`: the test-only module of Varnish's test suite (corpus VCLs
//! import it to exercise vmod argument passing, private state, objects,
//! strands and VCL failure). Only available through
//! [`crate::registry_with_test_vmods`], never to production VCL.
//!
//! Implemented with Varnish 7.1's signatures: the ENUM/argument-passing
//! tests (`author`, `argtest`, object `obj`), task/top private state
//! (`test_priv_task`, `test_priv_top`, `priv_task_with_option`, the
//! object's per-instance variants), failures (`fail`, `fail2`), strands
//! (`concatenate`, `collect`, `return_strands`, `sethdr`, object `concat`),
//! optional arguments mixed with PRIV ones (object `obj_opt`),
//! `re_quote`, `just_return_regex` (a REGEX through a vmod), `validhdr`, `store_ip`/`get_ip`, `client_ip`/`client_port`,
//! `priv_perf`, `sndbuf` (the client socket's send buffer), `stk` (the stack VCL
//! uses), the ACL
//! pass-through functions (`null_acl`, `acl`, object
//! `aclobj`), `match_acl` (asked of the calling program through
//! [`lacquer_vcl::exec::VclRuntime`]), SUB values (`call`, `check_call`,
//! object `caller`), `test_probe`, `catflap` (a hook into the
//! request's cache lookup, [`Context::set_lookup_hook`]) and
//! `register_obj_events` (objects entering and leaving the cache,
//! [`crate::Host::subscribe_objects`]), and the `DEBUG` counters
//! (`vsc_new`, `vsc_count`, `vsc_destroy`, [`crate::Host::new_counters`]).
//!
//! Dynamic backends (`dyn`, `dyn_uds`) and the failing director
//! (`director`) live in [`dynamic`], on the host's runtime backend API.
//!
//! Lifecycle events go through [`event`]: temperature changes are logged,
//! `nuke_limit`/`max_esi_depth` of 42 refuse load/warm-up, a warm VCL is
//! held ([`crate::Host::hold`]) so that it cools before it is cold, and
//! `vcl_discard_delay()` keeps it cooling for a while; `cold_backend()`
//! and `cooling_backend()` have the cold event create a backend (which a
//! cold VCL may not); `fail_task_fini()` fails the end of a task.
//!
//! `bad_memory`/`total_recall` keep a SUB past its VCL; using it from
//! another VCL panics the cache process as in varnishd.
//!
//! `sweep_acl`/`time_acl` walk address ranges through an ACL
//! ([`acl_sweep`]); `vre_limit` reads `pcre2_match_limit`;
//! `vcl_prevent_cold`/`vcl_allow_cold` take and release a hold on the VCL
//! ([`crate::Host::hold`]).
//!
//! `PRIV_TOP` state is kept in the request tree's shared store
//! ([`Context::top_privs`]), seen by the top request and its ESI includes.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use lacquer_vcl::exec::{Context, LogKind, Value, WsKind};

mod acl_sweep;
mod dynamic;

use crate::args::{Args, lossy, string};
use crate::{AnyObj, ClassImpl, Env, FuncImpl, MethodImpl, ModuleImpl, Obj, this};

const DECL: &str = r#"
$Module debug
$Function STRING author(ENUM { phk, des, kristian, mithrandir } person=phk, ENUM { phk, slink, geoff } someone=phk)
$Function STRING test_priv_task(PRIV_TASK, STRING s="")
$Function STRING test_priv_top(PRIV_TOP, STRING)
$Restrict client
$Object obj(STRING string="default", ENUM { one, two, three } number=one)
$Method VOID .enum(ENUM { phk, des, kristian, mithrandir, martin })
$Method VOID .obj()
$Method STRING .string()
$Method STRING .number()
$Method STRING .foo(STRING why)
$Method STRING .bar(STRING why)
$Method TIME .date()
$Method STRING .test_priv_task(STRING s="")
$Method STRING .test_priv_top(STRING s="")
$Method VOID .test_priv_call(PRIV_CALL)
$Method VOID .test_priv_vcl(PRIV_VCL)
$Function STRING argtest(STRING one, REAL two=2, STRING three="3", STRING comma=",", INT four=4, [STRING opt])
$Function VOID fail()
$Function BOOL fail2()
$Function ACL null_acl()
$Function ACL acl(ACL acl)
$Object aclobj(ACL)
$Method ACL .get()
$Function BOOL match_acl(ACL acl, IP ip)
$Function VOID call(SUB)
$Function STRING check_call(SUB)
$Object caller(SUB)
$Method VOID .call()
$Method SUB .xsub()
$Function VOID bad_memory(SUB)
$Function SUB total_recall()
$Function VOID test_probe(PROBE probe, PROBE same=0)
$Object concat(STRANDS)
$Method STRING .get()
$Function STRING concatenate(STRANDS)
$Function STRING collect(STRANDS)
$Function VOID sethdr(HEADER, STRANDS)
$Function STRANDS return_strands(STRANDS strand)
$Function VOID store_ip(IP)
$Restrict client backend
$Function IP get_ip()
$Function REGEX just_return_regex(REGEX)
$Restrict client backend
$Function STRING re_quote(STRING)
$Function STRING priv_task_with_option(PRIV_TASK priv, [STRING opt])
$Function BOOL validhdr(STRANDS)
$Object obj_opt(PRIV_CALL, PRIV_VCL, PRIV_TASK, [STRING s], [BOOL b])
$Method STRING .meth_opt(PRIV_CALL, PRIV_VCL, PRIV_TASK, [STRING s], [BOOL b])
$Function STRING client_ip()
$Restrict client backend
$Function STRING client_port()
$Restrict client backend
$Function DURATION priv_perf(INT size, INT rounds=10000)
$Function BYTES stk()
$Function VOID sndbuf(BYTES sndbuf)
$Restrict client
$Function VOID vcl_discard_delay(PRIV_VCL, DURATION)
$Function VOID fail_task_fini()
$Function VOID ok_task_fini()
$Object dyn(STRING addr, STRING port, PROBE probe=0, BOOL ssl=0, BOOL ssl_sni=1, BOOL ssl_verify_peer=1, BOOL ssl_verify_host=0, [STRING ssl_ca], [STRING certificate])
$Method BACKEND .backend()
$Method VOID .refresh(STRING addr, STRING port, PROBE probe=0, BOOL ssl=0, BOOL ssl_sni=1, BOOL ssl_verify_peer=1, BOOL ssl_verify_host=0, [STRING ssl_ca], [STRING certificate])
$Object dyn_uds(STRING path)
$Method BACKEND .backend()
$Method VOID .refresh(STRING path)
$Object director()
$Method BACKEND .fail()
$Function VOID catflap(ENUM {miss, first, last} type)
$Function VOID register_obj_events(PRIV_VCL)
$Function VOID cold_backend(PRIV_VCL)
$Function VOID cooling_backend(PRIV_VCL)
$Function VOID vsc_new()
$Function VOID vsc_count(INT val = 1)
$Function VOID vsc_destroy()
$Function VOID rot52(HTTP hdr)
$Function VOID test_priv_call(PRIV_CALL)
$Function VOID test_priv_vcl(PRIV_VCL)
$Function VOID test_priv_task_get()
$Function BLOB sweep_acl(ACL acl, IP ip0, IP ip1, INT step=1)
$Function DURATION time_acl(ACL acl, IP ip0, IP ip1, INT step=1, INT rounds=1000)
$Function INT vre_limit()
$Function VOID vcl_prevent_cold(PRIV_VCL)
$Function VOID vcl_allow_cold(PRIV_VCL)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("author", author as FuncImpl),
        ("test_priv_task", test_priv_task),
        ("test_priv_top", test_priv_top),
        ("argtest", argtest),
        ("fail", fail),
        ("fail2", fail),
        ("null_acl", null_acl),
        ("acl", first_arg),
        ("match_acl", match_acl),
        ("call", call),
        ("check_call", check_call),
        ("bad_memory", bad_memory),
        ("total_recall", total_recall),
        ("test_probe", test_probe),
        ("concatenate", concatenate),
        ("collect", collect),
        ("sethdr", sethdr),
        ("return_strands", return_strands),
        ("store_ip", store_ip),
        ("get_ip", get_ip),
        ("just_return_regex", first_arg),
        ("re_quote", re_quote),
        ("priv_task_with_option", priv_task_with_option),
        ("validhdr", validhdr),
        ("client_ip", client_ip),
        ("client_port", client_port),
        ("priv_perf", priv_perf),
        ("stk", stk),
        ("sndbuf", sndbuf),
        ("vcl_discard_delay", vcl_discard_delay),
        ("fail_task_fini", fail_task_fini),
        ("ok_task_fini", ok_task_fini),
        ("catflap", catflap),
        ("register_obj_events", register_obj_events),
        ("cold_backend", cold_backend),
        ("cooling_backend", cooling_backend),
        ("vsc_new", vsc_new),
        ("vsc_count", vsc_count),
        ("vsc_destroy", vsc_destroy),
        ("rot52", rot52),
        ("test_priv_call", test_priv_call),
        ("test_priv_vcl", test_priv_vcl),
        ("test_priv_task_get", test_priv_task_get),
        ("sweep_acl", acl_sweep::sweep_acl),
        ("time_acl", acl_sweep::time_acl),
        ("vre_limit", vre_limit),
        ("vcl_prevent_cold", vcl_prevent_cold),
        ("vcl_allow_cold", vcl_allow_cold),
    ],
    classes: &[
        ClassImpl {
            name: "obj",
            ctor: new_obj,
            methods: &[
                ("enum", obj_enum as MethodImpl),
                ("obj", obj_obj),
                ("string", obj_string),
                ("number", obj_number),
                ("foo", obj_foo),
                ("bar", obj_foo),
                ("date", obj_date),
                ("test_priv_task", obj_priv_task),
                ("test_priv_top", obj_priv_top),
                ("test_priv_call", obj_priv_call),
                ("test_priv_vcl", obj_priv_vcl),
            ],
        },
        ClassImpl {
            name: "aclobj",
            ctor: new_aclobj,
            methods: &[("get", aclobj_get as MethodImpl)],
        },
        ClassImpl {
            name: "caller",
            ctor: new_caller,
            methods: &[("call", caller_call as MethodImpl), ("xsub", caller_xsub)],
        },
        ClassImpl {
            name: "obj_opt",
            ctor: new_obj_opt,
            methods: &[("meth_opt", meth_opt as MethodImpl)],
        },
        ClassImpl {
            name: "concat",
            ctor: new_concat,
            methods: &[("get", concat_get as MethodImpl)],
        },
        ClassImpl {
            name: "dyn",
            ctor: dynamic::new_dyn,
            methods: &[
                ("backend", dynamic::backend as MethodImpl),
                ("refresh", dynamic::refresh),
            ],
        },
        ClassImpl {
            name: "dyn_uds",
            ctor: dynamic::new_dyn_uds,
            methods: &[
                ("backend", dynamic::backend as MethodImpl),
                ("refresh", dynamic::refresh_uds),
            ],
        },
        ClassImpl {
            name: "director",
            ctor: dynamic::new_director,
            methods: &[("fail", dynamic::director_fail as MethodImpl)],
        },
    ],
    event: Some(event),
    filters: &[
        crate::BodyFilter {
            name: "rot13",
            fetch: true,
            deliver: true,
            new: || Box::new(Rot13),
        },
        crate::BodyFilter {
            name: "debug.pedantic",
            fetch: false,
            deliver: true,
            new: || Box::new(Pedantic { ended: false }),
        },
    ],
};

/// The test filter `rot13`: rotates ASCII letters by 13 places, so that
/// applying it twice gives the body back.
struct Rot13;

impl crate::FilterStage for Rot13 {
    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        out.extend(input.iter().map(|&b| match b {
            b'a'..=b'z' => b'a' + (b - b'a' + 13) % 26,
            b'A'..=b'Z' => b'A' + (b - b'A' + 13) % 26,
            other => other,
        }));
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<u8>) -> Result<(), String> {
        Ok(())
    }
}

/// The test filter `debug.pedantic`: passes the body through unchanged
/// and fails a delivery that goes on after its end or ends twice, so that
/// the suite can check the filters before it keep to the protocol.
struct Pedantic {
    ended: bool,
}

impl crate::FilterStage for Pedantic {
    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        if self.ended {
            return Err("debug.pedantic: body bytes after the end".into());
        }
        out.extend_from_slice(input);
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<u8>) -> Result<(), String> {
        if std::mem::replace(&mut self.ended, true) {
            return Err("debug.pedantic: the body ended twice".into());
        }
        Ok(())
    }
}

type R = Result<Value, String>;

/// Logs every temperature change as `Debug` records, and refuses to load
/// when `nuke_limit` is 42 or to warm up when `max_esi_depth` is 42, so
/// that the suite can watch events and their failures.
///
/// As varnishd's, a warm VCL is held from going cold (unless
/// `cold_backend()` asked for a plain cold one), so that going cold
/// passes through cooling; the cold event lets go at once, or after the
/// delay `vcl_discard_delay()` set. `cold_backend()` and
/// `cooling_backend()` make the cold event create a backend, which a cold
/// VCL must not (the cache panics) and a cooling one cannot (it gets
/// none).
fn event(env: &Env, ev: crate::VclEvent, cx: &dyn crate::EventCtx) -> Result<(), String> {
    let is_42 = |p: &str| cx.param(p).is_some_and(|v| v.trim() == "42");
    match ev {
        crate::VclEvent::Load => {
            LOADS.fetch_add(1, Ordering::AcqRel);
            env.vcl_state().insert(0, PrivVcl("FOO"));
            env.vcl_state()
                .insert(0, VclName(cx.vcl_name().to_string()));
            if is_42("nuke_limit") {
                return Err("nuke_limit is not the answer.".into());
            }
            Ok(())
        }
        crate::VclEvent::Discard => {
            // The counters outlive VCLs, until the last one importing the
            // vmod goes.
            let before = LOADS
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    Some(n.saturating_sub(1))
                })
                .unwrap_or(0);
            if before == 1 {
                vsc().take();
            }
            Ok(())
        }
        crate::VclEvent::Warm if is_42("max_esi_depth") => {
            Err("max_esi_depth is not the answer.".into())
        }
        crate::VclEvent::Warm => {
            cx.log_debug(&format!("{}: {}", cx.vcl_name(), ev.name()));
            let plain_cold = env.vcl_state().get::<ColdBackend>(0).is_some();
            if !plain_cold {
                let id = env
                    .host
                    .hold(&format!("vmod-debug ref on {}", cx.vcl_name()));
                env.vcl_state().insert(0, WarmHold(id));
            }
            Ok(())
        }
        crate::VclEvent::Cold => {
            cx.log_debug(&format!("{}: {}", cx.vcl_name(), ev.name()));
            let (cold, cooling) = {
                let st = env.vcl_state();
                (
                    st.get::<ColdBackend>(0).is_some(),
                    st.get::<CoolingBackend>(0).is_some(),
                )
            };
            if cold || cooling {
                doomed_backend(env, cx);
            }
            let hold = env.vcl_state().remove::<WarmHold>(0);
            let delay = env.vcl_state().get::<DiscardDelay>(0).map(|d| d.0);
            match (hold, delay) {
                (None, _) => {}
                (Some(WarmHold(id)), None) => env.host.release(id),
                // Keep the VCL cooling for the delay vcl_discard_delay() set.
                (Some(WarmHold(id)), Some(d)) => {
                    let host = env.host.clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(std::time::Duration::from_secs_f64(d));
                        host.release(id);
                    });
                }
            }
            Ok(())
        }
    }
}

/// The hold a warm VCL keeps on itself (released by the cold event).
struct WarmHold(u64);
/// Set by `cold_backend()`: no hold while warm, so the VCL goes straight
/// to cold, and the cold event creates a backend.
struct ColdBackend;
/// Set by `cooling_backend()`: the cold event, while the VCL is still
/// cooling, tries to create a backend.
struct CoolingBackend;

/// Creates a backend from the cold event, as varnishd's test vmod does
/// to check that only warm VCLs get new backends. The host refuses (a
/// cooling VCL) or panics the cache (a cold one); a backend it does make
/// is retired at once and reported as an error.
fn doomed_backend(env: &Env, cx: &dyn crate::EventCtx) {
    let spec = crate::DynamicBackend {
        name: "doomed".into(),
        endpoint: crate::Endpoint::Unix("/".into()),
        host_header: None,
        probe: None,
        tls: None,
    };
    if let Ok(be) = env.host.new_backend(spec) {
        env.host.delete_backend(&be);
        let msg = format!(
            "vmod debug: {} got a backend while going cold",
            cx.vcl_name()
        );
        cx.log(LogKind::Error, msg.as_bytes());
    }
}

/// The loaded VCL's name, kept at the load event for the hold
/// `vcl_prevent_cold()` takes.
struct VclName(String);
/// The hold `vcl_prevent_cold()` took, until `vcl_allow_cold()`.
struct ColdHold(u64);

/// `vcl_prevent_cold()`: holds the VCL back from going cold (it stays
/// `cooling`) until `vcl_allow_cold()`. varnishd counts this reference
/// as a busy task instead (`vcl.list` shows `busy 1`, and the VCL may be
/// warmed again meanwhile); Lacquer's hosts have no busy count a vmod can
/// take, so the hold is the vmod reference `vcl.list` shows as `cooling`.
/// A second call without `vcl_allow_cold()` (an assertion in varnishd)
/// fails the task.
fn vcl_prevent_cold(env: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    let mut st = env.vcl_state();
    if st.get::<ColdHold>(0).is_some() {
        return Err("debug.vcl_prevent_cold(): the VCL is already held".into());
    }
    let name = st.get::<VclName>(0).map_or("", |n| n.0.as_str());
    let id = env.host.hold(&format!("vmod-debug ref on {name}"));
    st.insert(0, ColdHold(id));
    Ok(Value::Null)
}

/// `vcl_allow_cold()`: lets go of the hold `vcl_prevent_cold()` took.
fn vcl_allow_cold(env: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    let Some(ColdHold(id)) = env.vcl_state().remove::<ColdHold>(0) else {
        return Err("debug.vcl_allow_cold(): no debug.vcl_prevent_cold() to undo".into());
    };
    env.host.release(id);
    Ok(Value::Null)
}

/// `vre_limit()`: the match limit regexes run with (`pcre2_match_limit`).
fn vre_limit(env: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    let v = env
        .host
        .param("pcre2_match_limit")
        .ok_or("debug.vre_limit(): parameter pcre2_match_limit is not available")?;
    v.trim()
        .parse::<i64>()
        .map(Value::Int)
        .map_err(|_| format!("debug.vre_limit(): pcre2_match_limit is {v:?}, not a number"))
}

fn cold_backend(env: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    env.vcl_state().insert(0, ColdBackend);
    Ok(Value::Null)
}

fn cooling_backend(env: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    env.vcl_state().insert(0, CoolingBackend);
    Ok(Value::Null)
}

/// The vmod's `PRIV_TASK` (shared by every function of the vmod, as in
/// Varnish where the private pointer is per vmod and task).
struct TaskPriv(Option<Bytes>);
/// The vmod's `PRIV_TOP`.
struct TopPriv(Option<Bytes>);
/// One `obj` instance's task state, keyed by the instance id.
struct ObjTask(Bytes);
/// One `obj` instance's top-request state, keyed by the instance id.
struct ObjTop(Bytes);
/// The address kept by `store_ip()` for `get_ip()`.
struct StoredIp(std::net::SocketAddr);

fn author(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let who = match a.enum_(0)?.unwrap_or("phk") {
        "phk" => "Poul-Henning",
        "des" => "Dag-Erling",
        "kristian" => "Kristian",
        "mithrandir" => "Tollef",
        other => return Err(format!("debug.author(): unknown person '{other}'")),
    };
    Ok(Value::str(who))
}

/// How varnishd's `%p` prints a value's address: `(nil)` for none.
fn addr(v: Option<&Bytes>) -> String {
    v.map_or_else(|| "(nil)".to_string(), |b| format!("{:p}", b.as_ptr()))
}

/// Empty or NULL reads the state; anything else starts it or appends to it
/// with a space. Each call logs a `Debug` record naming the state's slot and
/// value addresses, and what it did; the task's end logs
/// `priv_task_fini(<value>)`.
fn test_priv_task(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let s = a.str_or_empty(0)?;
    let privs = ctx.privs();
    let p = privs.get_or_insert_with(0, || TaskPriv(None));
    let slot = format!("{:p}", &*p);
    let what = match (s.is_empty(), p.0.take()) {
        (true, v) => {
            p.0 = v;
            "exists"
        }
        (false, None) => {
            p.0 = Some(Bytes::copy_from_slice(s));
            "new"
        }
        (false, Some(old)) => {
            p.0 = Some([&old[..], b" ", s].concat().into());
            "update"
        }
    };
    let v = p.0.clone();
    if v.is_some() {
        privs.set_fini::<TaskPriv>(0, |p, log| {
            let msg = format!("priv_task_fini({})", addr(p.0.as_ref()));
            log(LogKind::Debug, msg.as_bytes());
        });
    }
    let msg = format!("test_priv_task({slot}) = {} ({what})", addr(v.as_ref()));
    ctx.log(LogKind::Debug, msg.as_bytes());
    Ok(Value::Str(v.unwrap_or_default()))
}

/// The top request's `PRIV_TOP` store; an error outside client tasks.
fn top_privs(ctx: &mut dyn Context) -> Result<lacquer_vcl::exec::privs::SharedPrivs, String> {
    ctx.top_privs()
        .ok_or_else(|| "no priv_top outside of client context".to_string())
}

/// The first call of the request tree sets the value; later calls, from
/// the request or its ESI includes, return it.
fn test_priv_top(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let s = a.str_or_empty(0)?;
    let top = top_privs(ctx)?;
    let mut privs = top
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let p = privs.get_or_insert_with(0, || TopPriv(None));
    let v = p.0.get_or_insert_with(|| Bytes::copy_from_slice(s)).clone();
    privs.set_fini::<TopPriv>(0, |p, log| {
        let msg = format!("priv_top_fini({})", addr(p.0.as_ref()));
        log(LogKind::Debug, msg.as_bytes());
    });
    Ok(Value::Str(v))
}

/// The first value given in the task sticks; no value reads it.
fn priv_task_with_option(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let opt = a.str(0)?;
    let p = ctx.privs().get_or_insert_with(0, || TaskPriv(None));
    if p.0.is_none()
        && let Some(o) = opt
    {
        p.0 = Some(Bytes::copy_from_slice(o));
    }
    Ok(Value::Str(p.0.clone().unwrap_or_default()))
}

/// C's `%g`: six significant digits, trailing zeros dropped, exponent form
/// for very small or large magnitudes.
pub(crate) fn fmt_g(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else if v.is_infinite() {
            if v > 0.0 { "inf" } else { "-inf" }.into()
        } else {
            "0".into()
        };
    }
    let exp = v.abs().log10().floor() as i32;
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if (-4..6).contains(&exp) {
        let decimals = (5 - exp).max(0) as usize;
        trim(format!("{v:.decimals$}"))
    } else {
        let m = v / 10f64.powi(exp);
        let mant = trim(format!("{m:.5}"));
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    }
}

fn argtest(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let opt = a.str(5)?;
    Ok(string(format!(
        "{} {} {} {} {} {} {}",
        lossy(a.str_or_empty(0)?),
        fmt_g(a.real(1)?.unwrap_or(2.0)),
        lossy(a.str_or_empty(2)?),
        lossy(a.str_or_empty(3)?),
        a.int(4)?.unwrap_or(4),
        u8::from(a.given(5)),
        opt.map_or("<undef>".into(), lossy),
    )))
}

/// The stack the running VCL uses, in bytes (0 outside VCL), so that a
/// test can watch it grow with nested `call`s.
fn stk(_: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    let depth = lacquer_vcl::exec::interp::stack_depth().unwrap_or(0);
    Ok(Value::Bytes(i64::try_from(depth).unwrap_or(0)))
}

fn fail(_: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    Err("Forced failure".into())
}

/// How long `vcl_discard_delay()` keeps the VCL cooling after it is told
/// to go cold.
struct DiscardDelay(f64);

fn vcl_discard_delay(env: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let d = a.duration(0)?.unwrap_or(0.0);
    if d.is_finite() && d > 0.0 {
        env.vcl_state().insert(0, DiscardDelay(d));
    }
    Ok(Value::Null)
}

/// Set by `ok_task_fini()`: the task may end quietly after all.
struct FiniAllowed;

/// Makes the end of the task fail, unless `ok_task_fini()` is called
/// before it ends.
fn fail_task_fini(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    ctx.privs().remove::<FiniAllowed>(0);
    ctx.privs()
        .on_finish(Box::new(|p| match p.get::<FiniAllowed>(0) {
            Some(_) => Ok(()),
            None => Err("thou shalt not fini".into()),
        }));
    Ok(Value::Null)
}

fn ok_task_fini(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    ctx.privs().insert(0, FiniAllowed);
    Ok(Value::Null)
}

fn null_acl(_: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Null)
}

fn first_arg(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(a.get(0).cloned().unwrap_or(Value::Null))
}

/// `same`, when given, must be the same probe as `probe`.
fn test_probe(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let probe = a.get(0);
    match a.get(1) {
        None | Some(Value::Null) => Ok(Value::Null),
        Some(Value::Str(s)) if s.is_empty() => Ok(Value::Null),
        Some(same) if Some(same) == probe => Ok(Value::Null),
        Some(_) => Err("debug.test_probe(): the two probes differ".into()),
    }
}

/// The strands put together in the workspace (varnishd's
/// `VRT_StrandsWS`): NULL, the workspace marked overflowed, when they do
/// not fit. A single string is used in place.
fn concatenate(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let s = a.bytes(0)?.unwrap_or_default();
    if !s.is_empty()
        && let Some(ws) = ctx.workspace(WsKind::Task)
        && !ws.alloc(s.len() as u64 + 1)
    {
        return Ok(Value::Null);
    }
    Ok(Value::Str(s))
}

/// The strands as they came, logged as one `Debug` record (varnishd's
/// `VSLbs`): nothing is taken from the workspace.
fn return_strands(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let s = a.bytes(0)?.unwrap_or_default();
    ctx.log(LogKind::Debug, &s);
    Ok(Value::Str(s))
}

/// As `concatenate`, but one that does not fit fails the task
/// (varnishd's `VRT_STRANDS_string`).
fn collect(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let s = a.bytes(0)?.unwrap_or_default();
    if !s.is_empty()
        && let Some(ws) = ctx.workspace(WsKind::Task)
        && !ws.alloc(s.len() as u64 + 1)
    {
        return Err("Workspace overflow".to_string());
    }
    Ok(Value::Str(s))
}

fn sethdr(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let (which, name) = a.header(0)?;
    let v = a.str_or_empty(1)?;
    ctx.set_header(which, name, v)?;
    Ok(Value::Null)
}

fn store_ip(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let ip = a.ip(0)?.ok_or("debug.store_ip(): the IP is NULL")?;
    ctx.privs().insert(0, StoredIp(ip));
    Ok(Value::Null)
}

/// "Encrypts" a message with quad-ROT13: marks it with `Encrypted: ROT52`
/// (the text is its own ciphertext), as varnishd's test vmod does.
fn rot52(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let which = a.http(0)?;
    let name = lacquer_vcl::exec::HeaderName::new("Encrypted");
    ctx.set_header(which, &name, b"ROT52")?;
    Ok(Value::Null)
}

/// What `test_priv_call()` keeps: set on the first call, found again by
/// the next ones of the task.
struct CallPriv(&'static str);

/// Checks the task's `CallPriv` under `slot` (`u64::MAX` for the function, an
/// object's id for its method).
fn check_priv_call(ctx: &mut dyn Context, slot: u64) -> R {
    let p = ctx.privs().get_or_insert_with(slot, || CallPriv("BAR"));
    if p.0 != "BAR" {
        return Err(format!("debug: PRIV_CALL holds {:?}, not BAR", p.0));
    }
    Ok(Value::Null)
}

fn test_priv_call(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    check_priv_call(ctx, u64::MAX)
}

/// What the load event leaves in the VCL's state for `test_priv_vcl()`.
struct PrivVcl(&'static str);

fn check_priv_vcl(env: &Env) -> R {
    match env.vcl_state().get::<PrivVcl>(0) {
        Some(PrivVcl("FOO")) => Ok(Value::Null),
        Some(PrivVcl(other)) => Err(format!("debug: PRIV_VCL holds {other:?}, not FOO")),
        None => Err("debug: PRIV_VCL was not set by the load event".into()),
    }
}

fn test_priv_vcl(env: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    check_priv_vcl(env)
}

/// varnishd asserts that no task state is kept under a NULL key; task
/// state here is keyed by slot numbers, so there is never one.
fn test_priv_task_get(_: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Null)
}

fn get_ip(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(ctx
        .privs()
        .get::<StoredIp>(0)
        .map_or(Value::Null, |s| Value::Ip(s.0)))
}

/// Quotes `s` for a literal regex match: `\Q...\E`, with each `\E` inside
/// closed before its `E` so the quoting cannot be ended early.
pub(crate) fn re_quote_bytes(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 4);
    let mut rest = s;
    while !rest.is_empty() {
        out.extend_from_slice(b"\\Q");
        match rest.windows(2).position(|w| w == b"\\E") {
            Some(i) => {
                out.extend_from_slice(&rest[..=i]);
                out.extend_from_slice(b"\\EE");
                rest = &rest[i + 2..];
            }
            None => {
                out.extend_from_slice(rest);
                out.extend_from_slice(b"\\E");
                rest = b"";
            }
        }
    }
    out
}

fn re_quote(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(string(re_quote_bytes(a.str_or_empty(0)?)))
}

/// A valid header field value (RFC 9110 5.5): no control characters
/// other than horizontal tab.
pub(crate) fn valid_header_value(v: &[u8]) -> bool {
    v.iter().all(|&c| c == b'\t' || (c >= 0x20 && c != 0x7f))
}

fn validhdr(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    Ok(Value::Bool(valid_header_value(a.str_or_empty(0)?)))
}

/// The session's client address (`client.ip`).
fn client_addr(ctx: &dyn Context) -> Result<std::net::SocketAddr, String> {
    match ctx.get(lacquer_vcl::vars::VarId::ClientIp)? {
        Value::Ip(a) => Ok(a),
        other => Err(format!(
            "debug.client_ip(): client.ip is {}, not an IP",
            other.type_name()
        )),
    }
}

fn client_ip(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(string(client_addr(ctx)?.ip().to_string()))
}

fn client_port(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(string(client_addr(ctx)?.port().to_string()))
}

/// Times `rounds` lookups of each of `size` per-task private values; the
/// average time per lookup in nanoseconds, returned as that many seconds
/// (as Varnish does).
/// Sets the client socket's send buffer (the server logs `SO_SNDBUF`).
fn sndbuf(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let size = a.bytes_val(0)?.unwrap_or(0).max(0) as u64;
    ctx.tcp_set(lacquer_vcl::exec::TcpOp::SendBuffer(size))?;
    Ok(Value::Null)
}

fn priv_perf(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let size = a.int(0)?.unwrap_or(0);
    let rounds = a.int(1)?.unwrap_or(10000);
    if !(1..=1_000_000).contains(&size) || !(1..=100_000_000).contains(&rounds) {
        return Err(format!(
            "debug.priv_perf(): size {size} and rounds {rounds} must be positive (size <= 1000000, rounds <= 100000000)"
        ));
    }
    let mut privs = lacquer_vcl::exec::privs::TaskPrivs::new();
    for k in 0..size as u64 {
        privs.insert(k, k);
    }
    let start = std::time::Instant::now();
    let mut sum = 0u64;
    for _ in 0..rounds {
        for k in 0..size as u64 {
            sum = sum.wrapping_add(*std::hint::black_box(&privs).get::<u64>(k).unwrap_or(&0));
        }
    }
    std::hint::black_box(sum);
    let ns = start.elapsed().as_nanos() as f64 / (size * rounds) as f64;
    Ok(Value::Duration(ns))
}

/// `debug.catflap()`'s hook into the request's lookup: `first` takes
/// the newest candidate whatever its freshness, `miss` fetches anew even
/// with a fresh object there, `last` takes the oldest candidate.
enum Catflap {
    First,
    Miss,
    /// The last candidate seen so far.
    Last(Option<usize>),
}

impl lacquer_vcl::exec::LookupHook for Catflap {
    fn candidate(&mut self, index: usize) -> lacquer_vcl::exec::LookupVerdict {
        use lacquer_vcl::exec::LookupVerdict as V;
        match self {
            Catflap::First => V::Hit,
            Catflap::Miss => V::Miss,
            Catflap::Last(last) => {
                *last = Some(index);
                V::Continue
            }
        }
    }

    fn finish(&mut self) -> Option<usize> {
        match self {
            Catflap::Last(last) => last.take(),
            Catflap::First | Catflap::Miss => None,
        }
    }
}

/// What varnishd's hook record (`struct vcf`) takes of the workspace.
const CATFLAP_WS: u64 = 24;

fn catflap(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let flap = match a.enum_(0)? {
        Some("first") => Catflap::First,
        Some("miss") => Catflap::Miss,
        Some("last") => Catflap::Last(None),
        other => {
            return Err(format!(
                "debug.catflap(): unknown type {}",
                other.unwrap_or("(none)")
            ));
        }
    };
    // As varnishd, the hook's record comes out of the client workspace.
    if let Some(ws) = ctx.workspace(WsKind::Task)
        && !ws.alloc(CATFLAP_WS)
    {
        return Err("WS_Alloc failed in debug.catflap()".into());
    }
    ctx.set_lookup_hook(Box::new(flap))
        .map_err(|e| format!("debug.catflap(): {e}"))?;
    Ok(Value::Null)
}

/// The object event subscription `register_obj_events()` took for its
/// VCL: it ends with the VCL (logged by the PRIV_VCL fini hook), or when
/// the VCL's state is dropped without one.
struct ObjEvents {
    host: std::sync::Arc<dyn crate::Host>,
    id: u64,
}

impl Drop for ObjEvents {
    fn drop(&mut self) {
        self.host.unsubscribe_objects(self.id);
    }
}

/// `register_obj_events()`: logs every object entering and leaving the
/// cache (`Object Event: insert|expire 0x<id>`) while the VCL lives.
fn register_obj_events(env: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    let mut state = env.vcl_state();
    if state.get::<ObjEvents>(0).is_some() {
        return Err("debug.register_obj_events(): this VCL is subscribed already".into());
    }
    let host = env.host.clone();
    let id = env
        .host
        .subscribe_objects(std::sync::Arc::new(move |ev, obj| {
            let what = match ev {
                crate::ObjectEvent::Insert => "insert",
                crate::ObjectEvent::Expire => "expire",
            };
            host.log(LogKind::Debug, &format!("Object Event: {what} 0x{obj:x}"));
        }))?;
    state.insert(
        0,
        ObjEvents {
            host: env.host.clone(),
            id,
        },
    );
    state.set_fini::<ObjEvents>(0, |_, log| {
        log(LogKind::Debug, b"Unsubscribed from Object Events");
    });
    drop(state);
    env.host.log(LogKind::Debug, "Subscribed to Object Events");
    Ok(Value::Null)
}

/// How many VCLs importing the vmod were loaded and not discarded yet.
static LOADS: AtomicUsize = AtomicUsize::new(0);

/// The `DEBUG` counters `vsc_new()` published: one set for the process,
/// as varnishd's vmod keeps it in a static, whichever VCL made it.
fn vsc() -> std::sync::MutexGuard<'static, Option<Box<dyn crate::Counters>>> {
    static VSC: std::sync::Mutex<Option<Box<dyn crate::Counters>>> = std::sync::Mutex::new(None);
    VSC.lock().unwrap_or_else(|e| e.into_inner())
}

/// `vsc_new()`: publishes the `DEBUG` counters, unless they are out.
fn vsc_new(env: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    let mut vsc = vsc();
    if vsc.is_none() {
        let set = env
            .host
            .new_counters("DEBUG", "")
            .map_err(|e| format!("debug.vsc_new(): {e}"))?;
        *vsc = Some(set);
    }
    Ok(Value::Null)
}

/// `vsc_count(val)`: adds to `DEBUG.count`.
fn vsc_count(_: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let val = a.int(0)?.unwrap_or(1);
    let vsc = vsc();
    let set = vsc
        .as_ref()
        .ok_or("debug.vsc_count(): no counters to count in (call debug.vsc_new() first)")?;
    // A negative value counts down, as varnishd's unsigned addition.
    set.add(0, val as u64)
        .map_err(|e| format!("debug.vsc_count(): {e}"))?;
    Ok(Value::Null)
}

/// `vsc_destroy()`: withdraws the `DEBUG` counters.
fn vsc_destroy(_: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    vsc().take();
    Ok(Value::Null)
}

/// An `obj` instance.
struct DebugObj {
    id: u64,
    name: String,
    string: Bytes,
    number: Value,
}

/// Instance ids, unique in the process: keys of the per-instance state.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn new_obj(_: &Env, _: &mut dyn Context, name: &str, a: &Args<'_>) -> Result<Obj, String> {
    let string = a
        .bytes(0)?
        .unwrap_or_else(|| Bytes::from_static(b"default"));
    if &string[..] == b"fail" {
        return Err(format!("{name}: failing as requested"));
    }
    Ok(std::sync::Arc::new(DebugObj {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        name: name.to_string(),
        string,
        number: Value::str(a.enum_(1)?.unwrap_or("one").to_string()),
    }))
}

fn obj_enum(_: &Env, o: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    let o = this::<DebugObj>(o);
    match a.enum_(0)? {
        Some("martin") => Ok(Value::Null),
        other => Err(format!(
            "{}.enum(): expected martin, got {}",
            o.name,
            other.unwrap_or("nothing")
        )),
    }
}

fn obj_obj(_: &Env, _: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Null)
}

fn obj_string(_: &Env, o: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Str(this::<DebugObj>(o).string.clone()))
}

fn obj_number(_: &Env, o: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(this::<DebugObj>(o).number.clone())
}

fn obj_foo(_: &Env, _: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::str("BOO"))
}

fn obj_date(_: &Env, _: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Time(21.4))
}

/// Empty reads the instance's task state (empty if none); anything else
/// replaces it. Each call logs a `Debug` record (`<name>.priv_task() = …`)
/// with the slot's and value's addresses; the task's end logs
/// `obj_priv_task_fini(<value>)`.
fn obj_priv_call(_: &Env, o: &AnyObj, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let o = this::<DebugObj>(o);
    check_priv_call(ctx, o.id)
}

fn obj_priv_vcl(env: &Env, _: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    check_priv_vcl(env)
}

fn obj_priv_task(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let o = this::<DebugObj>(o);
    let s = a.str_or_empty(0)?;
    let privs = ctx.privs();
    let (msg, v) = if s.is_empty() {
        match privs.get::<ObjTask>(o.id) {
            None => (format!("{}.priv_task() = NULL", o.name), Bytes::new()),
            Some(p) => (
                format!(
                    "{}.priv_task() = {:p} .priv = {} (\"{}\")",
                    o.name,
                    p,
                    addr(Some(&p.0)),
                    lossy(&p.0)
                ),
                p.0.clone(),
            ),
        }
    } else {
        let v = Bytes::copy_from_slice(s);
        let what = match privs.get_mut::<ObjTask>(o.id) {
            Some(p) => {
                p.0 = v.clone();
                "update"
            }
            None => {
                privs.insert(o.id, ObjTask(v.clone()));
                "new"
            }
        };
        privs.set_fini::<ObjTask>(o.id, |p, log| {
            let msg = format!("obj_priv_task_fini({})", addr(Some(&p.0)));
            log(LogKind::Debug, msg.as_bytes());
        });
        let p = privs.get::<ObjTask>(o.id).expect("just stored");
        (
            format!(
                "{}.priv_task() = {:p} .priv = {} (\"{}\") [{what}]",
                o.name,
                p,
                addr(Some(&v)),
                lossy(&v)
            ),
            v,
        )
    };
    ctx.log(LogKind::Debug, msg.as_bytes());
    Ok(Value::Str(v))
}

/// As `.test_priv_task()`, for the top request's state.
fn obj_priv_top(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let o = this::<DebugObj>(o);
    let s = a.str_or_empty(0)?;
    // As varnishd's vmod_debug: the method names the object when it fails.
    let top = ctx.top_privs().ok_or_else(|| {
        format!(
            "{}.priv_top() can only be used in client VCL context",
            o.name
        )
    })?;
    let mut privs = top
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if s.is_empty() {
        let v = privs.get::<ObjTop>(o.id).map(|p| p.0.clone());
        return Ok(Value::Str(v.unwrap_or_default()));
    }
    let v = Bytes::copy_from_slice(s);
    privs.insert(o.id, ObjTop(v.clone()));
    Ok(Value::Str(v))
}

/// An `aclobj` instance: the ACL (or NULL) it was built with.
struct AclObj(Value);

fn new_aclobj(_: &Env, _: &mut dyn Context, _: &str, a: &Args<'_>) -> Result<Obj, String> {
    Ok(std::sync::Arc::new(AclObj(
        a.get(0).cloned().unwrap_or(Value::Null),
    )))
}

fn aclobj_get(_: &Env, o: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(this::<AclObj>(o).0.clone())
}

/// An ACL argument: its index in the calling program; a NULL ACL fails
/// the task as `VRT_acl_match` does.
fn acl_arg(a: &Args<'_>, i: usize) -> Result<u32, String> {
    match a.get(i) {
        Some(Value::Acl(acl)) => Ok(*acl),
        None | Some(Value::Null) => Err("Cannot match a null ACL".into()),
        Some(v) => Err(format!(
            "vmod argument {} should be ACL, got {}",
            i + 1,
            v.type_name()
        )),
    }
}

/// A SUB argument: its index in the calling program.
fn sub_arg(a: &Args<'_>, i: usize) -> Result<u32, String> {
    match a.get(i) {
        Some(Value::Sub(sub)) => Ok(*sub),
        Some(v) => Err(format!(
            "vmod argument {} should be SUB, got {}",
            i + 1,
            v.type_name()
        )),
        None => Err(format!("vmod argument {} (SUB) is missing", i + 1)),
    }
}

/// `match_acl(acl, ip)`: `ip ~ acl`, asked of the calling program.
fn match_acl(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let acl = acl_arg(a, 0)?;
    let Some(ip) = a.ip(1)? else {
        return Err("Cannot match a null IP address".into());
    };
    a.vcl().acl_match(ctx, acl, ip).map(Value::Bool)
}

/// `call(sub)`: runs the subroutine (`VRT_call`).
fn call(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let sub = sub_arg(a, 0)?;
    a.vcl().call(ctx, sub);
    Ok(Value::Null)
}

/// `check_call(sub)`: why calling the subroutine here would fail
/// (`VRT_check_call`), NULL when it would not.
fn check_call(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let sub = sub_arg(a, 0)?;
    Ok(match a.vcl().check_call(ctx, sub) {
        Some(why) => Value::Str(Bytes::from(why)),
        None => Value::Null,
    })
}

/// The SUB `bad_memory()` kept, process-wide, with the VCL it came from.
static REMEMBERED_SUB: std::sync::Mutex<Option<(u64, u32)>> = std::sync::Mutex::new(None);

/// `bad_memory(sub)`: keeps a SUB past the task (and the VCL) that gave
/// it, the misuse `total_recall()` exposes.
fn bad_memory(env: &Env, _: &mut dyn Context, a: &Args<'_>) -> R {
    let sub = sub_arg(a, 0)?;
    *REMEMBERED_SUB.lock().unwrap_or_else(|e| e.into_inner()) = Some((env.vcl_id, sub));
    Ok(Value::Null)
}

/// `total_recall()`: the SUB `bad_memory()` kept. One from another VCL is
/// what makes varnishd's cache process assert (`VPI_Call_Check`) as soon
/// as it is used; SUB values here carry no VCL of their own, so the
/// hand-over is where that panic happens.
fn total_recall(env: &Env, _: &mut dyn Context, _: &Args<'_>) -> R {
    let kept = *REMEMBERED_SUB.lock().unwrap_or_else(|e| e.into_inner());
    match kept {
        None => Ok(Value::Null),
        Some((vcl, sub)) if vcl == env.vcl_id => Ok(Value::Sub(sub)),
        Some(_) => {
            let why = "Assert error in VPI_Call_Check(): \
                       Condition(conf == ctx->vcl->conf) not true. \
                       (a SUB used outside the VCL that made it)";
            env.host.panic(why);
            Err(format!("debug.total_recall(): {why}"))
        }
    }
}

/// A `caller` instance: the subroutine it was built with (an index into
/// the program that constructed it, which is the only one running its
/// methods).
struct Caller(u32);

fn new_caller(_: &Env, _: &mut dyn Context, _: &str, a: &Args<'_>) -> Result<Obj, String> {
    Ok(std::sync::Arc::new(Caller(sub_arg(a, 0)?)))
}

fn caller_call(_: &Env, o: &AnyObj, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    a.vcl().call(ctx, this::<Caller>(o).0);
    Ok(Value::Null)
}

fn caller_xsub(_: &Env, o: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Sub(this::<Caller>(o).0))
}

/// An `obj_opt` instance: its name and optional constructor arguments.
struct ObjOpt {
    name: String,
    s: Option<Bytes>,
    b: Option<bool>,
}

/// An optional STRING and BOOL as `obj_opt` prints them.
fn opt_text(s: Option<&[u8]>, b: Option<bool>) -> (String, &'static str) {
    let s = s.map_or("*undef*".into(), |s| lossy(s).into_owned());
    let b = match b {
        None => "*undef*",
        Some(true) => "true",
        Some(false) => "false",
    };
    (s, b)
}

fn new_obj_opt(_: &Env, _: &mut dyn Context, name: &str, a: &Args<'_>) -> Result<Obj, String> {
    Ok(std::sync::Arc::new(ObjOpt {
        name: name.to_string(),
        s: a.bytes(0)?,
        b: a.bool(1)?,
    }))
}

/// `obj <name> obj_s <s> obj_b <b> met_s <s> met_b <b>`.
fn meth_opt(_: &Env, o: &AnyObj, _: &mut dyn Context, a: &Args<'_>) -> R {
    let o = this::<ObjOpt>(o);
    let (os, ob) = opt_text(o.s.as_deref(), o.b);
    let (ms, mb) = opt_text(a.str(0)?, a.bool(1)?);
    Ok(string(format!(
        "obj {} obj_s {os} obj_b {ob} met_s {ms} met_b {mb}",
        o.name
    )))
}

/// A `concat` instance: the string built by its constructor.
struct Concat(Bytes);

fn new_concat(_: &Env, _: &mut dyn Context, _: &str, a: &Args<'_>) -> Result<Obj, String> {
    Ok(std::sync::Arc::new(Concat(a.bytes(0)?.unwrap_or_default())))
}

fn concat_get(_: &Env, o: &AnyObj, _: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Str(this::<Concat>(o).0.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FilterStage;

    #[test]
    fn body_filters() {
        let mut out = Vec::new();
        Rot13
            .feed(b"Ponto Facto, Caesar Transit!", &mut out)
            .unwrap();
        assert_eq!(out, b"Cbagb Snpgb, Pnrfne Genafvg!");
        let mut back = Vec::new();
        Rot13.feed(&out, &mut back).unwrap();
        assert_eq!(back, b"Ponto Facto, Caesar Transit!");
        let mut p = Pedantic { ended: false };
        out.clear();
        p.feed(b"ab", &mut out).unwrap();
        p.finish(&mut out).unwrap();
        assert_eq!(out, b"ab");
        assert!(p.feed(b"c", &mut out).is_err());
        assert!(p.finish(&mut out).is_err());
    }

    #[test]
    fn quoting() {
        let q = |s: &[u8]| String::from_utf8(re_quote_bytes(s)).unwrap();
        assert_eq!(q(b""), "");
        assert_eq!(q(b"hello"), r"\Qhello\E");
        assert_eq!(q(br"hello\E"), r"\Qhello\\EE");
        assert_eq!(q(br"hello\Eworld"), r"\Qhello\\EE\Qworld\E");
        assert_eq!(q(br"\E"), r"\Q\\EE");
        assert_eq!(q(br"\Q"), r"\Q\Q\E");
    }

    #[test]
    fn header_values() {
        assert!(valid_header_value(b"a"));
        assert!(valid_header_value(b"a\tb c\x80"));
        assert!(!valid_header_value(b"\n\t\t\t"));
        assert!(!valid_header_value(b"a\rb"));
        assert!(!valid_header_value(b"\x7f"));
    }

    #[test]
    fn printf_g() {
        assert_eq!(fmt_g(2.0), "2");
        assert_eq!(fmt_g(2.1), "2.1");
        assert_eq!(fmt_g(-2.2), "-2.2");
        assert_eq!(fmt_g(0.0), "0");
        assert_eq!(fmt_g(1234567.0), "1.23457e+06");
        assert_eq!(fmt_g(0.00001), "1e-05");
        assert_eq!(fmt_g(123456.0), "123456");
    }
}
