//! Counter and log sources for `lacquerd`: read its shared-memory counters
//! and transaction log directly with `lacquer-vsl`, the same way
//! `lacquer stat` and `lacquer log` do (varnishtest reads varnishd's with
//! libvarnishapi).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lacquer_vsl::print::RecordFilter;
use lacquer_vsl::vsc::{VscReader, vsc_path};
use lacquer_vsl::{Grouper, Grouping, Query, ReadEvent, Record, StartAt, VslReader, vsl_path};

use crate::sources::{CounterSource, LogQuery, LogRecord, LogSource};

/// Counters from the daemon's `_.vsc` file.
#[derive(Debug)]
pub struct VscCounters {
    pub workdir: PathBuf,
}

impl CounterSource for VscCounters {
    fn snapshot(&mut self) -> Result<Vec<(String, u64)>, String> {
        let r = VscReader::open(&vsc_path(&self.workdir)).map_err(|e| e.to_string())?;
        // Busy (sections changed during the read) means: read again.
        let mut tries = 0;
        let snap = loop {
            match r.snapshot() {
                Ok(s) => break s,
                Err(lacquer_vsl::vsc::VscError::Busy) if tries < 100 => tries += 1,
                Err(e) => return Err(e.to_string()),
            }
        };
        Ok(snap.into_iter().map(|c| (c.name, c.value)).collect())
    }
}

/// Log records from the daemon's `_.vsl` ring, grouped and filtered like
/// varnishlog's output that logexpect reads.
pub struct VslLog {
    reader: VslReader,
    grouper: Grouper,
    query: Option<Query>,
    filter: RecordFilter,
    raw: bool,
    pending: VecDeque<LogRecord>,
}

impl std::fmt::Debug for VslLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VslLog").finish_non_exhaustive()
    }
}

fn to_rec(vxid: u32, r: &Record) -> LogRecord {
    LogRecord {
        vxid: u64::from(vxid),
        tag: r.tag.name().to_string(),
        kind: r.vxid.side().letter(),
        // Debug records end with the NUL varnishd logs them with.
        data: String::from_utf8_lossy(r.data.strip_suffix(b"\0").unwrap_or(&r.data)).into_owned(),
    }
}

impl VslLog {
    /// Opens the log of the daemon in `q.workdir`.
    pub fn open(q: &LogQuery) -> Result<VslLog, String> {
        let grouping: Grouping = if q.grouping.is_empty() {
            Grouping::Vxid
        } else {
            q.grouping.parse()?
        };
        let query = match &q.query {
            Some(s) => Some(Query::parse(s).map_err(|e| e.to_string())?),
            None => None,
        };
        let mut filter = RecordFilter::new();
        for i in &q.include {
            filter.include_tags(i)?;
        }
        for x in &q.exclude {
            filter.exclude_tags(x)?;
        }
        let mut extra = q.extra.iter();
        while let Some(opt) = extra.next() {
            match opt.as_str() {
                "-b" => filter.backend_only(),
                "-c" => filter.client_only(),
                "-I" | "-X" => {
                    let v = extra
                        .next()
                        .ok_or_else(|| format!("logexpect {opt} needs an argument"))?;
                    if opt == "-I" {
                        filter.include_regex(v)?;
                    } else {
                        filter.exclude_regex(v)?;
                    }
                }
                // -T (transaction timeout) and -L (pending limit) only
                // matter for incomplete transactions, which the grouper
                // keeps until they end.
                "-T" | "-L" => {
                    extra.next();
                }
                other => return Err(format!("logexpect option {other} not supported")),
            }
        }
        let start = if q.from_head {
            StartAt::Oldest
        } else {
            StartAt::Now
        };
        let path = vsl_path(&q.workdir);
        // The daemon may still be creating its log.
        let end = Instant::now() + Duration::from_secs(5);
        let reader = loop {
            match VslReader::open(&path, start) {
                Ok(r) => break r,
                Err(e) if Instant::now() > end => return Err(e.to_string()),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        Ok(VslLog {
            reader,
            raw: grouping == Grouping::Raw,
            grouper: Grouper::new(grouping),
            query,
            filter,
            pending: VecDeque::new(),
        })
    }

    fn take_groups(&mut self, groups: Vec<Vec<lacquer_vsl::Transaction>>) {
        for g in groups {
            if self.query.as_ref().is_some_and(|q| !q.matches(&g)) {
                continue;
            }
            for t in &g {
                for r in &t.records {
                    if self.filter.matches(r) {
                        let vxid = if self.raw { r.vxid.id() } else { t.vxid };
                        self.pending.push_back(to_rec(vxid, r));
                    }
                }
            }
        }
    }
}

impl LogSource for VslLog {
    fn next(&mut self, timeout: Duration) -> Result<Option<LogRecord>, String> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(r) = self.pending.pop_front() {
                return Ok(Some(r));
            }
            match self.reader.next_event() {
                ReadEvent::Record(r) => {
                    let groups = self.grouper.push(r);
                    self.take_groups(groups);
                }
                ReadEvent::Overrun { .. } => {}
                ReadEvent::Idle => {
                    if Instant::now() >= end {
                        return Ok(None);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
}

/// Whether `daemon` is varnishd (read with varnishstat/varnishlog) rather
/// than lacquerd (read natively).
pub fn is_varnishd(daemon: &Path) -> bool {
    daemon
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains("varnishd"))
}
