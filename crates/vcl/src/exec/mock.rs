//! A self-contained [`Context`] for tests and benchmarks: the server's
//! header lists ([`lacquer_http::Headers`]) per HTTP object, so header
//! reads and changes cost what they cost in the server, a map of other variables, and recorders for
//! hash input, synthetic body, bans and log records. It enforces nothing
//! the server would (variable availability per method, status ranges)
//! beyond keeping types straight.

use std::collections::HashMap;

use bytes::Bytes;
use lacquer_http::Headers;

use super::context::{
    Context, HeaderName, HttpWhich, LogKind, TcpInfo, TcpOp, Workspace, WsKind, WsMark,
};
use super::privs::{SharedPrivs, TaskPrivs};
use super::value::Value;
use crate::subs::BuiltinSub;
use crate::vars::VarId;

/// Headers of one HTTP object, in insertion order.
#[derive(Clone, Debug, Default)]
pub struct MockHttp {
    /// The lines, names as set.
    pub headers: Headers,
}

impl MockHttp {
    /// The first value of a header (case-insensitive name).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.headers.get(name)
    }
}

/// A map keyed by [`VarId`], stored as a vector indexed by the id so that
/// lookups cost what a real context's field access would.
#[derive(Clone, Debug)]
pub struct VarMap<T> {
    slots: Vec<Option<T>>,
}

impl<T> Default for VarMap<T> {
    fn default() -> Self {
        VarMap { slots: Vec::new() }
    }
}

impl<T> VarMap<T> {
    /// Sets a variable.
    pub fn insert(&mut self, var: VarId, value: T) {
        let i = var as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i] = Some(value);
    }

    /// Reads a variable.
    pub fn get(&self, var: &VarId) -> Option<&T> {
        self.slots.get(*var as usize).and_then(Option::as_ref)
    }

    /// Removes a variable.
    pub fn remove(&mut self, var: &VarId) -> Option<T> {
        self.slots.get_mut(*var as usize).and_then(Option::take)
    }

    fn slot(&mut self, var: VarId) -> &mut Option<T> {
        let i = var as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        &mut self.slots[i]
    }
}

/// The mock task.
#[derive(Clone, Debug, Default)]
pub struct MockContext {
    pub http: [MockHttp; 6],
    /// STRING variables (`req.url`, `req.method`, `resp.reason`, ...).
    pub strings: VarMap<Vec<u8>>,
    /// Every other variable.
    pub vars: VarMap<Value>,
    /// One entry per `hash_data()` call.
    pub hash: Vec<Option<Vec<u8>>>,
    pub synthetic: Vec<u8>,
    pub bans: Vec<Vec<u8>>,
    /// Bans are rejected with this reason when set.
    pub ban_error: Option<String>,
    pub logs: Vec<(LogKind, String)>,
    /// Records written with `log_raw`, as `VXID TAG SIDE PAYLOAD`.
    pub raw_logs: Vec<String>,
    pub now: f64,
    /// The task's workspace, when a test wants charges accounted
    /// (`None`: the mock has no workspace and takes any size).
    pub ws: Option<MockWs>,
    /// What the vmod services of the context see and record.
    pub vmod: MockVmodState,
}

/// A plain workspace for the mock: a size, what is used, the overflow mark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MockWs {
    pub size: u64,
    pub used: u64,
    pub overflowed: bool,
}

impl MockWs {
    /// An empty workspace of `size` bytes.
    pub fn new(size: u64) -> MockWs {
        MockWs {
            size,
            used: 0,
            overflowed: false,
        }
    }
}

impl Workspace for MockWs {
    fn free(&self) -> u64 {
        self.size - self.used
    }
    fn alloc(&mut self, n: u64) -> bool {
        let n = n.div_ceil(8) * 8;
        if n > self.free() {
            self.overflowed = true;
            return false;
        }
        self.used += n;
        true
    }
    fn snapshot(&mut self) -> WsMark {
        WsMark((!self.overflowed).then_some(self.used))
    }
    fn reset(&mut self, mark: WsMark) {
        if let WsMark(Some(at)) = mark {
            self.used = at.min(self.used);
        }
    }
    fn mark_overflow(&mut self) {
        self.overflowed = true;
    }
    fn overflowed(&self) -> bool {
        self.overflowed
    }
}

