//! What both kinds of task VCL runs for share: the session facts a task
//! reads, the header, workspace and log helpers behind both tasks' header
//! access, value conversions, and [`TaskSub`], through which
//! [`crate::runtime::vcls::LoadedVcl::run`] follows the subroutine a task is
//! in. The tasks themselves are [`ReqTask`](crate::client::req_task::ReqTask)
//! (client side) and [`BoTask`](crate::fetch::bo_task::BoTask) (backend
//! side).
//!
//! Access rules (which variable is legal in which subroutine) were checked
//! when the VCL was compiled, so an access that reaches the wrong arm of a
//! task is a compiler bug and is reported as a VCL error rather than a
//! panic.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use lacquer_cache::ObjRef;
use lacquer_vcl::exec::privs::TaskPrivs;
use lacquer_vcl::exec::{Action, Backend, HeaderName, HttpWhich, LogKind, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;
use lacquer_vsl::{Tag, VslBuf};

use crate::runtime::counters::Main;
use crate::runtime::state::Shared;
use crate::runtime::ws::Workspace;

/// Facts about the client connection a request arrived on.
#[derive(Debug)]
pub struct SessInfo {
    pub vxid: u32,
    /// `sess.xid` as VCL reads it.
    pub vxid_str: String,
    /// `client.ip`: the client a PROXY header named, else the peer.
    pub client: SocketAddr,
    /// `client.ip` as text (as a PROXY v1 header wrote it): what
    /// `X-Forwarded-For`, `ReqStart` and `client.identity` show.
    pub client_ip: Bytes,
    pub client_port: String,
    /// `server.ip`: the address a PROXY header named, else `local`.
    pub server: SocketAddr,
    /// `remote.ip`: the connection's peer.
    pub peer: SocketAddr,
    /// `local.ip`: the address the connection was accepted on.
    pub local: SocketAddr,
    /// The listener's name (`a0`, …) and address as written.
    pub listener: Arc<str>,
    pub endpoint: Arc<str>,
    /// The TLVs of the session's PROXY v2 header (empty without one).
    pub proxy_tlvs: Vec<u8>,
}

/// Per-session timeouts VCL may change (`sess.*`).
#[derive(Clone, Copy, Debug)]
pub struct SessTimeouts {
    pub timeout_idle: f64,
    pub timeout_linger: f64,
    pub send_timeout: f64,
    pub idle_send_timeout: f64,
}

pub(crate) fn not_here(var: VarId) -> String {
    format!("variable {var:?} is not available here")
}

pub(crate) fn http_header<'a>(h: &'a lacquer_http::Headers, name: &HeaderName) -> Option<&'a [u8]> {
    h.get(&name.lower[..])
}

/// The value of the first header called `lower` in a stored object.
pub fn obj_header<'a>(obj: &'a ObjRef, lower: &[u8]) -> Option<&'a [u8]> {
    obj.data()
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(lower))
        .map(|(_, v)| v)
}

/// The (header, unset) log tags of a message VCL changes.
fn header_tags(which: HttpWhich) -> Option<(Tag, Tag)> {
    match which {
        HttpWhich::Req | HttpWhich::ReqTop => Some((Tag::ReqHeader, Tag::ReqUnset)),
        HttpWhich::Resp => Some((Tag::RespHeader, Tag::RespUnset)),
        HttpWhich::Bereq => Some((Tag::BereqHeader, Tag::BereqUnset)),
        HttpWhich::Beresp => Some((Tag::BerespHeader, Tag::BerespUnset)),
        HttpWhich::Obj => None,
    }
}

/// Logs the lines called `name` in `h` under `tag` (before they go away).
fn log_lines(vsl: &mut VslBuf, tag: Tag, h: &lacquer_http::Headers, lower: &[u8]) {
    for (k, v) in h.named(lower) {
        vsl.log_header(tag, k, v);
    }
}

