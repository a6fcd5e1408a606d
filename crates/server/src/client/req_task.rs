//! [`ReqTask`]: a client request while client-side VCL runs for it, and
//! what VCL may see and change of it (`req`, `resp`, `obj`, `client`,
//! `sess`, `req_top` …) through the executor's [`Context`].

use std::sync::Arc;

use bytes::Bytes;
use lacquer_cache::ObjRef;
use lacquer_vcl::exec::{Backend, Context, HeaderName, HttpWhich, LogKind, Value, WsKind, WsMark};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;
use lacquer_vsl::{Tag, VslBuf};

use crate::pid;
use crate::runtime::counters::Main;
use crate::runtime::msg::{ReqMsg, RespMsg};
use crate::runtime::state::Shared;
use crate::runtime::vcls::LoadedVcl;
use crate::runtime::ws::Workspace;

use crate::runtime::task::{
    SessInfo, SessTimeouts, TaskIo, as_backend, as_bool, as_f64, as_int, end_privs, finish_privs,
    http_header, log_raw, not_here, obj_header, stevedore_name, storage_value, vcl_status,
};

/// The top-level request of an ESI include tree, as `req_top.*` reads it.
#[derive(Debug)]
pub struct TopReq {
    pub req: ReqMsg,
    pub t_req: f64,
}

/// One count in [`LIVE_REQS`](crate::runtime::task::LIVE_REQS), given back when the request ends.
#[derive(Debug)]
struct LiveReq;

impl LiveReq {
    fn new() -> LiveReq {
        crate::runtime::task::LIVE_REQS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        LiveReq
    }
}

