//! [`BoTask`]: a backend fetch while backend-side VCL runs for it, and
//! what VCL may see and change of it (`bereq`, `beresp`, `obj_stale` …)
//! through the executor's [`Context`].

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use lacquer_vcl::exec::{
    Action, Backend, Context, HeaderName, HttpWhich, LogKind, Value, WsKind, WsMark,
};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;
use lacquer_vsl::{Tag, VslBuf};

use crate::runtime::counters::Main;
use crate::runtime::msg::{ReqMsg, RespMsg};
use crate::runtime::state::Shared;
use crate::runtime::vcls::LoadedVcl;
use crate::runtime::ws::Workspace;

use crate::runtime::task::{
    SessInfo, TaskIo, as_backend, as_bool, as_f64, as_int, end_privs, finish_privs, http_header,
    log_raw, not_here, opt_dur, stevedore_name, storage_value, vcl_status,
};

/// The client variables besides `req.http`, method, URL, protocol and xid
/// that `vcl_pipe` reads from the request (copied before it runs).
pub const PIPE_REQ_VARS: &[VarId] = &[
    VarId::ReqRestarts,
    VarId::ReqEsiLevel,
    VarId::ReqEsi,
    VarId::ReqTtl,
    VarId::ReqGrace,
    VarId::ReqCanGzip,
    VarId::ReqHashAlwaysMiss,
    VarId::ReqHashIgnoreBusy,
    VarId::ReqHashIgnoreVary,
    VarId::ReqIsHitmiss,
    VarId::ReqIsHitpass,
    VarId::ReqBackendHint,
    VarId::ReqStorage,
    VarId::ReqHash,
    VarId::ReqTime,
    VarId::ReqTopTime,
    VarId::ReqTransport,
];

