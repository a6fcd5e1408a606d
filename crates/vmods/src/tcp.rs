//! `vmod_tcp` (varnish-modules): inspect and tune the client's TCP
//! connection (congestion control, pacing, `TCP_INFO`) through the server
//! ([`lacquer_vcl::exec::Context::tcp_set`] / `tcp_info`).

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
};

type R = Result<Value, String>;

fn congestion_algorithm(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let alg = a.str_or_empty(0)?;
    Ok(Value::Int(match ctx.tcp_set(TcpOp::Congestion(alg)) {
        Ok(()) => 0,
        Err(e) => {
            let m = format!(
                "tcp.congestion_algorithm(): setsockopt() for \"{}\" failed: {e}",
                lossy(alg)
            );
            ctx.log(LogKind::Error, m.as_bytes());
            -1
        }
    }))
}

fn dump_info(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let Some(i) = ctx.tcp_info() else {
        ctx.log(LogKind::Error, b"tcp.dump_info(): not a TCP connection");
        return Ok(Value::Null);
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
        format!("getsockopt() returned: {}", lossy(&i.congestion)),
    ];
    for l in lines {
        ctx.log(LogKind::Log, l.as_bytes());
    }
    Ok(Value::Null)
}

fn get_estimated_rtt(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Real(
        ctx.tcp_info().map_or(0.0, |i| i.rtt_us as f64 / 1000.0),
    ))
}

fn set_socket_pace(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let kbs = a.int(0)?.unwrap_or(0).max(0) as u64;
    if let Err(e) = ctx.tcp_set(TcpOp::PacingRate(kbs.saturating_mul(1024))) {
        let m = format!("tcp.set_socket_pace(): setsockopt() failed: {e}");
        ctx.log(LogKind::Error, m.as_bytes());
    }
    Ok(Value::Null)
}