impl Drop for LiveReq {
    fn drop(&mut self) {
        crate::runtime::task::LIVE_REQS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A client request while it runs client-side VCL.
pub struct ReqTask {
    /// Counts the request in `MEMPOOL.req*.live` while it exists.
    _live: LiveReq,
    /// The request came on an HTTP/2 stream (`req.transport`).
    pub h2: bool,
    pub sh: Arc<Shared>,
    pub vcl: Arc<LoadedVcl>,
    pub sess: Arc<SessInfo>,
    pub timeouts: SessTimeouts,
    pub vxid: u32,
    /// `req.xid` as VCL reads it.
    pub vxid_str: String,
    pub req: ReqMsg,
    /// The request as received, for restarts that roll back (`std.rollback`).
    pub req_orig: ReqMsg,
    pub t_req: f64,
    pub restarts: u32,
    pub client_identity: Option<Bytes>,
    pub backend_hint: Option<Backend>,
    pub ttl: Option<f64>,
    pub grace: Option<f64>,
    pub hash_always_miss: bool,
    pub hash_ignore_busy: bool,
    pub hash_ignore_vary: bool,
    /// A vmod's hook into the next lookup (`debug.catflap()`): it goes
    /// with that lookup, or when vcl_recv starts over or `req` is rolled
    /// back.
    pub lookup_hook: Option<Box<dyn lacquer_vcl::exec::LookupHook>>,
    pub esi: bool,
    /// `resp.filters` as vcl_deliver set it (None: varnishd's default
    /// list, see `delivery_filters`).
    pub vdp_filters: Option<Bytes>,
    pub is_hitmiss: bool,
    pub is_hitpass: bool,
    /// A lookup hit, even when vcl_hit then passed.
    pub is_hit: bool,
    pub storage: Option<Arc<str>>,
    /// The storage the request body's object holds (varnishd's
    /// `req->body_oc`), given back when the task ends.
    pub body_storage: Option<BodyStorage>,
    pub hash: Option<lacquer_cache::HashBuilder>,
    /// `return (purge)` was taken: the lookup after vcl_hash purges.
    pub purging: bool,
    /// A client-side VCL subroutine failed: the response closes the
    /// connection (varnishd's `SC_VCL_FAILURE`, which latches).
    pub vcl_failed: bool,
    /// Bytes of the request head, for `ReqAcct`.
    pub req_hdr_bytes: u64,
    /// Bytes of the request body read so far, for `ReqAcct`.
    pub req_body_bytes: u64,
    /// Bytes of interim responses sent (`100 Continue`), counted with the
    /// response's header bytes in `ReqAcct`.
    pub interim_hdr_bytes: u64,
    pub digest: Option<lacquer_cache::Digest>,
    pub resp: RespMsg,
    /// The object being delivered or hit.
    pub obj: Option<ObjRef>,
    /// The object in `obj` is delivered as a hit (`X-Varnish` names both
    /// transactions), so a rollback in vcl_deliver can rebuild the same
    /// response.
    deliver_hit: bool,
    /// `resp.body` / `synthetic()` output in `vcl_synth`.
    pub synth_body: Vec<u8>,
    /// The status and reason `vcl_synth` was entered with (varnishd's
    /// `err_code`/`err_reason`), for the response it starts from; status 0
    /// until the request first goes to vcl_synth.
    pub synth_code: (u16, Option<Bytes>),
    pub vsl: VslBuf,
    pub privs: lacquer_vcl::exec::privs::TaskPrivs,
    /// `PRIV_TOP` state of the request tree (the top request's, shared
    /// with its ESI includes); created on first use.
    pub top_privs: Option<lacquer_vcl::exec::privs::SharedPrivs>,
    /// Request body kept by `std.cache_req_body`.
    pub req_body: Option<Bytes>,
    /// The size of `req_body` a `std.cache_req_body()` limit is checked
    /// against: its length, or for an HTTP/2 body without a length what
    /// came before the read that brought its end (varnishd's vrb_pull).
    pub req_body_checked: u64,
    /// `std.cache_req_body()` kept the body: it goes with any fetch, not
    /// only a pass.
    pub req_body_kept: bool,
    /// When the body in `req_body` was read ahead of VCL, until that is
    /// logged: varnishd reads it at `std.cache_req_body()` (stamped then,
    /// with that time) or when the body is sent or discarded (stamped
    /// before the next timestamp of the request), so `ReqBody` goes there
    /// in the log, not before `VCL_call RECV`.
    pub req_body_read_at: Option<f64>,
    /// `std.cache_req_body()` was asked to keep a body larger than its
    /// limit: varnishd gives up on such a request and closes.
    pub req_body_failed: bool,
    /// The body (or its rest) still on the connection: what a pass
    /// streams to the backend (see [`crate::client::reqbody`]).
    pub body_pending: Option<crate::client::reqbody::Pending>,
    /// Reading the body failed or stopped midway: the connection cannot
    /// carry another request.
    pub body_broken: bool,
    /// Reading the client's body failed (varnishd's `BS_ERROR` from a
    /// pass sending it or from `VRB_Ignore`): the session closes as
    /// `RX_BODY` whatever else happened to the response.
    pub body_rx_failed: bool,
    /// A pass streamed the body already: it cannot be sent again.
    pub body_taken: bool,
    /// The client (HTTP/1.1, `Expect: 100-continue`, no body bytes sent)
    /// still waits for `100 Continue` before sending its body.
    pub want_100: bool,
    /// `std.late_100_continue(true)`: the owed 100 waits until the body
    /// is read, instead of going out when vcl_recv returns.
    pub late_100: bool,
    /// While vcl_recv runs beside the connection's owner: how
    /// `std.cache_req_body()` reads a body still to be asked for (see
    /// [`crate::client::reqbody::recv_with_body`]).
    pub body_link: Option<crate::client::reqbody::BodyLink>,
    /// The client's socket, for `std.set_ip_tos()`, vmod `tcp` and
    /// `debug.sndbuf()` (a Unix socket takes only the last).
    pub sock: Option<crate::client::sock::SockCtl>,
    pub now: f64,
    /// The built-in subroutine running now.
    pub cur_sub: BuiltinSub,
    /// Time of the last `Timestamp` record.
    pub t_last: f64,
    /// The client workspace (`workspace_client`, see [`crate::runtime::ws`]).
    pub ws: Workspace,
    /// Where [`ReqTask::ws`] stood once the request head was in:
    /// `std.rollback(req)` and a VCL failure go back there.
    pub ws_req: WsMark,
    /// The connection's workspace, lent to the request while it runs.
    pub sess_ws: Workspace,
    /// The worker scratch workspace (`workspace_thread`).
    pub thread_ws: Workspace,
    /// ESI depth: 0 for a client's request, n for an include n levels down.
    pub esi_level: u32,
    /// What `req_top.*` reads in an ESI include (the request itself at
    /// level 0).
    pub top: Option<Arc<TopReq>>,
    /// The response an ESI include writes its body into, lent by the
    /// including request for the include's run.
    pub esi_sink: Option<Box<crate::client::esi::EsiSink>>,
}

impl ReqTask {
    /// Logs the response head (`RespProtocol`, `RespStatus`, ...).
    pub fn log_resp(&mut self) {
        self.vsl.log_bytes(Tag::RespProtocol, &self.resp.proto);
        let status = u64::from(self.resp.status % 1000);
        self.vsl
            .log_with(Tag::RespStatus, |o| lacquer_vsl::push_u64(o, status));
        self.vsl.log_bytes(Tag::RespReason, &self.resp.reason);
        for (k, v) in self.resp.headers.iter() {
            self.vsl.log_header(Tag::RespHeader, k, v);
        }
    }

    /// The response `vcl_deliver` starts from (varnishd's
    /// `Resp_Setup_Deliver`): the object's status, reason and headers plus
    /// `X-Varnish` (with the object's vxid on a hit), `Age` and `Via`;
    /// charged to the workspace and logged. (`Accept-Ranges` is delivery's
    /// own addition, after this: a rollback does not bring it back.)
    pub fn setup_deliver_resp(&mut self, obj: &ObjRef, hit: bool) {
        let data = obj.data();
        let mut resp = RespMsg::new(data.status);
        resp.reason = data.reason.clone();
        // One reference to the object's packed headers, room for what
        // delivery and vcl_deliver typically add.
        let (buf, ranges) = data.headers.shared();
        resp.headers = lacquer_http::Headers::from_packed(buf.clone(), ranges, 8);
        let xv = if hit {
            let (mut a, mut b) = ([0u8; 20], [0u8; 20]);
            let (x, y) = (
                lacquer_vsl::u64_digits(u64::from(self.vxid), &mut a),
                lacquer_vsl::u64_digits(u64::from(obj.vxid()), &mut b),
            );
            let mut v = bytes::BytesMut::with_capacity(x.len() + 1 + y.len());
            v.extend_from_slice(x);
            v.extend_from_slice(b" ");
            v.extend_from_slice(y);
            v.freeze()
        } else {
            crate::client::req_fsm::decimal(u64::from(self.vxid))
        };
        // As varnishd: X-Varnish, Age and Accept-Ranges are printed into
        // the client workspace (Via is a constant).
        // Appended (http_PrintfHeader): an X-Varnish the backend sent is
        // kept in the object and delivered too (seed 180014).
        if self.printf_header_fits(b"X-Varnish", &xv) {
            resp.headers.append("X-Varnish", xv);
        }
        let age = crate::client::req_fsm::decimal((self.now - obj.t_origin()).max(0.0) as u64);
        if self.printf_header_fits(b"Age", &age) {
            resp.headers.set("Age", age);
        }
        resp.headers.append("Via", crate::client::req_fsm::VIA);
        // As varnishd: a gzipped object delivered to a client that does
        // not take gzip is gunzipped on the way, so its validator is weak
        // from here on (vcl_deliver and the 304 decision see `W/`).
        if data.gzip
            && self.sh.params().flag(pid!("http_gzip_support"))
            && !self
                .req
                .headers
                .get("accept-encoding")
                .is_some_and(crate::fetch::gzip::accepts_gzip)
        {
            crate::fetch::gzip::weaken_etag(&mut resp.headers);
        }
        self.resp = resp;
        self.obj = Some(obj.clone());
        self.deliver_hit = hit;
        self.vdp_filters = None;
        self.log_resp();
    }

    /// Charges a header line varnishd prints into the client workspace
    /// (`http_PrintfHeader`): on a workspace already overflowed the print
    /// fails, so the line is lost (`Error "out of workspace (req)"`,
    /// `LostHeader`, `MAIN.losthdr`) and
    /// `false` comes back (seed 190007: three lines lost at delivery after
    /// `vtc.workspace_overflow(client)`); on one without room for the line
    /// the print fails as `http_fail` does (`Error "out of workspace
    /// (req)"`, the line lost, the workspace overflowed).
    pub fn printf_header_fits(&mut self, name: &[u8], value: &[u8]) -> bool {
        use lacquer_vcl::exec::Workspace as _;
        if !self.ws.overflowed() && self.ws.take(crate::runtime::ws::header_len(name, value)) {
            return true;
        }
        // varnishd's http_fail, then the lost line.
        self.vsl.log_str(Tag::Error, "out of workspace (req)");
        self.vsl.log_header(Tag::LostHeader, name, value);
        self.sh.counters.inc(Main::losthdr);
        false
    }

    /// The response `vcl_synth` starts from (varnishd's
    /// `Resp_Setup_Synth`): the synth status and reason, `Date`, `Server`
    /// and `X-Varnish`, charged to the workspace and logged.
    pub fn setup_synth_resp(&mut self) {
        let (status, reason) = self.synth_code.clone();
        let mut resp = RespMsg::new(status);
        if let Some(r) = reason {
            resp.reason = r;
        }
        let date = lacquer_http::date::format_http_date(self.now);
        let xv = self.vxid.to_string();
        self.ws
            .take(crate::runtime::ws::header_len(b"Date", date.as_bytes()));
        self.ws
            .take(crate::runtime::ws::header_len(b"X-Varnish", xv.as_bytes()));
        resp.headers.append("Date", date);
        resp.headers.append("Server", "Varnish");
        resp.headers.append("X-Varnish", xv);
        // As varnishd: a client still waiting for 100 Continue is answered
        // and the connection closed, neither 100 sent nor body read, unless
        // vcl_synth removes this.
        if self.want_100 {
            self.ws
                .take(crate::runtime::ws::header_len(b"Connection", b"close"));
            resp.headers.append("Connection", "close");
        }
        self.resp = resp;
        self.log_resp();
    }

    /// The request tree's `PRIV_TOP` state, created on first use (an ESI
    /// include is handed its parent's before it runs).
    pub fn shared_top_privs(&mut self) -> lacquer_vcl::exec::privs::SharedPrivs {
        self.top_privs.get_or_insert_with(Default::default).clone()
    }

    /// A request about to run client-side VCL from its start, with the
    /// VCL's default backend (an ESI include sets its level, `top` and
    /// sink afterwards).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        sh: Arc<Shared>,
        vcl: Arc<LoadedVcl>,
        sess: Arc<SessInfo>,
        timeouts: SessTimeouts,
        vxid: u32,
        req: ReqMsg,
        t_req: f64,
        vsl: VslBuf,
    ) -> ReqTask {
        let params = sh.params();
        let ws = Workspace::client(&params);
        let thread_ws = Workspace::thread(&params);
        drop(params);
        ReqTask {
            _live: LiveReq::new(),
            h2: false,
            sh,
            backend_hint: vcl.default_backend(),
            vcl,
            sess,
            timeouts,
            vxid,
            vxid_str: vxid.to_string(),
            // Set by `req::handle` once X-Forwarded-For is added.
            req_orig: ReqMsg::empty(),
            req,
            t_req,
            restarts: 0,
            client_identity: None,
            ttl: None,
            grace: None,
            hash_always_miss: false,
            hash_ignore_busy: false,
            hash_ignore_vary: false,
            lookup_hook: None,
            esi: true,
            vdp_filters: None,
            is_hitmiss: false,
            is_hitpass: false,
            is_hit: false,
            storage: None,
            body_storage: None,
            hash: None,
            purging: false,
            vcl_failed: false,
            req_hdr_bytes: 0,
            req_body_bytes: 0,
            interim_hdr_bytes: 0,
            digest: None,
            resp: RespMsg::new(200),
            obj: None,
            deliver_hit: false,
            synth_body: Vec::new(),
            synth_code: (0, None),
            vsl,
            privs: Default::default(),
            top_privs: None,
            req_body: None,
            req_body_checked: 0,
            req_body_failed: false,
            body_pending: None,
            req_body_kept: false,
            req_body_read_at: None,
            body_broken: false,
            body_rx_failed: false,
            body_taken: false,
            want_100: false,
            late_100: false,
            body_link: None,
            sock: None,
            now: t_req,
            cur_sub: BuiltinSub::Recv,
            t_last: t_req,
            esi_level: 0,
            top: None,
            esi_sink: None,
            ws,
            ws_req: WsMark(Some(0)),
            // The session lends its workspace (the caller puts it here
            // and takes it back when the request ends).
            sess_ws: Workspace::session(0),
            thread_ws,
        }
    }

    /// Logs a `Timestamp` record: since the request began, since the last.
    pub fn log_ts(&mut self, label: &str) {
        self.stamp(label, lacquer_http::date::now());
    }

    /// Logs the timestamp `label` at `at` (since the request began and
    /// since the last one). Every request timestamp goes through here, so
    /// that a body read ahead of VCL is stamped first (see
    /// `req_body_read_at`) and the last-stamp times never go backwards.
    pub fn stamp(&mut self, label: &str, at: f64) {
        self.log_body_read();
        self.stamp_only(label, at);
    }

    /// Logs the timestamp `label` at `at` without stamping a body read
    /// ahead first (VCL's `std.timestamp()`: for VCL that body is read only
    /// when it asks for it).
    fn stamp_only(&mut self, label: &str, at: f64) {
        let at = at.max(self.t_last);
        self.vsl
            .log_timestamp(label, at, at - self.t_req, at - self.t_last);
        self.t_last = at;
    }

    /// Logs the `ReqBody` timestamp of a body read ahead of VCL, once (see
    /// `req_body_read_at`), never before the last timestamp.
    pub fn log_body_read(&mut self) {
        if let Some(at) = self.req_body_read_at.take() {
            let at = at.max(self.t_last);
            self.vsl
                .log_timestamp("ReqBody", at, at - self.t_req, at - self.t_last);
            self.t_last = at;
        }
    }

    /// Ends the request's vmod state (varnishd's `VCL_TaskLeave`): fini
    /// hooks log into the request's transaction, a failing end check is a
    /// `VCL_Error` there (the response is gone already). The top request
    /// also ends the `PRIV_TOP` state its ESI includes shared (they are
    /// over by then). Idempotent.
    pub fn end_privs(&mut self) {
        end_privs(&mut self.privs, &mut self.ws, &mut self.vsl);
        if self.esi_level == 0
            && let Some(top) = self.top_privs.take()
        {
            let mut top = top.lock().unwrap_or_else(|e| e.into_inner());
            end_privs(&mut top, &mut self.ws, &mut self.vsl);
        }
    }

    /// Logs the store a client body is read into (varnishd keeps it in an
    /// object of `req.storage`, else Transient), as varnishd does each
    /// time it starts reading one.
    pub fn log_body_storage(&mut self) {
        let store = self
            .storage
            .as_deref()
            .and_then(|n| self.sh.cache.store(n))
            .unwrap_or_else(|| self.sh.cache.transient());
        self.vsl.log(
            Tag::Storage,
            format_args!("{} {}", store.stevedore().kind(), store.name()),
        );
        self.charge_body_storage(&store);
    }

    /// Charges the request body's object to `store` as varnishd's
    /// `vrb_pull` makes it, once per request: the object, then storage
    /// for the body as `VFP_GetStorage` asks for it: the whole length when
    /// the request has one, else `fetch_chunksize` pieces (as many as the
    /// body kept so far fills, one for a body only passed on, whose piece
    /// is reused for each read). A charge that does not fit is counted by
    /// the store (`c_fail`) and not held.
    fn charge_body_storage(&mut self, store: &lacquer_cache::StoreRef) {
        if self.body_storage.is_some() {
            return;
        }
        let (chunk, max_chunk) = {
            let params = self.sh.params();
            (
                params.bytes(pid!("fetch_chunksize")).max(1),
                params.bytes(pid!("fetch_maxchunksize")).max(1),
            )
        };
        let length = self
            .req
            .headers
            .get("content-length")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let (body, max_chunk) = match length {
            Some(n) => (n, max_chunk),
            None => {
                let kept = match &self.req_body {
                    Some(b) if self.req_body_kept => b.len() as u64,
                    _ => 0,
                };
                (kept.div_ceil(chunk).max(1) * chunk, chunk)
            }
        };
        let plan = lacquer_cache::PiecePlan {
            estimate: None,
            chunk,
            max_chunk,
        };
        let charge = self.sh.cache.charge_req_body(store, body, plan).ok();
        self.body_storage = Some(BodyStorage {
            cache: self.sh.cache.clone(),
            charge,
        });
    }

    /// Logs the store a synthetic response's object goes to (varnishd
    /// makes one in Transient before delivering it).
    pub fn log_synth_storage(&mut self) {
        let store = self.sh.cache.transient();
        self.vsl.log(
            Tag::Storage,
            format_args!("{} {}", store.stevedore().kind(), store.name()),
        );
    }

    /// `std.cache_req_body(max)` on a body the client sends only after
    /// `100 Continue`: has the connection's owner send the 100 and read
    /// up to `max` bytes, logged as varnishd does at the call (`Storage`,
    /// the 100, `Timestamp ReqBody` once the body is whole). A body whose
    /// length already exceeds `max` is not asked for.
    fn pull_owed_body(&mut self, max: u64) {
        let Some(kind) = self.body_pending.as_ref().map(|p| p.kind()) else {
            return;
        };
        if matches!(kind, lacquer_http::BodyKind::Length(n) if n > max) {
            return;
        }
        let Some(link) = self.body_link.take() else {
            return;
        };
        self.log_body_storage();
        let pulled = link.pull(kind, max);
        self.body_link = Some(link);
        let Some(pulled) = pulled else {
            self.body_broken = true;
            return;
        };
        if pulled.sent_100 {
            self.want_100 = false;
            crate::client::reqbody::log_100(self);
        }
        match pulled.result {
            Ok((body, n)) => {
                self.sh
                    .counters
                    .add(crate::runtime::counters::Main::s_req_bodybytes, n);
                self.req_body_bytes += n;
                match body {
                    crate::client::reqbody::ReqBody::Cached(b, checked) => {
                        self.req_body = Some(b);
                        self.req_body_checked = checked;
                        self.body_pending = None;
                        self.log_ts("ReqBody");
                    }
                    crate::client::reqbody::ReqBody::Pending(p) => self.body_pending = Some(p),
                }
            }
            Err(e) => {
                self.vsl
                    .log(Tag::FetchError, format_args!("req.body read error: {e}"));
                self.body_pending = None;
                self.body_broken = true;
            }
        }
    }

    /// Goes back to the workspace as it was when the request arrived
    /// (varnishd's `Req_Rollback`), counting an overflow it clears.
    pub fn ws_rollback(&mut self) {
        if self.ws.rollback(self.ws_req) {
            self.sh.counters.inc(Main::ws_client_overflow);
        }
        self.ws.flush_trace(&mut self.vsl);
    }

    fn obj(&self) -> Result<&ObjRef, String> {
        self.obj
            .as_ref()
            .ok_or_else(|| "no object in this context".to_string())
    }

    /// `resp.filters`: what vcl_deliver set, else what delivery will do
    /// to the object's body, as varnishd lists it (`esi`, `gunzip`,
    /// `range`, each after a space).
    pub fn delivery_filters(&self) -> &[u8] {
        const LISTS: [&[u8]; 8] = [
            b"",
            b" esi",
            b" gunzip",
            b" esi gunzip",
            b" range",
            b" esi range",
            b" gunzip range",
            b" esi gunzip range",
        ];
        if let Some(l) = &self.vdp_filters {
            return l;
        }
        let params = self.sh.params();
        let data = self.obj.as_ref().map(|o| (o.data(), o.body().len_so_far()));
        let esi = self.esi
            && data
                .as_ref()
                .is_some_and(|(d, len)| d.esi.is_some() && *len != 0);
        let gunzip = params.flag(pid!("http_gzip_support"))
            && data.as_ref().is_some_and(|(d, _)| d.gzip)
            && !self
                .req
                .headers
                .get("accept-encoding")
                .is_some_and(crate::fetch::gzip::accepts_gzip);
        let range = params.flag(pid!("http_range_support"))
            && self.resp.status == 200
            && self.req.headers.contains("range");
        LISTS[usize::from(esi) | usize::from(gunzip) << 1 | usize::from(range) << 2]
    }

    /// The request `req_top.*` refers to.
    fn top_req(&self) -> &ReqMsg {
        self.top.as_ref().map_or(&self.req, |t| &t.req)
    }

    /// What the task's header, variable and log operations work on.
    fn io(&mut self) -> TaskIo<'_> {
        TaskIo {
            sh: &self.sh,
            ws: &mut self.ws,
            vsl: &mut self.vsl,
        }
    }