/// A backend fetch while it runs backend-side VCL.
pub struct BoTask {
    pub sh: Arc<Shared>,
    pub vcl: Arc<LoadedVcl>,
    pub sess: Arc<SessInfo>,
    pub vxid: u32,
    /// The client request this fetch works for.
    pub req_vxid: u32,
    /// `bereq.xid` as VCL reads it.
    pub vxid_str: String,
    pub bereq: ReqMsg,
    /// The client's method and protocol when the backend request forced
    /// others (`GET`, `HTTP/1.1`): the first log of the bereq shows both,
    /// as varnishd's `http_ForceField` does.
    pub client_line: Option<ClientLine>,
    pub beresp: RespMsg,
    pub t_bereq: f64,
    pub t_beresp: f64,
    pub retries: u32,
    pub backend: Option<Backend>,
    /// The backend that answered (`beresp.backend`), when one did.
    pub beresp_backend: Option<Backend>,
    pub beresp_backend_ip: Option<SocketAddr>,
    pub connect_timeout: Option<f64>,
    pub first_byte_timeout: Option<f64>,
    pub between_bytes_timeout: Option<f64>,
    pub uncacheable: bool,
    pub is_bgfetch: bool,
    pub is_hitmiss: bool,
    pub is_hitpass: bool,
    pub digest: Option<lacquer_cache::Digest>,
    /// The request body is forwarded (pass with a body); `unset bereq.body`
    /// clears it.
    pub has_body: bool,
    pub t_origin: f64,
    pub ttl: f64,
    pub grace: f64,
    pub keep: f64,
    pub do_stream: bool,
    pub do_gzip: bool,
    pub do_gunzip: bool,
    pub do_esi: bool,
    /// `beresp.filters` as VCL set it (None: varnishd's default list).
    pub vfp_filters: Option<String>,
    /// The backend response has a body to filter.
    pub beresp_has_body: bool,
    pub was_304: bool,
    /// `utils.fast_304()` on a 304: the stale object is refreshed in
    /// place instead of replaced (see `fetch_fsm::refresh_in_place`).
    pub fast_304: bool,
    /// The store the object goes to (`beresp.storage`), by name.
    pub storage: Option<Arc<str>>,
    /// `beresp.storage_hint` as VCL reads it (`storage.<name>`).
    pub storage_hint: Option<String>,
    /// `beresp.body` / `synthetic()` output in `vcl_backend_error`.
    pub synth_body: Vec<u8>,
    pub client_identity: Option<Bytes>,
    pub vsl: VslBuf,
    pub privs: lacquer_vcl::exec::privs::TaskPrivs,
    pub now: f64,
    /// The bereq as built from the request, for `std.rollback(bereq)`.
    pub bereq_orig: ReqMsg,
    /// The built-in subroutine running now.
    pub cur_sub: BuiltinSub,
    /// Time of the last `Timestamp` record.
    pub t_last: f64,
    /// The client request while `vcl_pipe` runs (it sees `req` and `bereq`).
    pub pipe_req: Option<Box<ReqMsg>>,
    /// The bereq's own log while `vcl_pipe` runs: the task logs into the
    /// client request's transaction (`vsl`), the bereq's changes here.
    pub pipe_bereq_vsl: Option<VslBuf>,
    /// The client request's `req.xid` while `vcl_pipe` runs.
    pub pipe_xid: String,
    /// The client request's other `req.*` values while `vcl_pipe` runs
    /// (varnishd runs vcl_pipe in the request's context, so they read as
    /// in vcl_recv; see [`PIPE_REQ_VARS`]).
    pub pipe_vars: Vec<(VarId, Value)>,
    /// The backend workspace (`workspace_backend`, see [`crate::runtime::ws`]).
    pub ws: Workspace,
    /// Where [`BoTask::ws`] stood once the backend request was built:
    /// `std.rollback(bereq)` goes back there.
    pub ws_bo: WsMark,
    /// `std.rollback(bereq)` in `vcl_backend_response` let go of the
    /// backend's response: only a retry can fetch again.
    pub beresp_dropped: bool,
    /// Bytes sent to and received from the backend, for `BereqAcct`.
    pub acct: BereqAcct,
    /// The backend the current attempt went to; `acct` is added to its
    /// `VBE` counters when the attempt ends (`charge_backend`).
    pub acct_backend: Option<Arc<crate::runtime::vcls::BackendRt>>,
}

/// What a fetch sent and received, in `BereqAcct`'s order (heads and
/// bodies; the record adds the totals).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BereqAcct {
    pub bereq_hdr: u64,
    pub bereq_body: u64,
    pub beresp_hdr: u64,
    pub beresp_body: u64,
}

impl BereqAcct {
    /// The `BereqAcct` record: sent head, body, total; received head,
    /// body, total.
    pub fn record(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.bereq_hdr,
            self.bereq_body,
            self.bereq_hdr + self.bereq_body,
            self.beresp_hdr,
            self.beresp_body,
            self.beresp_hdr + self.beresp_body
        )
    }
}

/// What the first log of a backend request needs to show the client's
/// request line before the forced one (see `fetch_fsm::log_bereq`).
#[derive(Debug, Clone)]
pub struct ClientLine {
    pub method: Bytes,
    pub proto: Bytes,
    /// How many headers were copied from the client request; the forced
    /// method is logged after them.
    pub copied: usize,
    /// Whether `Accept-Encoding: gzip` was appended after them (the
    /// forced protocol is logged after it).
    pub ae_appended: bool,
}

impl BoTask {
    /// Ends the fetch's vmod state, as [`ReqTask::end_privs`] for a
    /// request: fini hooks log into the backend transaction. Idempotent.
    pub fn end_privs(&mut self) {
        end_privs(&mut self.privs, &mut self.ws, &mut self.vsl);
    }