/// `set <which>.http.<name> = value` as varnishd does it: the old lines are
/// logged as unset, the new one as set.
/// With `feature=+validate_headers` (the default), VCL may not set a
/// header value varnishd would refuse to send (control characters such as
/// CR or LF): the task fails, as varnishd's "Bad header".
fn check_header(sh: &Shared, name: &HeaderName, value: &[u8]) -> Result<(), String> {
    if lacquer_http::headers::is_valid_value(value)
        || !sh.params().bit("feature", "validate_headers")
    {
        return Ok(());
    }
    Err(format!(
        "Bad header {}: {}",
        name.name,
        String::from_utf8_lossy(value)
    ))
}

fn set_logged(
    vsl: &mut VslBuf,
    which: HttpWhich,
    h: &mut lacquer_http::Headers,
    name: &HeaderName,
    value: &[u8],
) {
    if let Some((set, unset)) = header_tags(which) {
        log_lines(vsl, unset, h, &name.lower);
        vsl.log_header(set, name.name.as_bytes(), value);
    }
    h.set_copied(&name.spelling, value);
}

/// Charges a header line VCL sets to the task's workspace: `false`, with
/// varnishd's `LostHeader` record, when it does not fit.
fn charge_header(ws: &mut Workspace, vsl: &mut VslBuf, name: &[u8], value: &[u8]) -> bool {
    let ok = ws.take(crate::runtime::ws::header_len(name, value));
    ws.flush_trace(vsl);
    if !ok {
        vsl.log_with(Tag::LostHeader, |o| {
            o.extend_from_slice(name);
            o.push(b':');
        });
    }
    ok
}

/// `set <which>.http.<name> = value` within varnishd's limits: the line
/// must fit in the workspace (else `LostHeader name:`), and, the old lines
/// gone, in the object's header slots (`http_max_hdr`): else `LostHeader`
/// with the line, `Error out of workspace`, `MAIN.losthdr`, and the
/// workspace is marked overflowed, which fails the task at delivery.
fn set_limited(
    sh: &Shared,
    ws: &mut Workspace,
    vsl: &mut VslBuf,
    which: HttpWhich,
    h: &mut lacquer_http::Headers,
    name: &HeaderName,
    value: &[u8],
) {
    if !charge_header(ws, vsl, name.name.as_bytes(), value) {
        return;
    }
    // Fewer lines than slots in all (the usual case) needs no count.
    let fits = h.len() < ws.header_slots()
        || h.iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case(&name.lower))
            .count()
            < ws.header_slots();
    if fits {
        set_logged(vsl, which, h, name, value);
        return;
    }
    unset_logged(vsl, which, h, name);
    lost_slot(sh, ws, vsl, name.name.as_bytes(), value);
}

/// A vmod's `add_header` within the same limits as [`set_limited`]: the
/// line must fit in the workspace and in a free header slot.
fn add_limited(
    sh: &Shared,
    ws: &mut Workspace,
    vsl: &mut VslBuf,
    h: &mut lacquer_http::Headers,
    name: &HeaderName,
    value: &[u8],
) {
    if !charge_header(ws, vsl, name.name.as_bytes(), value) {
        return;
    }
    if h.len() >= ws.header_slots() {
        lost_slot(sh, ws, vsl, name.name.as_bytes(), value);
        return;
    }
    h.append(name.spelling.clone(), Bytes::copy_from_slice(value));
}

/// A header line that found no free slot in its HTTP object.
fn lost_slot(sh: &Shared, ws: &mut Workspace, vsl: &mut VslBuf, name: &[u8], value: &[u8]) {
    vsl.log_header(Tag::LostHeader, name, value);
    vsl.log(Tag::Error, format_args!("out of workspace ({})", ws.id()));
    sh.counters.inc(Main::losthdr);
    lacquer_vcl::exec::Workspace::mark_overflow(ws);
}

/// Charges header lines a vmod puts in place of an object's lines: those
/// that were not there before are new strings.
fn charge_lines(
    ws: &mut Workspace,
    vsl: &mut VslBuf,
    old: &lacquer_http::Headers,
    lines: &[(Vec<u8>, Vec<u8>)],
) -> Result<(), String> {
    for (k, v) in lines {
        let kept = old.iter().any(|(ok, ov)| ok == &k[..] && ov == &v[..]);
        if !kept && !charge_header(ws, vsl, k, v) {
            return Err("Workspace overflow (headers)".to_string());
        }
    }
    Ok(())
}

