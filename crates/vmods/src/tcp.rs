//! `vmod_tcp` (varnish-modules): inspect and tune the client's TCP
//! connection (congestion control, pacing, `TCP_INFO`) through the server
//! ([`lacquer_vcl::exec::Context::tcp_set`] / `tcp_info`). Errors are
//! logged (`VCL_Error`) and never fail the task, as the original's.

use lacquer_vcl::exec::{Context, LogKind, TcpOp, Value};

use crate::args::{Args, lossy};
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module tcp
$Function INT congestion_algorithm(STRING algorithm)
$Function VOID dump_info()
$Function REAL get_estimated_rtt()
$Function VOID set_socket_pace(INT)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("congestion_algorithm", congestion_algorithm as FuncImpl),
        ("dump_info", dump_info),
        ("get_estimated_rtt", get_estimated_rtt),
        ("set_socket_pace", set_socket_pace),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

fn congestion_algorithm(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let alg = a.str_or_empty(0)?;
    if let Err(e) = ctx.tcp_set(TcpOp::Congestion(alg)) {
        let m = format!(
            "TCP_CONGESTION setsockopt() for \"{}\" failed: {e}",
            lossy(alg)
        );
        ctx.log(LogKind::Error, m.as_bytes());
        return Ok(Value::Int(-1));
    }
    // As the original vmod: what the socket uses now.
    if let Ok(i) = ctx.tcp_info() {
        let m = format!("getsockopt() returned: {}", lossy(&i.congestion));
        ctx.log(LogKind::Log, m.as_bytes());
    }
    Ok(Value::Int(0))
}

fn dump_info(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let i = match ctx.tcp_info() {
        Ok(i) => i,
        Err(e) => {
            let m = format!("tcp.dump_info(): {e}");
            ctx.log(LogKind::Error, m.as_bytes());
            return Ok(Value::Null);
        }
    };
    let lines = [
        format!(
            "tcpi: snd_mss={} rcv_mss={} lost={} retrans={}",
            i.snd_mss, i.rcv_mss, i.lost, i.retrans
        ),
        format!(
            "tcpi2: pmtu={} rtt={} rttvar={} snd_cwnd={} advmss={} reordering={}",
            i.pmtu, i.rtt_us, i.rttvar_us, i.snd_cwnd, i.advmss, i.reordering
        ),
    ];
    for l in lines {
        ctx.log(LogKind::Log, l.as_bytes());
    }
    Ok(Value::Null)
}

/// Smoothed RTT in whole milliseconds (the original divides integers).
fn get_estimated_rtt(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let rtt = match ctx.tcp_info() {
        Ok(i) => f64::from(i.rtt_us / 1000),
        Err(e) => {
            let m = format!("tcp.get_estimated_rtt(): {e}");
            ctx.log(LogKind::Error, m.as_bytes());
            0.0
        }
    };
    Ok(Value::Real(rtt))
}

/// Paces delivery to the client at `KB/s` (1024-byte kilobytes, as the
/// original); 0 lifts the limit.
fn set_socket_pace(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let kbs = a.int(0)?.unwrap_or(0).max(0) as u64;
    if let Err(e) = ctx.tcp_set(TcpOp::PacingRate(kbs.saturating_mul(1024))) {
        let m = format!("tcp.set_socket_pace(): {e}");
        ctx.log(LogKind::Error, m.as_bytes());
    }
    Ok(Value::Null)
}