    /// Adds the fetch's byte counts to the `VBE` counters of the backend
    /// the attempt that ends went to, as varnishd's `vbe_dir_finish` does:
    /// the whole `bo->acct`, which a retry does not reset, so each attempt
    /// adds the bytes of the attempts before it again.
    pub fn charge_backend(&mut self) {
        let Some(b) = self.acct_backend.take() else {
            return;
        };
        let d = self.acct;
        let s = &b.pool.stats;
        let add = |c: &std::sync::atomic::AtomicU64, n| {
            c.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        };
        add(&s.bereq_hdrbytes, d.bereq_hdr);
        add(&s.bereq_bodybytes, d.bereq_body);
        add(&s.beresp_hdrbytes, d.beresp_hdr);
        add(&s.beresp_bodybytes, d.beresp_body);
    }

    /// The fetch filters the body will go through: what VCL set in
    /// `beresp.filters`, else varnishd's choice for the response as it is.
    pub fn fetch_filter_list(&self) -> String {
        match &self.vfp_filters {
            Some(l) => l.clone(),
            None => self.default_fetch_filters().to_string(),
        }
    }

    /// varnishd's default `beresp.filters` for the response as it is now.
    /// As its `filter_on_ws`, the list is written on the fetch's
    /// workspace: an overflowed workspace, or one without room for it,
    /// gives the empty list (seed 180000: no testgunzip, so no `Vary` and
    /// an object not marked gzip; no ESI parsing either).
    fn default_fetch_filters(&self) -> &'static str {
        let list = crate::fetch::gzip::default_fetch_filters(
            &self.beresp.headers,
            self.beresp_has_body,
            self.do_gzip,
            self.do_gunzip,
            self.do_esi,
            self.sh.params().flag("http_gzip_support"),
        );
        let ws: &dyn lacquer_vcl::exec::Workspace = &self.ws;
        if ws.overflowed() || ws.free() < (list.len() as u64 + 1).max(2) {
            return "";
        }
        list
    }

    /// Sets the store the object goes to (and what `beresp.storage_hint`
    /// reads).
    pub fn set_storage(&mut self, name: Option<Arc<str>>) {
        self.storage_hint = name.as_ref().map(|n| format!("storage.{n}"));
        self.storage = name;
    }

    /// Goes back to the workspace as it was when the backend request was
    /// built, counting an overflow it clears.
    pub fn ws_rollback(&mut self) {
        if self.ws.rollback(self.ws_bo) {
            self.sh.counters.inc(Main::ws_backend_overflow);
        }
        self.ws.flush_trace(&mut self.vsl);
    }

    /// The assignments VCL makes to backend-side variables.
    fn set_inner(&mut self, var: VarId, value: Value) -> Result<(), String> {
        match var {
            VarId::BereqBackend => self.backend = as_backend(value)?,
            VarId::BereqConnectTimeout => self.connect_timeout = Some(as_f64(&value)?),
            VarId::BereqFirstByteTimeout => self.first_byte_timeout = Some(as_f64(&value)?),
            VarId::BereqBetweenBytesTimeout => self.between_bytes_timeout = Some(as_f64(&value)?),
            VarId::BerespStatus => {
                let s = vcl_status("beresp", as_int(&value)?)?;
                self.beresp.status = s;
                self.beresp.reason =
                    Bytes::from_static(crate::runtime::msg::reason(s % 1000).as_bytes());
                // As varnishd's http_SetStatus: the digits above the
                // hundreds are VCL's own, the logged field drops them.
                self.vsl
                    .log(Tag::BerespStatus, format_args!("{:03}", s % 1000));
                self.vsl.log_bytes(Tag::BerespReason, &self.beresp.reason);
            }
            VarId::BerespTtl => {
                // beresp.ttl counts from now, the object's origin from
                // t_origin; as varnishd, a negative result is stored as 0.
                self.ttl = (as_f64(&value)? + (self.now - self.t_origin)).max(0.0);
            }
            VarId::BerespGrace => self.grace = as_f64(&value)?.max(0.0),
            VarId::BerespKeep => self.keep = as_f64(&value)?.max(0.0),
            VarId::BerespDoStream => self.do_stream = as_bool(&value)?,
            // As varnishd: once VCL fixed beresp.filters, the flags that
            // choose them mean nothing and setting one fails.
            VarId::BerespDoGzip | VarId::BerespDoGunzip | VarId::BerespDoEsi
                if self.vfp_filters.is_some() =>
            {
                return Err(format!(
                    "beresp.filters are already fixed, {} is undefined",
                    match var {
                        VarId::BerespDoGzip => "beresp.do_gzip",
                        VarId::BerespDoGunzip => "beresp.do_gunzip",
                        _ => "beresp.do_esi",
                    }
                ));
            }
            VarId::BerespDoGzip => self.do_gzip = as_bool(&value)?,
            VarId::BerespDoGunzip => self.do_gunzip = as_bool(&value)?,
            VarId::BerespDoEsi => self.do_esi = as_bool(&value)?,
            VarId::BerespUncacheable => {
                // Once uncacheable, always uncacheable (as varnishd).
                if as_bool(&value)? {
                    self.uncacheable = true;
                }
            }
            VarId::BerespStorage | VarId::BerespStorageHint => {
                self.set_storage(stevedore_name(value)?)
            }
            VarId::BerespBody => match value {
                Value::Str(s) | Value::Blob(s) => {
                    self.synth_body.clear();
                    self.synth_body.extend_from_slice(&s);
                }
                Value::Null => self.synth_body.clear(),
                other => return Err(format!("cannot set beresp.body to {}", other.type_name())),
            },
            other => match value {
                Value::Str(s) => return self.set_str(other, &s),
                _ => return Err(not_here(other)),
            },
        }
        Ok(())
    }

    /// Writes a `Timestamp` record (`label: now since-start since-last`).
    pub fn log_ts(&mut self, label: &str, now: f64) {
        self.vsl
            .log_timestamp(label, now, now - self.t_bereq, now - self.t_last);
        self.t_last = now;
    }

    /// What the task's header, variable and log operations work on.
    fn io(&mut self) -> TaskIo<'_> {
        TaskIo {
            sh: &self.sh,
            ws: &mut self.ws,
            vsl: &mut self.vsl,
        }
    }

    /// The header list `which` names where VCL may write it (`bereq`,
    /// `beresp`, and in `vcl_pipe` the client request), with what writing
    /// it works on.
    /// Runs `f`, a change to the `which` HTTP object, with its records in
    /// the bereq's transaction: vcl_pipe logs into the client request's
    /// transaction, but varnishd's bereq logs its own changes (`http_*`
    /// write through the object's log).
    fn bereq_logged<R>(&mut self, which: HttpWhich, f: impl FnOnce(&mut Self) -> R) -> R {
        if which != HttpWhich::Bereq {
            return f(self);
        }
        let Some(mut own) = self.pipe_bereq_vsl.take() else {
            return f(self);
        };
        std::mem::swap(&mut self.vsl, &mut own);
        let r = f(self);
        std::mem::swap(&mut self.vsl, &mut own);
        self.pipe_bereq_vsl = Some(own);
        r
    }

    fn http_mut(&mut self, which: HttpWhich) -> (Option<&mut lacquer_http::Headers>, TaskIo<'_>) {
        let h = match which {
            HttpWhich::Bereq => Some(&mut self.bereq.headers),
            HttpWhich::Beresp => Some(&mut self.beresp.headers),
            HttpWhich::Req | HttpWhich::ReqTop => self.pipe_req.as_mut().map(|r| &mut r.headers),
            _ => None,
        };
        let io = TaskIo {
            sh: &self.sh,
            ws: &mut self.ws,
            vsl: &mut self.vsl,
        };
        (h, io)
    }

    /// [`Self::http_mut`] for a vmod's whole-list operations, which reach
    /// `bereq` and `beresp` only.
    fn http_mut_vmod(
        &mut self,
        which: HttpWhich,
    ) -> (Option<&mut lacquer_http::Headers>, TaskIo<'_>) {
        let (h, io) = self.http_mut(which);
        (
            h.filter(|_| matches!(which, HttpWhich::Bereq | HttpWhich::Beresp)),
            io,
        )
    }
}