    /// The header list `which` names where VCL may write it (`req`, whose
    /// `req_top` is the same when set, and `resp`), with what writing it
    /// works on.
    fn http_mut(&mut self, which: HttpWhich) -> (Option<&mut lacquer_http::Headers>, TaskIo<'_>) {
        let h = match which {
            HttpWhich::Req | HttpWhich::ReqTop => Some(&mut self.req.headers),
            HttpWhich::Resp => Some(&mut self.resp.headers),
            _ => None,
        };
        let io = TaskIo {
            sh: &self.sh,
            ws: &mut self.ws,
            vsl: &mut self.vsl,
        };
        (h, io)
    }
}

impl Context for ReqTask {
    fn header(&self, which: HttpWhich, name: &HeaderName) -> Option<&[u8]> {
        match which {
            HttpWhich::Req => http_header(&self.req.headers, name),
            HttpWhich::ReqTop => http_header(&self.top_req().headers, name),
            HttpWhich::Resp => http_header(&self.resp.headers, name),
            HttpWhich::Obj => self.obj.as_ref().and_then(|o| obj_header(o, &name.lower)),
            HttpWhich::Bereq | HttpWhich::Beresp => None,
        }
    }

    fn set_header(
        &mut self,
        which: HttpWhich,
        name: &HeaderName,
        value: &[u8],
    ) -> Result<(), String> {
        let (h, io) = self.http_mut(which);
        io.set_header(which, h, name, value)
    }