/// The mock's side of the vmod services ([`Context::privs`] and the
/// methods after it).
#[derive(Debug, Default)]
pub struct MockVmodState {
    pub privs: TaskPrivs,
    /// `PRIV_TOP` state, created on first use.
    pub top_privs: Option<SharedPrivs>,
    /// The subroutine reported by [`Context::sub`] (`None` reads as `vcl_recv`).
    pub sub: Option<BuiltinSub>,
    /// Headers as first received, per HTTP object, for `rollback`.
    pub original: HashMap<usize, MockHttp>,
    /// The request body, for `cache_req_body`.
    pub req_body: Option<Vec<u8>>,
    pub body_cached: bool,
    pub late_100: Option<bool>,
    pub ip_tos: Option<i64>,
    pub timestamps: Vec<String>,
    /// (ttl, grace, keep) of each purge call.
    pub purges: Vec<(f64, f64, f64)>,
    /// Objects a purge reports as affected.
    pub purge_count: i64,
    pub digest: Option<[u8; 32]>,
    pub proxy_tlvs: HashMap<u8, Vec<u8>>,
    pub peer_cred: Option<(u32, u32)>,
    /// `TCP_INFO` reported to `vmod tcp`; `tcp_set` records into it.
    pub tcp: Option<TcpInfo>,
    /// Pacing rates set, bytes per second.
    pub pacing: Vec<u64>,
}

impl Clone for MockVmodState {
    /// Clones everything but the per-task vmod state, which is not
    /// cloneable; the clone starts with empty [`TaskPrivs`].
    fn clone(&self) -> MockVmodState {
        MockVmodState {
            privs: TaskPrivs::new(),
            top_privs: None,
            sub: self.sub,
            original: self.original.clone(),
            req_body: self.req_body.clone(),
            body_cached: self.body_cached,
            late_100: self.late_100,
            ip_tos: self.ip_tos,
            timestamps: self.timestamps.clone(),
            purges: self.purges.clone(),
            purge_count: self.purge_count,
            digest: self.digest,
            proxy_tlvs: self.proxy_tlvs.clone(),
            peer_cred: self.peer_cred,
            tcp: self.tcp.clone(),
            pacing: self.pacing.clone(),
        }
    }
}

/// Header lines reserved beyond those a mock request is built with, as
/// the server's parser reserves.
const EXTRA_LINES: usize = 8;

fn slot(which: HttpWhich) -> usize {
    match which {
        HttpWhich::Req => 0,
        HttpWhich::ReqTop => 1,
        HttpWhich::Bereq => 2,
        HttpWhich::Beresp => 3,
        HttpWhich::Resp => 4,
        HttpWhich::Obj => 5,
    }
}

impl MockContext {
    /// A client request with a method and URL, protocol HTTP/1.1.
    pub fn new(method: &str, url: &str) -> MockContext {
        let mut c = MockContext {
            now: 1_700_000_000.0,
            ..MockContext::default()
        };
        c.strings
            .insert(VarId::ReqMethod, method.as_bytes().to_vec());
        c.strings.insert(VarId::ReqUrl, url.as_bytes().to_vec());
        c.strings.insert(VarId::ReqProto, b"HTTP/1.1".to_vec());
        c
    }

    /// Adds a header to an HTTP object (builder style).
    pub fn with_header(mut self, which: HttpWhich, name: &str, value: &str) -> MockContext {
        // Built as the server builds a received head: every line a range
        // of one shared buffer, with room for the lines VCL adds.
        let h = &mut self.http[slot(which)].headers;
        let mut buf = Vec::new();
        let mut ranges = Vec::new();
        for (n, v) in h.iter().chain([(name.as_bytes(), value.as_bytes())]) {
            let start = buf.len() as u32;
            buf.extend_from_slice(n);
            let vs = buf.len() as u32;
            buf.extend_from_slice(v);
            ranges.push((start, vs, buf.len() as u32));
        }
        *h = Headers::from_packed(Bytes::from(buf), &ranges, EXTRA_LINES);
        self
    }