impl Context for BoTask {
    fn header(&self, which: HttpWhich, name: &HeaderName) -> Option<&[u8]> {
        match which {
            HttpWhich::Bereq => http_header(&self.bereq.headers, name),
            HttpWhich::Beresp => http_header(&self.beresp.headers, name),
            HttpWhich::Req | HttpWhich::ReqTop => self
                .pipe_req
                .as_ref()
                .and_then(|r| http_header(&r.headers, name)),
            _ => None,
        }
    }

    fn set_header(
        &mut self,
        which: HttpWhich,
        name: &HeaderName,
        value: &[u8],
    ) -> Result<(), String> {
        self.bereq_logged(which, |bo| {
            let (h, io) = bo.http_mut(which);
            io.set_header(which, h, name, value)
        })
    }

    fn unset_header(&mut self, which: HttpWhich, name: &HeaderName) {
        self.bereq_logged(which, |bo| {
            let (h, io) = bo.http_mut(which);
            io.unset_header(which, h, name);
        });
    }

    fn get_str(&self, var: VarId) -> Result<Option<&[u8]>, String> {
        Ok(Some(match var {
            VarId::BereqMethod => &self.bereq.method,
            VarId::BereqUrl => &self.bereq.url,
            VarId::BereqProto => &self.bereq.proto,
            VarId::ReqMethod | VarId::ReqTopMethod if self.pipe_req.is_some() => {
                self.pipe_req.as_ref().map_or(&b""[..], |r| &r.method)
            }
            VarId::ReqUrl | VarId::ReqTopUrl if self.pipe_req.is_some() => {
                self.pipe_req.as_ref().map_or(&b""[..], |r| &r.url)
            }
            VarId::ReqProto | VarId::ReqTopProto if self.pipe_req.is_some() => {
                self.pipe_req.as_ref().map_or(&b""[..], |r| &r.proto)
            }
            VarId::ReqXid if self.pipe_req.is_some() => self.pipe_xid.as_bytes(),
            VarId::BerespProto => &self.beresp.proto,
            VarId::BerespReason => &self.beresp.reason,
            VarId::BerespBackendName => match &self.beresp_backend {
                Some(b) => b.name.as_bytes(),
                None => return Ok(None),
            },
            VarId::ClientIdentity => match &self.client_identity {
                Some(i) => i,
                None => &self.sess.client_ip,
            },
            VarId::ServerHostname => self.sh.hostname.as_bytes(),
            VarId::ServerIdentity => self.sh.identity.as_bytes(),
            VarId::LocalEndpoint => self.sess.endpoint.as_bytes(),
            VarId::LocalSocket => self.sess.listener.as_bytes(),
            VarId::BereqXid => self.vxid_str.as_bytes(),
            VarId::SessXid => self.sess.vxid_str.as_bytes(),
            VarId::BerespStorageHint => match &self.storage_hint {
                Some(s) => s.as_bytes(),
                None => return Ok(None),
            },
            VarId::BerespFilters => match &self.vfp_filters {
                Some(l) => l.as_bytes(),
                None => self.default_fetch_filters().as_bytes(),
            },
            other => return Err(not_here(other)),
        }))
    }

