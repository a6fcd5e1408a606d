//! Grouping log records into transactions, like varnishlog's `-g` option.
//!
//! Records of one VXID form a transaction that starts with `Begin` and ends
//! with `End`. Transactions are linked: a session `Link`s to its requests, a
//! request to its backend fetches, ESI sub-requests and restarts (and every
//! child's `Begin` names its parent). Depending on the grouping mode, a
//! *group* reported to the caller is
//!
//! * `raw`: every record alone (level 0), including non-transactional ones;
//! * `vxid`: every transaction alone (level 1);
//! * `request`: a client request with all its descendants;
//! * `session`: a session with all its requests and their descendants.
//!
//! A group is reported once every transaction in it has ended. Groups that
//! never complete are forced out by [`Grouper::flush`] (end of input),
//! [`Grouper::expire`] (timeout) or when too many are pending, with
//! synthetic `Begin`/`End` records and a `VSL` record saying why, as Varnish
//! does.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::record::{Record, Vxid};
use crate::tags::Tag;

/// Grouping mode (`-g`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Grouping {
    /// Every record on its own.
    Raw,
    /// Every transaction on its own (the default).
    Vxid,
    /// Client requests with their descendants.
    Request,
    /// Sessions with everything they initiated.
    Session,
}

impl FromStr for Grouping {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "raw" => Ok(Grouping::Raw),
            "vxid" => Ok(Grouping::Vxid),
            "request" => Ok(Grouping::Request),
            "session" => Ok(Grouping::Session),
            _ => Err(format!(
                "unknown grouping \"{s}\": use one of raw, vxid, request, session"
            )),
        }
    }
}

/// Kind of a transaction.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TxType {
    /// Seen only through links, never its own `Begin`.
    Unknown,
    /// Client connection.
    Session,
    /// Client request (including ESI sub-requests and restarts).
    Request,
    /// Backend request.
    BeReq,
    /// A single record (raw grouping).
    Record,
}

impl TxType {
    fn from_begin(word: &str) -> TxType {
        match word {
            "sess" => TxType::Session,
            "req" => TxType::Request,
            "bereq" => TxType::BeReq,
            _ => TxType::Unknown,
        }
    }

    fn begin_word(self) -> &'static str {
        match self {
            TxType::Session => "sess",
            TxType::Request => "req",
            TxType::BeReq => "bereq",
            TxType::Unknown | TxType::Record => "unknown",
        }
    }

    /// The 14-column label varnishlog prints in transaction headers.
    pub fn label(self) -> &'static str {
        match self {
            TxType::Unknown => "<< Unknown  >>",
            TxType::Session => "<< Session  >>",
            TxType::Request => "<< Request  >>",
            TxType::BeReq => "<< BeReq    >>",
            TxType::Record => "<< Record   >>",
        }
    }
}

impl fmt::Display for TxType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One transaction of a reported group.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Transaction {
    /// Nesting level: 0 in raw grouping, 1 for the group's root.
    pub level: u32,
    /// Transaction id (without side markers).
    pub vxid: u32,
    /// Parent transaction id from `Begin` (0 if none).
    pub parent: u32,
    /// Kind.
    pub tx_type: TxType,
    /// Reason word from `Begin` (`rxreq`, `fetch`, `esi`, `restart`, ...).
    pub reason: String,
    /// The records, in log order.
    pub records: Vec<Record>,
}

struct Vtx {
    tx_type: TxType,
    parent: Option<u32>,
    parent_field: u32,
    reason: String,
    records: Vec<Record>,
    children: Vec<u32>,
    complete: bool,
    created: Instant,
    seq: u64,
}

impl Vtx {
    fn new(seq: u64) -> Vtx {
        Vtx {
            tx_type: TxType::Unknown,
            parent: None,
            parent_field: 0,
            reason: String::new(),
            records: Vec::new(),
            children: Vec::new(),
            complete: false,
            created: Instant::now(),
            seq,
        }
    }
}

/// Default limit of pending incomplete transactions (varnishlog `-L`).
pub const DEFAULT_MAX_PENDING: usize = 1000;

/// Assembles records into reported groups.
pub struct Grouper {
    grouping: Grouping,
    vtxs: HashMap<u32, Vtx>,
    seq: u64,
    max_pending: usize,
}

impl fmt::Debug for Grouper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grouper")
            .field("grouping", &self.grouping)
            .field("pending", &self.vtxs.len())
            .finish()
    }
}

fn fields(data: &[u8]) -> Vec<&str> {
    std::str::from_utf8(data)
        .unwrap_or("")
        .split_ascii_whitespace()
        .collect()
}