    /// Records the current headers of an HTTP object as its received
    /// state, what [`Context::rollback`] restores.
    pub fn snapshot(&mut self, which: HttpWhich) {
        let h = self.http[slot(which)].clone();
        self.vmod.original.insert(slot(which), h);
    }

    /// The headers of one HTTP object.
    pub fn http(&self, which: HttpWhich) -> &MockHttp {
        &self.http[slot(which)]
    }

    /// A STRING variable as text.
    pub fn string(&self, var: VarId) -> Option<&str> {
        self.strings
            .get(&var)
            .and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The log messages of one kind.
    pub fn logs_of(&self, kind: LogKind) -> Vec<&str> {
        self.logs
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, m)| m.as_str())
            .collect()
    }
}

impl Context for MockContext {
    fn header(&self, which: HttpWhich, name: &HeaderName) -> Option<&[u8]> {
        self.http[slot(which)].headers.get(&name.lower[..])
    }

    fn set_header(
        &mut self,
        which: HttpWhich,
        name: &HeaderName,
        value: &[u8],
    ) -> Result<(), String> {
        self.http[slot(which)]
            .headers
            .set_copied(&name.spelling, value);
        Ok(())
    }

    fn unset_header(&mut self, which: HttpWhich, name: &HeaderName) {
        self.http[slot(which)].headers.remove(&name.lower[..]);
    }

    fn get_str(&self, var: VarId) -> Result<Option<&[u8]>, String> {
        Ok(self.strings.get(&var).map(|v| &v[..]))
    }

    fn set_str(&mut self, var: VarId, value: &[u8]) -> Result<(), String> {
        let v = self.strings.slot(var).get_or_insert_with(Vec::new);
        v.clear();
        v.extend_from_slice(value);
        Ok(())
    }

    fn get(&self, var: VarId) -> Result<Value, String> {
        if var == VarId::Now {
            return Ok(Value::Time(self.now));
        }
        Ok(self.vars.get(&var).cloned().unwrap_or(Value::Null))
    }

    fn set(&mut self, var: VarId, value: Value) -> Result<(), String> {
        if (var == VarId::RespStatus || var == VarId::BerespStatus)
            && let Value::Int(s) = value
            && !(0..=65535).contains(&s)
        {
            return Err(format!("status ({s}) out of range"));
        }
        self.vars.insert(var, value);
        Ok(())
    }

    fn unset(&mut self, var: VarId) -> Result<(), String> {
        self.vars.remove(&var);
        self.strings.remove(&var);
        Ok(())
    }

    fn storage_var(&self, var: VarId, storage: &str) -> Result<Value, String> {
        match var {
            VarId::StorageHappy => Ok(Value::Bool(true)),
            VarId::StorageFreeSpace | VarId::StorageUsedSpace => Ok(Value::Bytes(0)),
            _ => Err(format!("no such storage variable for {storage}")),
        }
    }

    fn hash_data(&mut self, data: Option<&[u8]>) {
        self.hash.push(data.map(<[u8]>::to_vec));
    }

    fn synthetic(&mut self, data: &[u8]) {
        self.synthetic.extend_from_slice(data);
    }

    fn ban(&mut self, spec: &[u8]) -> Result<(), String> {
        if let Some(e) = &self.ban_error {
            return Err(e.clone());
        }
        self.bans.push(spec.to_vec());
        Ok(())
    }

    fn log(&mut self, kind: LogKind, msg: &[u8]) {
        self.logs
            .push((kind, String::from_utf8_lossy(msg).into_owned()));
    }

    fn log_raw(&mut self, tag: &str, vxid: u32, backend: bool, msg: &[u8]) -> Result<(), String> {
        let side = if backend { 'b' } else { 'c' };
        self.raw_logs.push(format!(
            "{vxid} {tag} {side} {}",
            String::from_utf8_lossy(msg)
        ));
        Ok(())
    }

    fn resolve_backend(&mut self, backend: &Value) -> Result<Value, String> {
        Ok(backend.clone())
    }

    fn now(&self) -> f64 {
        self.now
    }

    fn privs(&mut self) -> &mut TaskPrivs {
        &mut self.vmod.privs
    }