/// Charges a STRING variable's new value (method, URL, protocol, reason,
/// identity); the error is varnishd's `VCL_Error` when it does not fit.
fn charge_str(
    ws: &mut Workspace,
    vsl: &mut VslBuf,
    var: VarId,
    value: &[u8],
) -> Result<(), String> {
    let ok = ws.take(value.len() as u64 + 1);
    ws.flush_trace(vsl);
    if ok {
        return Ok(());
    }
    Err(format!("Workspace overflow ({})", var_name(var)))
}

/// The VCL name of a variable, for error messages.
fn var_name(var: VarId) -> &'static str {
    lacquer_vcl::vars::VARIABLES
        .iter()
        .find(|d| d.id == var)
        .map_or("variable", |d| d.name)
}

/// `unset <which>.http.<name>`, logging what goes.
fn unset_logged(
    vsl: &mut VslBuf,
    which: HttpWhich,
    h: &mut lacquer_http::Headers,
    name: &HeaderName,
) {
    if let Some((_, unset)) = header_tags(which) {
        log_lines(vsl, unset, h, &name.lower);
    }
    h.remove(&name.lower[..]);
}

/// What a task's header, variable and log operations work on besides the
/// header list itself: the daemon state, the task's workspace and its log.
/// Both tasks lend it with the header list VCL names (`None` where that
/// list is not writable in the task), so `set` and `unset` of a header, a
/// vmod's `add_header` and `replace_headers`, STRING variables and `log`
/// records follow the same rules on the client and the backend side.
pub(crate) struct TaskIo<'a> {
    pub sh: &'a Shared,
    pub ws: &'a mut Workspace,
    pub vsl: &'a mut VslBuf,
}

impl TaskIo<'_> {
    /// `set <which>.http.<name> = value`: the value is validated, then set
    /// within the workspace and header-slot limits; nothing is set where
    /// `h` is `None`.
    pub(crate) fn set_header(
        self,
        which: HttpWhich,
        h: Option<&mut lacquer_http::Headers>,
        name: &HeaderName,
        value: &[u8],
    ) -> Result<(), String> {
        check_header(self.sh, name, value)?;
        if let Some(h) = h {
            set_limited(self.sh, self.ws, self.vsl, which, h, name, value);
        }
        Ok(())
    }

    /// `unset <which>.http.<name>`, where `h` is writable.
    pub(crate) fn unset_header(
        self,
        which: HttpWhich,
        h: Option<&mut lacquer_http::Headers>,
        name: &HeaderName,
    ) {
        if let Some(h) = h {
            unset_logged(self.vsl, which, h, name);
        }
    }

    /// A vmod's `add_header`; an error where `h` is not writable.
    pub(crate) fn add_header(
        self,
        which: HttpWhich,
        h: Option<&mut lacquer_http::Headers>,
        name: &HeaderName,
        value: &[u8],
    ) -> Result<(), String> {
        let h = h.ok_or_else(|| format!("{} is read-only here", which.name()))?;
        add_limited(self.sh, self.ws, self.vsl, h, name, value);
        Ok(())
    }

    /// A vmod's `replace_headers`: the new lines are charged to the
    /// workspace, then take the old ones' place.
    pub(crate) fn replace_headers(
        self,
        which: HttpWhich,
        h: Option<&mut lacquer_http::Headers>,
        lines: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), String> {
        let h = h.ok_or_else(|| format!("{} is read-only here", which.name()))?;
        charge_lines(self.ws, self.vsl, h, &lines)?;
        *h = headers_from(lines);
        Ok(())
    }

    /// Before a STRING variable takes `value`: charged to the workspace
    /// when `charge` (a value set again unchanged is used in place, as
    /// varnishd's single strand, and a body is not a workspace string),
    /// then logged under `tag` when the variable has one.
    pub(crate) fn set_str(
        self,
        var: VarId,
        tag: Option<Tag>,
        charge: bool,
        value: &[u8],
    ) -> Result<(), String> {
        if charge {
            charge_str(self.ws, self.vsl, var, value)?;
        }
        if let Some(tag) = tag {
            // The fields of a request or status line (the variables with a
            // log tag) may not be empty: varnishd's VRT_HDR_L setters fail
            // VCL after copying the value, before the field changes.
            if value.is_empty() {
                return Err(format!("Setting {} to empty string", var_name(var)));
            }
            self.vsl.log_bytes(tag, value);
        }
        Ok(())
    }

    /// A `std.log()`-style record, after the workspace's pending trace.
    pub(crate) fn log(self, kind: LogKind, msg: &[u8]) {
        self.ws.flush_trace(self.vsl);
        self.vsl.log_bytes(log_kind_tag(kind), msg);
    }
}