    fn set_str(&mut self, var: VarId, value: &[u8]) -> Result<(), String> {
        let v = Bytes::copy_from_slice(value);
        let tag = match var {
            VarId::BereqMethod => Some(Tag::BereqMethod),
            VarId::BereqUrl => Some(Tag::BereqURL),
            VarId::BereqProto => Some(Tag::BereqProtocol),
            VarId::BerespProto => Some(Tag::BerespProtocol),
            VarId::BerespReason => Some(Tag::BerespReason),
            _ => None,
        };
        let unchanged = matches!(self.get_str(var), Ok(Some(cur)) if cur == value);
        let charge = !unchanged && !matches!(var, VarId::BerespBody);
        let which = match var {
            VarId::BereqMethod | VarId::BereqUrl | VarId::BereqProto => HttpWhich::Bereq,
            _ => HttpWhich::Beresp,
        };
        self.bereq_logged(which, |bo| bo.io().set_str(var, tag, charge, value))?;
        match var {
            VarId::BereqMethod => self.bereq.method = v,
            VarId::BereqUrl => self.bereq.url = v,
            VarId::BereqProto => self.bereq.proto = v,
            VarId::BerespProto => self.beresp.proto = v,
            VarId::BerespReason => self.beresp.reason = v,
            VarId::BerespBody => {
                self.synth_body.clear();
                self.synth_body.extend_from_slice(value);
            }
            VarId::BerespStorageHint => {
                self.set_storage(Some(Arc::from(String::from_utf8_lossy(value).as_ref())))
            }
            VarId::BerespFilters => {
                self.vfp_filters = Some(String::from_utf8_lossy(value).into_owned())
            }
            other => return Err(not_here(other)),
        }
        Ok(())
    }

