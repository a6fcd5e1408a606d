//! A self-contained [`Context`] for tests and benchmarks: plain vectors of
//! headers per HTTP object, a map of other variables, and recorders for
//! hash input, synthetic body, bans and log records. It enforces nothing
//! the server would (variable availability per method, status ranges)
//! beyond keeping types straight.

use std::collections::HashMap;

use super::context::{Context, HeaderName, HttpWhich, LogKind};
use super::value::Value;
use crate::vars::VarId;

/// Headers of one HTTP object, in insertion order.
#[derive(Clone, Debug, Default)]
pub struct MockHttp {
    /// (name as set, value)
    pub headers: Vec<(Box<str>, Vec<u8>)>,
}

impl MockHttp {
    fn position(&self, lower: &[u8]) -> Option<usize> {
        self.headers
            .iter()
            .position(|(n, _)| n.as_bytes().eq_ignore_ascii_case(lower))
    }

    /// The first value of a header (case-insensitive name).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.position(name.as_bytes())
            .map(|i| &self.headers[i].1[..])
    }
}

/// The mock task.
#[derive(Clone, Debug, Default)]
pub struct MockContext {
    pub http: [MockHttp; 6],
    /// STRING variables (`req.url`, `req.method`, `resp.reason`, ...).
    pub strings: HashMap<VarId, Vec<u8>>,
    /// Every other variable.
    pub vars: HashMap<VarId, Value>,
    /// One entry per `hash_data()` call.
    pub hash: Vec<Option<Vec<u8>>>,
    pub synthetic: Vec<u8>,
    pub bans: Vec<Vec<u8>>,
    /// Bans are rejected with this reason when set.
    pub ban_error: Option<String>,
    pub logs: Vec<(LogKind, String)>,
    pub now: f64,
}

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
        self.http[slot(which)]
            .headers
            .push((name.into(), value.as_bytes().to_vec()));
        self
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
        let h = &self.http[slot(which)];
        h.position(&name.lower).map(|i| &h.headers[i].1[..])
    }

    fn set_header(&mut self, which: HttpWhich, name: &HeaderName, value: &[u8]) {
        let h = &mut self.http[slot(which)];
        match h.position(&name.lower) {
            Some(i) => {
                let v = &mut h.headers[i].1;
                v.clear();
                v.extend_from_slice(value);
                let mut j = i + 1;
                while j < h.headers.len() {
                    if h.headers[j].0.as_bytes().eq_ignore_ascii_case(&name.lower) {
                        h.headers.remove(j);
                    } else {
                        j += 1;
                    }
                }
            }
            None => h.headers.push((name.name.clone(), value.to_vec())),
        }
    }

    fn unset_header(&mut self, which: HttpWhich, name: &HeaderName) {
        self.http[slot(which)]
            .headers
            .retain(|(n, _)| !n.as_bytes().eq_ignore_ascii_case(&name.lower));
    }

    fn get_str(&self, var: VarId) -> Result<Option<&[u8]>, String> {
        Ok(self.strings.get(&var).map(|v| &v[..]))
    }

    fn set_str(&mut self, var: VarId, value: &[u8]) -> Result<(), String> {
        let v = self.strings.entry(var).or_default();
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

    fn resolve_backend(&mut self, backend: &Value) -> Result<Value, String> {
        Ok(backend.clone())
    }

    fn now(&self) -> f64 {
        self.now
    }
}