/// `vtc.vsl()`: a record with any tag for any transaction, written at
/// once to the shared log (subject to `vsl_mask`, as varnishd's `VSLs`).
pub(crate) fn log_raw(
    vsl: &lacquer_vsl::Vsl,
    tag: &str,
    vxid: u32,
    backend: bool,
    msg: &[u8],
) -> Result<(), String> {
    let tag = Tag::from_name(tag).ok_or_else(|| format!("No such tag: {tag}"))?;
    let vxid = if backend {
        lacquer_vsl::Vxid::backend(vxid)
    } else {
        lacquer_vsl::Vxid::client(vxid)
    };
    vsl.log_immediate_bytes(tag, vxid, msg);
    Ok(())
}

/// Ends a task's vmod state into its log (see
/// [`ReqTask::end_privs`](crate::client::req_task::ReqTask::end_privs)).
pub(crate) fn end_privs(privs: &mut TaskPrivs, ws: &mut Workspace, vsl: &mut VslBuf) {
    if privs.is_empty() {
        return;
    }
    ws.flush_trace(vsl);
    for e in finish_privs(privs, vsl) {
        vsl.log_str(Tag::VCL_Error, &e);
    }
}

/// Runs the fini hooks of `privs`, their log lines going into `vsl`; the
/// end checks that failed.
pub(crate) fn finish_privs(privs: &mut TaskPrivs, vsl: &mut VslBuf) -> Vec<String> {
    privs.finish(&mut |kind, msg| vsl.log_bytes(log_kind_tag(kind), msg))
}

/// The log tag a VCL log record of this kind gets.
pub(crate) fn log_kind_tag(kind: LogKind) -> Tag {
    match kind {
        LogKind::Log => Tag::VCL_Log,
        LogKind::Error => Tag::VCL_Error,
        LogKind::Acl => Tag::VCL_acl,
        LogKind::Problem => Tag::Error,
        LogKind::Notice => Tag::Notice,
        LogKind::Debug => Tag::Debug,
    }
}

pub(crate) fn as_f64(v: &Value) -> Result<f64, String> {
    match v {
        Value::Duration(d) | Value::Real(d) | Value::Time(d) => Ok(*d),
        Value::Int(i) | Value::Bytes(i) => Ok(*i as f64),
        other => Err(format!("expected a number, got {}", other.type_name())),
    }
}

pub(crate) fn as_bool(v: &Value) -> Result<bool, String> {
    match v {
        Value::Bool(b) => Ok(*b),
        other => Err(format!("expected a BOOL, got {}", other.type_name())),
    }
}

pub(crate) fn as_int(v: &Value) -> Result<i64, String> {
    match v {
        Value::Int(i) | Value::Bytes(i) => Ok(*i),
        Value::Real(r) => Ok(*r as i64),
        other => Err(format!("expected an INT, got {}", other.type_name())),
    }
}

pub(crate) fn as_backend(v: Value) -> Result<Option<Backend>, String> {
    match v {
        Value::Backend(b) => Ok(Some(b)),
        Value::Null => Ok(None),
        other => Err(format!("expected a BACKEND, got {}", other.type_name())),
    }
}