    fn get(&self, var: VarId) -> Result<Value, String> {
        Ok(match var {
            VarId::ClientIp => Value::Ip(self.sess.client),
            VarId::RemoteIp => Value::Ip(self.sess.peer),
            VarId::ServerIp => Value::Ip(self.sess.server),
            VarId::LocalIp => Value::Ip(self.sess.local),
            VarId::BereqRetries => Value::Int(i64::from(self.retries)),
            VarId::BereqTime => Value::Time(self.t_bereq),
            VarId::BereqBackend => match &self.backend {
                Some(b) => Value::Backend(b.clone()),
                None => Value::Null,
            },
            VarId::BereqConnectTimeout => opt_dur(self.connect_timeout),
            VarId::BereqFirstByteTimeout => opt_dur(self.first_byte_timeout),
            VarId::BereqBetweenBytesTimeout => opt_dur(self.between_bytes_timeout),
            VarId::BereqUncacheable => Value::Bool(self.uncacheable),
            VarId::BereqIsBgfetch => Value::Bool(self.is_bgfetch),
            VarId::BereqIsHitmiss => Value::Bool(self.is_hitmiss),
            VarId::BereqIsHitpass => Value::Bool(self.is_hitpass),
            VarId::BereqHash => match &self.digest {
                Some(d) => Value::Blob(Bytes::copy_from_slice(&d[..])),
                None => Value::Null,
            },
            VarId::BerespStatus => Value::Int(i64::from(self.beresp.status)),
            // As varnishd: a negative stored ttl (uncacheable by RFC, or a
            // pass) reads as 0; otherwise the age since origin is deducted.
            // As varnishd: a negative stored value reads as 0 (before the
            // age since origin is deducted from the ttl).
            VarId::BerespTtl => Value::Duration(self.ttl.max(0.0) - (self.now - self.t_origin)),
            VarId::BerespGrace => Value::Duration(self.grace.max(0.0)),
            VarId::BerespKeep => Value::Duration(self.keep.max(0.0)),
            VarId::BerespAge => Value::Duration(self.now - self.t_origin),
            VarId::BerespTime => Value::Time(self.t_beresp),
            VarId::BerespDoStream => Value::Bool(self.do_stream),
            VarId::BerespDoGzip => Value::Bool(self.do_gzip),
            VarId::BerespDoGunzip => Value::Bool(self.do_gunzip),
            VarId::BerespDoEsi => Value::Bool(self.do_esi),
            VarId::BerespUncacheable => Value::Bool(self.uncacheable),
            VarId::BerespWas304 => Value::Bool(self.was_304),
            VarId::BerespBackend => match &self.beresp_backend {
                Some(b) => Value::Backend(b.clone()),
                None => Value::Null,
            },
            VarId::BerespBackendIp => match self.beresp_backend_ip {
                Some(a) => Value::Ip(a),
                None => Value::Null,
            },
            VarId::BerespStorage => match &self.storage {
                Some(s) => Value::Stevedore(s.clone()),
                None => Value::Null,
            },
            VarId::Now => Value::Time(self.now),
            other if self.pipe_vars.iter().any(|(v, _)| *v == other) => self
                .pipe_vars
                .iter()
                .find(|(v, _)| *v == other)
                .map(|(_, x)| x.clone())
                .unwrap_or(Value::Null),
            other => {
                return match self.get_str(other)? {
                    Some(s) => Ok(Value::Str(Bytes::copy_from_slice(s))),
                    None => Ok(Value::Null),
                };
            }
        })
    }