impl Grouper {
    /// A grouper for `grouping` with the default pending limit.
    pub fn new(grouping: Grouping) -> Grouper {
        Grouper {
            grouping,
            vtxs: HashMap::new(),
            seq: 0,
            max_pending: DEFAULT_MAX_PENDING,
        }
    }

    /// Changes the limit of incomplete transactions kept (`-L`); beyond it
    /// the oldest are forced out.
    pub fn set_max_pending(&mut self, n: usize) {
        self.max_pending = n.max(1);
    }

    /// The grouping mode.
    pub fn grouping(&self) -> Grouping {
        self.grouping
    }

    /// Number of transactions waiting for completion.
    pub fn pending(&self) -> usize {
        self.vtxs.len()
    }

    fn add(&mut self, vxid: u32) -> &mut Vtx {
        self.seq += 1;
        let seq = self.seq;
        self.vtxs.entry(vxid).or_insert_with(|| Vtx::new(seq))
    }

    /// Feeds one record; returns the groups it completed.
    pub fn push(&mut self, rec: Record) -> Vec<Vec<Transaction>> {
        let vxid = rec.vxid.id();
        if self.grouping == Grouping::Raw {
            return vec![vec![Transaction {
                level: 0,
                vxid,
                parent: 0,
                tx_type: TxType::Record,
                reason: String::new(),
                records: vec![rec],
            }]];
        }
        if vxid == 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        if !self.vtxs.contains_key(&vxid) {
            if rec.tag != Tag::Begin || !self.candidate(&rec) {
                return out;
            }
            self.add(vxid);
        }
        match rec.tag {
            Tag::Begin => self.scan_begin(vxid, &rec),
            Tag::Link => self.scan_link(vxid, &rec),
            _ => {}
        }
        let end = rec.tag == Tag::End;
        if let Some(v) = self.vtxs.get_mut(&vxid) {
            v.records.push(rec);
            if end {
                v.complete = true;
            }
        }
        if end {
            self.report_if_ready(vxid, &mut out);
        }
        if self.vtxs.len() > self.max_pending {
            self.force_oldest("store overflow", &mut out);
        }
        out
    }

    /// Whether a `Begin` starts a transaction this grouping keeps.
    fn candidate(&self, rec: &Record) -> bool {
        let f = fields(&rec.data);
        let ty = TxType::from_begin(f.first().copied().unwrap_or(""));
        !(self.grouping == Grouping::Request && ty == TxType::Session)
    }