pub(crate) fn stevedore_name(v: Value) -> Result<Option<Arc<str>>, String> {
    match v {
        Value::Stevedore(s) => Ok(Some(s)),
        Value::Null => Ok(None),
        other => Err(format!("expected a STEVEDORE, got {}", other.type_name())),
    }
}

/// A status as VCL sets it on `var` (`resp` or `beresp`): values above 999
/// keep their last three digits for the wire (Varnish's `status % 1000`
/// rule), so those digits must make a valid status; errors read as
/// varnishd's.
pub fn vcl_status(var: &str, v: i64) -> Result<u16, String> {
    if v < 0 {
        Err(format!("{var}.status ({v}) is negative"))
    } else if v > 65535 {
        Err(format!("{var}.status ({v}) > 65535"))
    } else if v % 1000 < 100 {
        Err(format!("illegal {var}.status ({v}) (..0##)"))
    } else {
        Ok(v as u16)
    }
}

/// The storage variables (`storage.<name>.*`) of a store.
pub(crate) fn storage_value(sh: &Shared, var: VarId, name: &str) -> Result<Value, String> {
    let store = sh
        .store(name)
        .ok_or_else(|| format!("no storage named {name}"))?;
    let st = store.stats();
    Ok(match var {
        // An unlimited store has all the space VCL can count, as varnishd's.
        VarId::StorageFreeSpace => Value::Bytes(match store.limit() {
            None => lacquer_vcl::exec::value::INT_MAX,
            Some(_) => st.g_space.load(Ordering::Relaxed) as i64,
        }),
        VarId::StorageUsedSpace => Value::Bytes(st.g_bytes.load(Ordering::Relaxed) as i64),
        // A persistent store is unhappy until its objects are back.
        VarId::StorageHappy => Value::Bool(
            store
                .disk()
                .is_none_or(|d| !d.recovering() && !sh.cache.recovering()),
        ),
        other => return Err(not_here(other)),
    })
}

/// Client requests alive now (top-level and ESI includes), as varnishd's
/// request memory pools count the ones handed out.
pub static LIVE_REQS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn headers_from(lines: Vec<(Vec<u8>, Vec<u8>)>) -> lacquer_http::Headers {
    let mut h = lacquer_http::Headers::with_capacity(lines.len());
    for (k, v) in lines {
        h.append(Bytes::from(k), Bytes::from(v));
    }
    h
}

pub(crate) fn opt_dur(v: Option<f64>) -> Value {
    v.map_or(Value::Null, Value::Duration)
}

/// Lets [`crate::runtime::vcls::LoadedVcl::run`] record which method a task is in
/// and where its `VCL_call` / `VCL_return` records go.
pub trait TaskSub {
    fn set_sub(&mut self, m: BuiltinSub);
    /// The task's log, if it has one.
    fn task_vsl(&mut self) -> Option<&mut VslBuf> {
        None
    }
    /// A subroutine of this task returned fail (`MAIN.vcl_fail`).
    fn count_vcl_fail(&self) {}
    /// What the return statement itself logs, before `VCL_return` (as
    /// varnishd's VRT call behind `return (pass(...))` does).
    fn on_return(&mut self, _action: &Action) {}
}

#[cfg(test)]
mod tests {
    use super::vcl_status;

    #[test]
    fn vcl_status_keeps_varnishds_range_and_texts() {
        assert_eq!(vcl_status("resp", 200), Ok(200));
        assert_eq!(vcl_status("beresp", 1999), Ok(1999));
        assert_eq!(vcl_status("resp", 65535), Ok(65535));
        assert_eq!(
            vcl_status("resp", 99),
            Err("illegal resp.status (99) (..0##)".into())
        );
        assert_eq!(
            vcl_status("beresp", 1099),
            Err("illegal beresp.status (1099) (..0##)".into())
        );
        assert_eq!(
            vcl_status("resp", 65536),
            Err("resp.status (65536) > 65535".into())
        );
        assert_eq!(
            vcl_status("resp", -200),
            Err("resp.status (-200) is negative".into())
        );
    }
}