    fn set(&mut self, var: VarId, value: Value) -> Result<(), String> {
        self.set_inner(var, value)?;
        if matches!(
            var,
            VarId::BerespTtl | VarId::BerespGrace | VarId::BerespKeep | VarId::BerespUncacheable
        ) {
            // As varnishd: every change of the object's lifetime is logged.
            self.vsl.log(
                Tag::TTL,
                format_args!(
                    "VCL {:.0} {:.0} {:.0} {:.0} {}",
                    self.ttl,
                    self.grace,
                    self.keep,
                    self.t_origin,
                    if self.uncacheable {
                        "uncacheable"
                    } else {
                        "cacheable"
                    }
                ),
            );
        }
        Ok(())
    }
    fn unset(&mut self, var: VarId) -> Result<(), String> {
        match var {
            VarId::BereqBody => {
                self.has_body = false;
                Ok(())
            }
            _ => Err(not_here(var)),
        }
    }

    fn storage_var(&self, var: VarId, storage: &str) -> Result<Value, String> {
        storage_value(&self.sh, var, storage)
    }

    fn hash_data(&mut self, _data: Option<&[u8]>) {}

    fn synthetic(&mut self, data: &[u8]) {
        self.synth_body.extend_from_slice(data);
    }

    fn ban(&mut self, spec: &[u8]) -> Result<(), String> {
        let s = std::str::from_utf8(spec).map_err(|_| "ban: not UTF-8".to_string())?;
        self.sh.add_ban(s, self.now)
    }

    fn log(&mut self, kind: LogKind, msg: &[u8]) {
        self.io().log(kind, msg);
    }

    fn log_raw(&mut self, tag: &str, vxid: u32, backend: bool, msg: &[u8]) -> Result<(), String> {
        log_raw(&self.sh.vsl, tag, vxid, backend, msg)
    }

    fn now(&self) -> f64 {
        self.now
    }

    fn privs(&mut self) -> &mut lacquer_vcl::exec::privs::TaskPrivs {
        &mut self.privs
    }

    fn top_privs(&mut self) -> Option<lacquer_vcl::exec::privs::SharedPrivs> {
        None
    }

    fn resolve_backend(&mut self, backend: &Value) -> Result<Value, String> {
        let vcl = self.vcl.clone();
        vcl.resolve_value(backend, self)
    }

    fn sub(&self) -> BuiltinSub {
        self.cur_sub
    }

    fn headers(&self, which: HttpWhich) -> Vec<(&[u8], &[u8])> {
        match which {
            HttpWhich::Bereq => self.bereq.headers.iter().collect(),
            HttpWhich::Beresp => self.beresp.headers.iter().collect(),
            _ => Vec::new(),
        }
    }

    fn add_header(
        &mut self,
        which: HttpWhich,
        name: &HeaderName,
        value: &[u8],
    ) -> Result<(), String> {
        self.bereq_logged(which, |bo| {
            let (h, io) = bo.http_mut_vmod(which);
            io.add_header(which, h, name, value)
        })
    }