    fn scan_begin(&mut self, vxid: u32, rec: &Record) {
        let f = fields(&rec.data);
        let ty = TxType::from_begin(f.first().copied().unwrap_or(""));
        let parent: u32 = f.get(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        let reason = f.get(2).copied().unwrap_or("").to_string();
        let linked = match self.grouping {
            Grouping::Raw | Grouping::Vxid => false,
            Grouping::Request => !(ty == TxType::Request && reason == "rxreq"),
            Grouping::Session => true,
        } && parent != 0;
        {
            let v = self.vtxs.get_mut(&vxid).expect("vtx exists for Begin");
            v.tx_type = ty;
            v.parent_field = parent;
            v.reason = reason;
            if !linked || v.parent.is_some() {
                return;
            }
        }
        self.link(parent, vxid);
    }

    fn scan_link(&mut self, vxid: u32, rec: &Record) {
        match self.grouping {
            Grouping::Raw | Grouping::Vxid => return,
            Grouping::Request if self.vtxs[&vxid].tx_type == TxType::Session => return,
            _ => {}
        }
        let f = fields(&rec.data);
        let Some(child) = f.get(1).and_then(|c| c.parse::<u32>().ok()) else {
            return;
        };
        if child == 0 || child == vxid {
            return;
        }
        if self.vtxs.get(&child).is_some_and(|c| c.parent.is_some()) {
            return;
        }
        self.link(vxid, child);
    }

    fn link(&mut self, parent: u32, child: u32) {
        // Refuse links that would make a cycle (corrupt or hostile input).
        let mut p = Some(parent);
        while let Some(id) = p {
            if id == child {
                return;
            }
            p = self.vtxs.get(&id).and_then(|v| v.parent);
        }
        self.add(parent).children.push(child);
        self.add(child).parent = Some(parent);
    }

    fn root_of(&self, mut vxid: u32) -> u32 {
        while let Some(p) = self.vtxs.get(&vxid).and_then(|v| v.parent) {
            vxid = p;
        }
        vxid
    }

    fn tree_complete(&self, vxid: u32) -> bool {
        let mut stack = vec![vxid];
        while let Some(id) = stack.pop() {
            match self.vtxs.get(&id) {
                Some(v) if v.complete => stack.extend(v.children.iter().copied()),
                _ => return false,
            }
        }
        true
    }

    fn report_if_ready(&mut self, vxid: u32, out: &mut Vec<Vec<Transaction>>) {
        let root = self.root_of(vxid);
        if self.tree_complete(root) {
            self.emit(root, out);
        }
    }

    /// Removes the tree at `root` and reports it if the grouping wants it.
    fn emit(&mut self, root: u32, out: &mut Vec<Vec<Transaction>>) {
        let mut group = Vec::new();
        let mut queue = vec![(root, 1u32)];
        let mut i = 0;
        while i < queue.len() {
            let (id, level) = queue[i];
            i += 1;
            let Some(v) = self.vtxs.remove(&id) else {
                continue;
            };
            for c in &v.children {
                let restart = self.vtxs.get(c).is_some_and(|c| c.reason == "restart");
                queue.push((*c, if restart { level } else { level + 1 }));
            }
            group.push(Transaction {
                level,
                vxid: id,
                parent: v.parent_field,
                tx_type: v.tx_type,
                reason: v.reason,
                records: v.records,
            });
        }
        let wanted = match self.grouping {
            Grouping::Request => group[0].tx_type == TxType::Request,
            Grouping::Session => group[0].tx_type == TxType::Session,
            Grouping::Raw | Grouping::Vxid => true,
        };
        if wanted {
            out.push(group);
        }
    }

    /// Forces one transaction complete with synthetic records.
    fn force(&mut self, vxid: u32, why: &str, out: &mut Vec<Vec<Transaction>>) {
        let Some(v) = self.vtxs.get_mut(&vxid) else {
            return;
        };
        if v.complete {
            return;
        }
        let marked = |ty: TxType| match ty {
            TxType::BeReq => Vxid::backend(vxid),
            _ => Vxid::client(vxid),
        };
        if v.records.first().is_none_or(|r| r.tag != Tag::Begin) {
            let begin = format!("{} {} synth", v.tx_type.begin_word(), v.parent_field);
            v.records
                .insert(0, Record::new(Tag::Begin, marked(v.tx_type), begin));
        }
        v.records
            .push(Record::new(Tag::VSL, marked(v.tx_type), why.to_string()));
        v.records
            .push(Record::new(Tag::End, marked(v.tx_type), "synth"));
        v.complete = true;
        self.report_if_ready(vxid, out);
    }

    fn force_oldest(&mut self, why: &str, out: &mut Vec<Vec<Transaction>>) {
        let oldest = self
            .vtxs
            .iter()
            .filter(|(_, v)| !v.complete)
            .min_by_key(|(_, v)| v.seq)
            .map(|(k, _)| *k);
        if let Some(k) = oldest {
            self.force(k, why, out);
        }
    }

    /// Forces out transactions created more than `max_age` ago (varnishlog
    /// `-T`), oldest first.
    pub fn expire(&mut self, max_age: Duration) -> Vec<Vec<Transaction>> {
        let now = Instant::now();
        let mut old: Vec<(u64, u32)> = self
            .vtxs
            .iter()
            .filter(|(_, v)| !v.complete && now.duration_since(v.created) >= max_age)
            .map(|(k, v)| (v.seq, *k))
            .collect();
        old.sort_unstable();
        let mut out = Vec::new();
        for (_, k) in old {
            self.force(k, "timeout", &mut out);
        }
        out
    }

    /// Forces out everything pending (end of input).
    pub fn flush(&mut self) -> Vec<Vec<Transaction>> {
        let mut all: Vec<(u64, u32)> = self.vtxs.iter().map(|(k, v)| (v.seq, *k)).collect();
        all.sort_unstable();
        let mut out = Vec::new();
        for (_, k) in all {
            self.force(k, "flush", &mut out);
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn c(vxid: u32, tag: Tag, data: &str) -> Record {
        Record::new(tag, Vxid::client(vxid), data)
    }
    pub(crate) fn b(vxid: u32, tag: Tag, data: &str) -> Record {
        Record::new(tag, Vxid::backend(vxid), data)
    }

    /// A session 1000 with request 1001 fetching 1002, in the order
    /// varnishd flushes them (backend first, session last).
    pub(crate) fn sample() -> Vec<Record> {
        vec![
            b(1002, Tag::Begin, "bereq 1001 fetch"),
            b(1002, Tag::BereqURL, "/"),
            b(1002, Tag::BerespStatus, "200"),
            b(1002, Tag::End, ""),
            c(1001, Tag::Begin, "req 1000 rxreq"),
            c(1001, Tag::ReqURL, "/"),
            c(1001, Tag::ReqHeader, "User-Agent: curl"),
            c(1001, Tag::Link, "bereq 1002 fetch"),
            c(1001, Tag::RespStatus, "200"),
            c(
                1001,
                Tag::Timestamp,
                "Resp: 1700000000.000100 0.000100 0.000050",
            ),
            c(1001, Tag::End, ""),
            c(1000, Tag::Begin, "sess 0 HTTP/1"),
            c(1000, Tag::Link, "req 1001 rxreq"),
            c(1000, Tag::End, ""),
        ]
    }

    pub(crate) fn run(g: Grouping, recs: Vec<Record>) -> Vec<Vec<Transaction>> {
        let mut gr = Grouper::new(g);
        let mut out = Vec::new();
        for r in recs {
            out.extend(gr.push(r));
        }
        out.extend(gr.flush());
        out
    }

    fn shape(groups: &[Vec<Transaction>]) -> Vec<Vec<(u32, u32, TxType)>> {
        groups
            .iter()
            .map(|g| g.iter().map(|t| (t.level, t.vxid, t.tx_type)).collect())
            .collect()
    }

    #[test]
    fn vxid_grouping() {
        let g = run(Grouping::Vxid, sample());
        assert_eq!(
            shape(&g),
            vec![
                vec![(1, 1002, TxType::BeReq)],
                vec![(1, 1001, TxType::Request)],
                vec![(1, 1000, TxType::Session)],
            ]
        );
    }

    #[test]
    fn request_grouping_waits_for_children() {
        let mut recs = sample();
        // Move the backend transaction after the request's End.
        let be: Vec<Record> = recs.drain(0..4).collect();
        let at = recs.iter().position(|r| r.tag == Tag::End).unwrap() + 1;
        for (i, r) in be.into_iter().enumerate() {
            recs.insert(at + i, r);
        }
        let g = run(Grouping::Request, recs);
        assert_eq!(
            shape(&g),
            vec![vec![(1, 1001, TxType::Request), (2, 1002, TxType::BeReq)]]
        );
    }

    #[test]
    fn session_grouping() {
        let g = run(Grouping::Session, sample());
        assert_eq!(
            shape(&g),
            vec![vec![
                (1, 1000, TxType::Session),
                (2, 1001, TxType::Request),
                (3, 1002, TxType::BeReq)
            ]]
        );
    }

    #[test]
    fn raw_grouping_keeps_everything() {
        let mut recs = sample();
        recs.push(Record::new(Tag::CLI, Vxid::NONE, "Rd ping"));
        let g = run(Grouping::Raw, recs);
        assert_eq!(g.len(), 15);
        assert!(g.iter().all(|g| g.len() == 1 && g[0].level == 0));
    }

    #[test]
    fn restarts_stay_at_level() {
        let recs = vec![
            c(1003, Tag::Begin, "req 1001 restart"),
            c(1003, Tag::End, ""),
            c(1001, Tag::Begin, "req 1000 rxreq"),
            c(1001, Tag::Link, "req 1003 restart"),
            c(1001, Tag::End, ""),
        ];
        let g = run(Grouping::Request, recs);
        assert_eq!(
            shape(&g),
            vec![vec![(1, 1001, TxType::Request), (1, 1003, TxType::Request)]]
        );
    }

    #[test]
    fn incomplete_are_flushed_with_synthetic_records() {
        let recs = vec![
            c(1001, Tag::Begin, "req 1000 rxreq"),
            c(1001, Tag::Link, "bereq 1002 fetch"),
            c(1001, Tag::End, ""),
        ];
        let g = run(Grouping::Request, recs);
        assert_eq!(g.len(), 1);
        let be = &g[0][1];
        assert_eq!(be.vxid, 1002);
        let tags: Vec<Tag> = be.records.iter().map(|r| r.tag).collect();
        assert_eq!(tags, vec![Tag::Begin, Tag::VSL, Tag::End]);
        assert_eq!(be.records[1].data, b"flush");
        // Records of unknown transactions without Begin are dropped.
        assert!(run(Grouping::Vxid, vec![c(5, Tag::ReqURL, "/")]).is_empty());
    }

    #[test]
    fn pending_limit_and_cycles_do_not_hang() {
        let mut gr = Grouper::new(Grouping::Session);
        gr.set_max_pending(2);
        let mut out = Vec::new();
        for i in 1..10 {
            out.extend(gr.push(c(i, Tag::Begin, &format!("sess {} x", i + 1))));
        }
        out.extend(gr.push(c(1, Tag::Link, "req 9 rxreq")));
        out.extend(gr.flush());
        assert_eq!(gr.pending(), 0);
        assert!(gr.expire(Duration::ZERO).is_empty());
    }

    #[test]
    fn parse_grouping() {
        assert_eq!("session".parse::<Grouping>(), Ok(Grouping::Session));
        assert!("x".parse::<Grouping>().unwrap_err().contains("raw, vxid"));
    }
}