    fn top_privs(&mut self) -> Option<SharedPrivs> {
        Some(
            self.vmod
                .top_privs
                .get_or_insert_with(Default::default)
                .clone(),
        )
    }

    fn sub(&self) -> BuiltinSub {
        self.vmod.sub.unwrap_or(BuiltinSub::Recv)
    }

    fn headers(&self, which: HttpWhich) -> Vec<(&[u8], &[u8])> {
        self.http[slot(which)].headers.iter().collect()
    }

    fn add_header(
        &mut self,
        which: HttpWhich,
        name: &HeaderName,
        value: &[u8],
    ) -> Result<(), String> {
        if which == HttpWhich::Obj {
            return Err("obj.http is read-only".into());
        }
        self.http[slot(which)]
            .headers
            .append(name.spelling.clone(), Bytes::copy_from_slice(value));
        Ok(())
    }

    fn replace_headers(
        &mut self,
        which: HttpWhich,
        lines: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<(), String> {
        if which == HttpWhich::Obj {
            return Err("obj.http is read-only".into());
        }
        let h = &mut self.http[slot(which)].headers;
        *h = Headers::with_capacity(lines.len());
        for (n, v) in lines {
            h.append(n, v);
        }
        Ok(())
    }

    fn rollback(&mut self, which: HttpWhich) -> Result<(), String> {
        match self.vmod.original.get(&slot(which)) {
            Some(h) => {
                self.http[slot(which)] = h.clone();
                Ok(())
            }
            None => Err(format!("cannot roll back {}", which.name())),
        }
    }

    fn cache_req_body(&mut self, max: u64) -> Result<bool, String> {
        let fits = self
            .vmod
            .req_body
            .as_ref()
            .is_none_or(|b| b.len() as u64 <= max);
        self.vmod.body_cached = fits;
        Ok(fits)
    }

    fn cached_req_body(&self) -> Option<&[u8]> {
        if self.vmod.body_cached {
            Some(self.vmod.req_body.as_deref().unwrap_or_default())
        } else {
            None
        }
    }

    fn late_100_continue(&mut self, late: bool) {
        self.vmod.late_100 = Some(late);
    }

    fn set_ip_tos(&mut self, tos: i64) -> Result<(), String> {
        self.vmod.ip_tos = Some(tos);
        Ok(())
    }

    fn timestamp(&mut self, label: &[u8]) {
        self.vmod
            .timestamps
            .push(String::from_utf8_lossy(label).into_owned());
    }

    fn purge(&mut self, ttl: f64, grace: f64, keep: f64) -> Result<i64, String> {
        self.vmod.purges.push((ttl, grace, keep));
        Ok(self.vmod.purge_count)
    }

    fn digest(&self) -> Option<[u8; 32]> {
        self.vmod.digest
    }

    fn proxy_tlv(&self, kind: u8) -> Option<&[u8]> {
        self.vmod.proxy_tlvs.get(&kind).map(|v| &v[..])
    }

    fn workspace(&mut self, which: WsKind) -> Option<&mut dyn Workspace> {
        match which {
            WsKind::Task => self.ws.as_mut().map(|w| w as &mut dyn Workspace),
            _ => None,
        }
    }

    fn peer_cred(&self) -> Option<(u32, u32)> {
        self.vmod.peer_cred
    }

    fn tcp_set(&mut self, op: TcpOp<'_>) -> Result<(), String> {
        let tcp = self.vmod.tcp.as_mut().ok_or("not a TCP connection")?;
        match op {
            TcpOp::Congestion(name) => {
                if !matches!(name, b"cubic" | b"reno" | b"bbr" | b"hybla") {
                    return Err("No such file or directory".into());
                }
                tcp.congestion = name.to_vec();
            }
            TcpOp::PacingRate(r) => self.vmod.pacing.push(r),
            TcpOp::SendBuffer(b) => tcp.snd_mss = b.min(u64::from(u32::MAX)) as u32,
        }
        Ok(())
    }

    fn tcp_info(&self) -> Result<TcpInfo, String> {
        self.vmod
            .tcp
            .clone()
            .ok_or_else(|| "no TCP_INFO set in the mock".to_string())
    }
}