    fn unset_header(&mut self, which: HttpWhich, name: &HeaderName) {
        let (h, io) = self.http_mut(which);
        io.unset_header(which, h, name);
    }

    fn get_str(&self, var: VarId) -> Result<Option<&[u8]>, String> {
        Ok(Some(match var {
            VarId::ReqMethod => &self.req.method,
            VarId::ReqUrl => &self.req.url,
            VarId::ReqProto => &self.req.proto,
            VarId::ReqTopMethod => &self.top_req().method,
            VarId::ReqTopUrl => &self.top_req().url,
            VarId::ReqTopProto => &self.top_req().proto,
            VarId::RespProto => &self.resp.proto,
            VarId::RespReason => &self.resp.reason,
            VarId::ObjProto => b"HTTP/1.1",
            VarId::ObjReason => &self.obj()?.data().reason,
            VarId::ReqTransport if self.h2 => b"HTTP/2",
            VarId::ReqTransport => b"HTTP/1",
            VarId::ReqXid => self.vxid_str.as_bytes(),
            VarId::SessXid => self.sess.vxid_str.as_bytes(),
            VarId::RespFilters => self.delivery_filters(),
            VarId::ClientIdentity => match &self.client_identity {
                Some(i) => i,
                None => &self.sess.client_ip,
            },
            VarId::ServerHostname => self.sh.hostname.as_bytes(),
            VarId::ServerIdentity => self.sh.identity.as_bytes(),
            VarId::LocalEndpoint => self.sess.endpoint.as_bytes(),
            VarId::LocalSocket => self.sess.listener.as_bytes(),
            other => return Err(not_here(other)),
        }))
    }

