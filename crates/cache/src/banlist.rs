//! The ban list: bans newest-last in a deque, with per-ban object reference
//! counts, duplicate completion, tail trimming and `ban.list` rendering.
//!
//! Ban ids are consecutive (bans are only ever removed from the old end), so an
//! object's ban reference is just an id and finding the ban is index arithmetic.
//! An object that references ban N has been checked against every ban up to N;
//! bans newer than N still have to be tested against it (at lookup, or by the
//! lurker for `obj.*`-only bans). A ban nobody references at the old end of the
//! list can be dropped; a ban no object older than it remains for is "completed".

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use crate::ban::BanSpec;
use crate::stats::CacheStats;

#[derive(Debug)]
pub(crate) struct BanEntry {
    pub(crate) id: u64,
    pub(crate) time: f64,
    /// `None` for the boot-time marker ban.
    pub(crate) spec: Option<BanSpec>,
    pub(crate) text: String,
    pub(crate) completed: AtomicBool,
    pub(crate) refs: AtomicI64,
    pub(crate) req: bool,
    pub(crate) obj: bool,
    nodedup: bool,
}

impl BanEntry {
    pub(crate) fn is_completed(&self) -> bool {
        self.completed.load(Ordering::Acquire)
    }

    pub(crate) fn mark_completed(&self, stats: &CacheStats) -> bool {
        let first = !self.completed.swap(true, Ordering::AcqRel);
        if first {
            CacheStats::inc(&stats.bans_completed);
        }
        first
    }

    pub(crate) fn add_ref(&self) {
        self.refs.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn drop_ref(&self) {
        self.refs.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One line of `ban.list`, for renderers other than the plain-text one.
#[derive(Debug, Clone, PartialEq)]
pub struct BanInfo {
    /// When the ban was added (seconds since the epoch).
    pub time: f64,
    /// Objects referencing it.
    pub refs: i64,
    /// Whether it is completed (no longer tested).
    pub completed: bool,
    /// Uses `req.*`.
    pub req: bool,
    /// Uses `obj.*`.
    pub obj: bool,
    /// The expression (empty for the boot-time marker).
    pub spec: String,
}

#[derive(Debug)]
pub(crate) struct BanList {
    pub(crate) list: VecDeque<Arc<BanEntry>>,
}

impl BanList {
    /// The list at boot: one completed marker ban, as varnishd has.
    pub(crate) fn new(now: f64, stats: &CacheStats) -> BanList {
        let b = BanEntry {
            id: 1,
            time: now,
            spec: None,
            text: String::new(),
            completed: AtomicBool::new(true),
            refs: AtomicI64::new(0),
            req: false,
            obj: false,
            nodedup: true,
        };
        CacheStats::inc(&stats.bans);
        CacheStats::inc(&stats.bans_added);
        CacheStats::inc(&stats.bans_completed);
        let mut list = VecDeque::new();
        list.push_back(Arc::new(b));
        BanList { list }
    }

    pub(crate) fn newest(&self) -> &Arc<BanEntry> {
        // Invariant: the list is never empty (trim keeps the newest).
        self.list.back().expect("ban list is never empty")
    }

    pub(crate) fn index_of(&self, id: u64) -> Option<usize> {
        let first = self.list.front()?.id;
        let i = usize::try_from(id.checked_sub(first)?).ok()?;
        (i < self.list.len()).then_some(i)
    }

    pub(crate) fn get(&self, id: u64) -> Option<&Arc<BanEntry>> {
        self.index_of(id).map(|i| &self.list[i])
    }

    /// Bans newer than `id`, newest first.
    pub(crate) fn newer_than(&self, id: u64) -> impl Iterator<Item = &Arc<BanEntry>> {
        let start = self.index_of(id).map_or(0, |i| i + 1);
        self.list.range(start..).rev()
    }

    pub(crate) fn add(&mut self, spec: BanSpec, now: f64, stats: &CacheStats) -> u64 {
        let id = self.newest().id + 1;
        let text = spec.render();
        let e = BanEntry {
            id,
            time: now,
            req: spec.uses_req(),
            obj: spec.uses_obj(),
            nodedup: spec.no_dedup(),
            spec: Some(spec),
            text,
            completed: AtomicBool::new(false),
            refs: AtomicI64::new(0),
        };
        CacheStats::inc(&stats.bans);
        CacheStats::inc(&stats.bans_added);
        if e.obj {
            CacheStats::inc(&stats.bans_obj);
        }
        if e.req {
            CacheStats::inc(&stats.bans_req);
        }
        if !e.nodedup {
            for old in &self.list {
                if !old.nodedup
                    && !old.is_completed()
                    && old.text == e.text
                    && old.mark_completed(stats)
                {
                    CacheStats::inc(&stats.bans_dups);
                }
            }
        }
        self.list.push_back(Arc::new(e));
        id
    }

    /// Drop unreferenced bans from the old end (never the newest). Returns how
    /// many were deleted.
    pub(crate) fn trim(&mut self, stats: &CacheStats) -> u64 {
        let mut n = 0;
        while self.list.len() > 1 && self.list[0].refs.load(Ordering::Acquire) == 0 {
            let Some(b) = self.list.pop_front() else {
                break;
            };
            if b.is_completed() {
                CacheStats::dec(&stats.bans_completed);
            }
            if b.obj {
                CacheStats::dec(&stats.bans_obj);
            }
            if b.req {
                CacheStats::dec(&stats.bans_req);
            }
            CacheStats::dec(&stats.bans);
            CacheStats::inc(&stats.bans_deleted);
            n += 1;
        }
        n
    }

    /// Mark `obj.*`-only bans completed when no object older than them
    /// remains, once they are as old as `horizon` (a time): varnishd's
    /// lurker completes only the bans of `ban_lurker_age` it has taken on.
    pub(crate) fn complete_moot(&self, stats: &CacheStats, horizon: f64) -> u64 {
        let mut older_refs = 0i64;
        let mut n = 0;
        for b in &self.list {
            if older_refs == 0
                && !b.req
                && b.time <= horizon
                && !b.is_completed()
                && b.mark_completed(stats)
            {
                n += 1;
            }
            older_refs += b.refs.load(Ordering::Acquire);
        }
        n
    }

    pub(crate) fn info(&self) -> Vec<BanInfo> {
        self.list
            .iter()
            .rev()
            .map(|b| BanInfo {
                time: b.time,
                refs: b.refs.load(Ordering::Acquire),
                completed: b.is_completed(),
                req: b.req,
                obj: b.obj,
                spec: b.text.clone(),
            })
            .collect()
    }

    /// `ban.list` output, newest first, formatted as varnishd does.
    pub(crate) fn render(&self) -> String {
        let mut out = String::from("Present bans:\n");
        for b in self.info() {
            let _ = writeln!(
                out,
                "{:10.6} {:5} {}  {}",
                b.time,
                b.refs,
                if b.completed { "C" } else { "-" },
                b.spec
            );
        }
        out
    }
}