    fn replace_headers(
        &mut self,
        which: HttpWhich,
        lines: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), String> {
        self.bereq_logged(which, |bo| {
            let (h, io) = bo.http_mut_vmod(which);
            io.replace_headers(which, h, lines)
        })
    }

    fn rollback(&mut self, which: HttpWhich) -> Result<(), String> {
        match which {
            HttpWhich::Bereq => {
                self.bereq = self.bereq_orig.clone();
                let failed = finish_privs(&mut self.privs, &mut self.vsl)
                    .into_iter()
                    .next();
                self.ws_rollback();
                if self.cur_sub == BuiltinSub::BackendResponse {
                    self.beresp_dropped = true;
                }
                failed.map_or(Ok(()), Err)
            }
            w => Err(format!("cannot roll back {} here", w.name())),
        }
    }

    fn cache_req_body(&mut self, _max: u64) -> Result<bool, String> {
        Err("std.cache_req_body() is only available in client subroutines".to_string())
    }

    fn late_100_continue(&mut self, _late: bool) {}

    fn set_ip_tos(&mut self, _tos: i64) -> Result<(), String> {
        Err("std.set_ip_tos() is only available in client subroutines".to_string())
    }

    fn timestamp(&mut self, label: &[u8]) {
        let now = lacquer_http::date::now();
        self.vsl.log_timestamp(
            &String::from_utf8_lossy(label),
            now,
            now - self.t_bereq,
            now - self.t_last,
        );
        self.t_last = now;
    }

    fn purge(&mut self, _ttl: f64, _grace: f64, _keep: f64) -> Result<i64, String> {
        Err("purge is only available in vcl_hit and vcl_miss".to_string())
    }

    fn digest(&self) -> Option<[u8; 32]> {
        self.digest
    }

    fn proxy_tlv(&self, _kind: u8) -> Option<&[u8]> {
        None
    }

    fn workspace(&mut self, which: WsKind) -> Option<&mut dyn lacquer_vcl::exec::Workspace> {
        match which {
            WsKind::Task | WsKind::Backend => Some(&mut self.ws),
            WsKind::Session | WsKind::Thread => None,
        }
    }

    fn peer_cred(&self) -> Option<(u32, u32)> {
        None
    }

    fn cached_req_body(&self) -> Option<&[u8]> {
        None
    }

    fn tcp_set(&mut self, _op: lacquer_vcl::exec::TcpOp<'_>) -> Result<(), String> {
        Err("vmod tcp works on client connections only".to_string())
    }

    fn tcp_info(&self) -> Result<lacquer_vcl::exec::TcpInfo, String> {
        Err("vmod tcp works on client connections only".to_string())
    }

    fn fast_304(&mut self) -> Result<(), String> {
        // After a full response there is nothing to refresh in place.
        self.fast_304 |= self.was_304;
        Ok(())
    }

    fn is_fast_304(&self) -> bool {
        self.fast_304
    }
}

impl crate::runtime::task::TaskSub for BoTask {
    fn set_sub(&mut self, m: BuiltinSub) {
        self.cur_sub = m;
    }
    fn task_vsl(&mut self) -> Option<&mut VslBuf> {
        Some(&mut self.vsl)
    }
    fn count_vcl_fail(&self) {
        self.sh
            .counters
            .inc(crate::runtime::counters::Main::vcl_fail);
    }
    fn on_return(&mut self, action: &Action) {
        // As varnishd's VRT_hit_for_pass: the hit-for-pass lifetime is
        // logged by the return statement (a hit-for-pass lasts exactly its
        // ttl: no grace, no keep).
        if self.cur_sub == BuiltinSub::BackendResponse
            && let Action::Pass { ttl } = action
        {
            let t = ttl.unwrap_or(self.ttl);
            self.vsl.log(
                Tag::TTL,
                format_args!("HFP {t:.0} 0 0 {:.0} uncacheable", self.t_origin),
            );
        }
    }
}