    fn set_str(&mut self, var: VarId, value: &[u8]) -> Result<(), String> {
        let v = Bytes::copy_from_slice(value);
        let tag = match var {
            VarId::ReqMethod => Some(Tag::ReqMethod),
            VarId::ReqUrl => Some(Tag::ReqURL),
            VarId::ReqProto => Some(Tag::ReqProtocol),
            VarId::RespProto => Some(Tag::RespProtocol),
            VarId::RespReason => Some(Tag::RespReason),
            _ => None,
        };
        let unchanged = matches!(self.get_str(var), Ok(Some(cur)) if cur == value);
        let charge = !unchanged && !matches!(var, VarId::RespBody);
        self.io().set_str(var, tag, charge, value)?;
        match var {
            VarId::ReqMethod => self.req.method = v,
            VarId::ReqUrl => self.req.url = v,
            VarId::ReqProto => self.req.proto = v,
            VarId::RespProto => self.resp.proto = v,
            VarId::RespReason => self.resp.reason = v,
            VarId::ClientIdentity => self.client_identity = Some(v),
            VarId::RespFilters => self.vdp_filters = Some(v),
            VarId::RespBody => {
                self.synth_body.clear();
                self.synth_body.extend_from_slice(value);
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
            VarId::ReqRestarts => Value::Int(i64::from(self.restarts)),
            VarId::ReqTime => Value::Time(self.t_req),
            VarId::ReqTopTime => Value::Time(self.top.as_ref().map_or(self.t_req, |t| t.t_req)),
            VarId::ReqTtl => self.ttl.map_or(Value::Duration(-1.0), Value::Duration),
            VarId::ReqGrace => self.grace.map_or(Value::Duration(-1.0), Value::Duration),
            VarId::ReqBackendHint => match &self.backend_hint {
                Some(b) => Value::Backend(b.clone()),
                None => Value::Null,
            },
            VarId::ReqHashAlwaysMiss => Value::Bool(self.hash_always_miss),
            VarId::ReqHashIgnoreBusy => Value::Bool(self.hash_ignore_busy),
            VarId::ReqHashIgnoreVary => Value::Bool(self.hash_ignore_vary),
            VarId::ReqCanGzip => Value::Bool(
                self.req
                    .headers
                    .get("accept-encoding")
                    .is_some_and(crate::fetch::gzip::accepts_gzip),
            ),
            VarId::ReqEsi => Value::Bool(self.esi),
            VarId::ReqEsiLevel => Value::Int(i64::from(self.esi_level)),
            VarId::ReqIsHitmiss => Value::Bool(self.is_hitmiss),
            VarId::ReqIsHitpass => Value::Bool(self.is_hitpass),
            VarId::ReqStorage => match &self.storage {
                Some(s) => Value::Stevedore(s.clone()),
                None => Value::Null,
            },
            VarId::ReqHash => match &self.digest {
                Some(d) => Value::Blob(Bytes::copy_from_slice(&d[..])),
                None => Value::Null,
            },
            VarId::RespStatus => Value::Int(i64::from(self.resp.status)),
            VarId::RespIsStreaming => {
                Value::Bool(self.obj.as_ref().is_some_and(|o| !o.body().is_finished()))
            }
            VarId::RespDoEsi => Value::Bool(self.esi),
            VarId::RespTime => Value::Time(self.now),
            VarId::ObjStatus => Value::Int(i64::from(self.obj()?.data().status)),
            VarId::ObjHits => Value::Int(self.obj()?.hits() as i64),
            VarId::ObjTtl => {
                // As varnishd: a negative stored ttl counts as 0, and the
                // age is taken at the request's start except in vcl_deliver.
                let o = self.obj()?;
                let at = if self.cur_sub == BuiltinSub::Deliver {
                    self.now
                } else {
                    self.t_req
                };
                Value::Duration(o.ttl().max(0.0) - (at - o.t_origin()))
            }
            VarId::ObjGrace => Value::Duration(self.obj()?.grace().max(0.0)),
            VarId::ObjKeep => Value::Duration(self.obj()?.keep().max(0.0)),
            VarId::ObjAge => Value::Duration(self.now - self.obj()?.t_origin()),
            VarId::ObjTime => Value::Time(self.obj()?.t_origin()),
            VarId::ObjUncacheable => Value::Bool({
                let f = self.obj()?.flags();
                f.private() || f.hit_for_miss() || f.hit_for_pass()
            }),
            VarId::ObjCanEsi => Value::Bool(self.obj()?.data().esi.is_some()),
            VarId::ObjStorage => match self.obj()?.store_name() {
                Some(n) => Value::Stevedore(Arc::from(n)),
                None => Value::Null,
            },
            VarId::SessTimeoutIdle => Value::Duration(self.timeouts.timeout_idle),
            VarId::SessTimeoutLinger => Value::Duration(self.timeouts.timeout_linger),
            VarId::SessSendTimeout => Value::Duration(self.timeouts.send_timeout),
            VarId::SessIdleSendTimeout => Value::Duration(self.timeouts.idle_send_timeout),
            VarId::Now => Value::Time(self.now),
            other => {
                return match self.get_str(other)? {
                    Some(s) => Ok(Value::Str(Bytes::copy_from_slice(s))),
                    None => Ok(Value::Null),
                };
            }
        })
    }

    fn set(&mut self, var: VarId, value: Value) -> Result<(), String> {
        match var {
            VarId::ReqTtl => self.ttl = Some(as_f64(&value)?),
            VarId::ReqGrace => self.grace = Some(as_f64(&value)?),
            VarId::ReqBackendHint => self.backend_hint = as_backend(value)?,
            VarId::ReqHashAlwaysMiss => self.hash_always_miss = as_bool(&value)?,
            VarId::ReqHashIgnoreBusy => self.hash_ignore_busy = as_bool(&value)?,
            VarId::ReqHashIgnoreVary => self.hash_ignore_vary = as_bool(&value)?,
            // As varnishd: only the top request can turn ESI off this way.
            VarId::ReqEsi => {
                let v = as_bool(&value)?;
                if self.esi_level == 0 {
                    self.esi = v;
                }
            }
            VarId::ReqStorage => self.storage = stevedore_name(value)?,
            VarId::RespStatus => {
                let s = vcl_status("resp", as_int(&value)?)?;
                self.resp.status = s;
                // As varnishd: a status change also sets the default reason.
                self.resp.reason =
                    Bytes::from_static(crate::runtime::msg::reason(s % 1000).as_bytes());
                // As varnishd's http_SetStatus: the digits above the
                // hundreds are VCL's own, the logged field drops them.
                self.vsl
                    .log(Tag::RespStatus, format_args!("{:03}", s % 1000));
                self.vsl.log_bytes(Tag::RespReason, &self.resp.reason);
            }
            // As varnishd: once VCL fixed resp.filters, whether ESI runs
            // is theirs to say.
            VarId::RespDoEsi if self.vdp_filters.is_some() => {
                return Err("resp.filters are already fixed, resp.do_esi is undefined".into());
            }
            VarId::RespDoEsi => self.esi = as_bool(&value)?,
            VarId::RespBody => match value {
                Value::Str(s) | Value::Blob(s) => {
                    self.synth_body.clear();
                    self.synth_body.extend_from_slice(&s);
                }
                Value::Null => self.synth_body.clear(),
                other => return Err(format!("cannot set resp.body to {}", other.type_name())),
            },
            VarId::SessTimeoutIdle => self.timeouts.timeout_idle = as_f64(&value)?,
            VarId::SessTimeoutLinger => self.timeouts.timeout_linger = as_f64(&value)?,
            VarId::SessSendTimeout => self.timeouts.send_timeout = as_f64(&value)?,
            VarId::SessIdleSendTimeout => self.timeouts.idle_send_timeout = as_f64(&value)?,
            other => match value {
                Value::Str(s) => return self.set_str(other, &s),
                _ => return Err(not_here(other)),
            },
        }
        Ok(())
    }

    fn unset(&mut self, var: VarId) -> Result<(), String> {
        match var {
            VarId::ReqHttp | VarId::ReqTopHttp => Ok(()),
            _ => Err(not_here(var)),
        }
    }

    fn storage_var(&self, var: VarId, storage: &str) -> Result<Value, String> {
        storage_value(&self.sh, var, storage)
    }

    fn hash_data(&mut self, data: Option<&[u8]>) {
        if let Some(h) = self.hash.as_mut() {
            if let Some(d) = data {
                self.vsl.log_bytes(Tag::Hash, d);
            }
            h.hash_data_strands(&[data]);
        }
    }

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
        Some(self.shared_top_privs())
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
            HttpWhich::Req => self.req.headers.iter().collect(),
            HttpWhich::ReqTop => self.top_req().headers.iter().collect(),
            HttpWhich::Resp => self.resp.headers.iter().collect(),
            HttpWhich::Obj => self
                .obj
                .as_ref()
                .map(|o| o.data().headers.iter().collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    fn add_header(
        &mut self,
        which: HttpWhich,
        name: &HeaderName,
        value: &[u8],
    ) -> Result<(), String> {
        let (h, io) = self.http_mut(which);
        io.add_header(which, h, name, value)
    }

    fn replace_headers(
        &mut self,
        which: HttpWhich,
        lines: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), String> {
        let (h, io) = self.http_mut(which);
        io.replace_headers(which, h, lines)
    }

    fn rollback(&mut self, which: HttpWhich) -> Result<(), String> {
        match which {
            HttpWhich::Req | HttpWhich::ReqTop => {
                // As varnishd: the request, its vmod state and its
                // workspace go back to how the request arrived.
                self.req = self.req_orig.clone();
                self.lookup_hook = None;
                let failed = finish_privs(&mut self.privs, &mut self.vsl)
                    .into_iter()
                    .next();
                self.ws_rollback();
                // In vcl_deliver and vcl_synth the response starts over too.
                match self.cur_sub {
                    BuiltinSub::Synth => self.setup_synth_resp(),
                    BuiltinSub::Deliver => {
                        if let Some(obj) = self.obj.clone() {
                            let hit = self.deliver_hit;
                            self.setup_deliver_resp(&obj, hit);
                        }
                    }
                    _ => {}
                }
                failed.map_or(Ok(()), Err)
            }
            w => Err(format!("cannot roll back {} here", w.name())),
        }
    }

    fn cache_req_body(&mut self, max: u64) -> Result<bool, String> {
        if self.want_100 {
            self.pull_owed_body(max);
        }
        if self.body_broken {
            return Ok(false);
        }
        // What fits any limit in this VCL was read ahead before VCL ran (or
        // just now, for a client that waited for 100 Continue); a body
        // still pending is larger than that.
        let fits = match &self.req_body {
            Some(_) => self.req_body_checked <= max,
            None => self.body_pending.is_none(),
        };
        if !fits {
            // As varnishd's VRB_Cache: the failure is logged at the call;
            // a body without a length too large was being stored when it
            // outgrew the limit.
            let announced_too_big = self
                .req_orig
                .headers
                .get("content-length")
                .and_then(lacquer_http::parse_content_length)
                .is_some_and(|n| n > max);
            if !announced_too_big {
                self.log_body_storage();
            }
            self.req_body_failed = true;
            self.vsl
                .log_str(Tag::FetchError, "Request body too big to cache");
        } else if let Some(len) = self.req_body.as_ref().map(|b| b.len()) {
            self.req_body_kept = true;
            // As varnishd: the kept body goes to storage, and this is
            // where it is read.
            if self.req_body_read_at.is_some() {
                self.req_body_read_at = Some(lacquer_http::date::now());
                self.log_body_storage();
                self.log_body_read();
            }
            // As varnishd: a cached body is forwarded with its length.
            let len = len.to_string();
            self.req.headers.remove("transfer-encoding");
            self.req.headers.set("Content-Length", len);
        }
        Ok(fits)
    }

    fn late_100_continue(&mut self, late: bool) {
        self.late_100 = late;
    }

    fn set_ip_tos(&mut self, tos: i64) -> Result<(), String> {
        // As varnishd: silently nothing on a connection without IP.
        match self.sock.as_ref().filter(|s| s.is_tcp()) {
            Some(s) => s
                .set_tos(tos)
                .map_err(|e| format!("std.set_ip_tos({tos}): {e}")),
            None => Ok(()),
        }
    }

    fn timestamp(&mut self, label: &[u8]) {
        self.stamp_only(&String::from_utf8_lossy(label), lacquer_http::date::now());
    }

    fn purge(&mut self, ttl: f64, grace: f64, keep: f64) -> Result<i64, String> {
        let d = self.digest.ok_or("purge: no hash computed yet")?;
        Ok(self.sh.cache.purge(&d, self.now, ttl, grace, keep) as i64)
    }

    fn digest(&self) -> Option<[u8; 32]> {
        self.digest
    }

    fn proxy_tlv(&self, kind: u8) -> Option<&[u8]> {
        lacquer_http::proxy::find_tlv(&self.sess.proxy_tlvs, kind)
    }

    fn workspace(&mut self, which: WsKind) -> Option<&mut dyn lacquer_vcl::exec::Workspace> {
        Some(match which {
            WsKind::Task => &mut self.ws,
            WsKind::Session => &mut self.sess_ws,
            WsKind::Thread => &mut self.thread_ws,
            WsKind::Backend => return None,
        })
    }

    fn peer_cred(&self) -> Option<(u32, u32)> {
        None
    }

    fn cached_req_body(&self) -> Option<&[u8]> {
        // Only what std.cache_req_body() kept: a body merely read ahead
        // for it is not cached yet (varnishd's BS_CACHED).
        self.req_body.as_deref().filter(|_| self.req_body_kept)
    }

    fn tcp_set(&mut self, op: lacquer_vcl::exec::TcpOp<'_>) -> Result<(), String> {
        use lacquer_vcl::exec::TcpOp;
        // SO_SNDBUF applies to any socket, the rest to TCP only.
        let any_socket = matches!(op, TcpOp::SendBuffer(_));
        let sock = self
            .sock
            .as_ref()
            .filter(|s| any_socket || s.is_tcp())
            .ok_or("not a TCP connection (Unix socket)")?;
        match op {
            TcpOp::Congestion(name) => sock.set_congestion(name).map_err(|e| e.to_string()),
            TcpOp::PacingRate(rate) => {
                sock.set_pacing(rate);
                Ok(())
            }
            TcpOp::SendBuffer(size) => {
                let (fd, old, actual) = sock.set_send_buffer(size)?;
                self.vsl.log(
                    Tag::Debug,
                    format_args!("SO_SNDBUF fd={fd} old={old} new={size} actual={actual}"),
                );
                Ok(())
            }
        }
    }

    fn tcp_info(&self) -> Result<lacquer_vcl::exec::TcpInfo, String> {
        self.sock
            .as_ref()
            .filter(|s| s.is_tcp())
            .ok_or("not a TCP connection (Unix socket)")?
            .tcp_info()
            .map_err(|e| format!("TCP_INFO: {e}"))
    }

    fn set_lookup_hook(
        &mut self,
        hook: Box<dyn lacquer_vcl::exec::LookupHook>,
    ) -> Result<(), String> {
        if self.lookup_hook.is_some() {
            return Err("the request's cache lookup is hooked already".into());
        }
        self.lookup_hook = Some(hook);
        Ok(())
    }
}

impl crate::runtime::task::TaskSub for ReqTask {
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
}

/// Storage a request body's object holds (varnishd's `req->body_oc`),
/// given back to its store when the request ends (`VRB_Free`).
pub struct BodyStorage {
    cache: Arc<lacquer_cache::Cache>,
    charge: Option<lacquer_cache::Charge>,
}

impl Drop for BodyStorage {
    fn drop(&mut self) {
        if let Some(c) = self.charge.take() {
            self.cache.release_charge(c);
        }
    }
}
