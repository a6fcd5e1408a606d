//! Running a scenario on both daemons and comparing: each daemon gets its
//! own scripted backend, the scenario's VCL (an acceptance difference ends
//! the comparison there), a ban of everything cached before, the client
//! script, then the backend's record and the deltas of selected counters.
//! The two transcripts are compared line by line; the first differing line
//! names the class of the difference. `minimise` shrinks a differing
//! scenario while the difference keeps its class.

use crate::backend::Backend;
use crate::client;
use crate::daemon::{Daemon, Kind, Programs};
use crate::scenario::Scenario;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Counters whose change over a scenario is compared (`MAIN.` ones by
/// their short name, others by their full name).
pub const COUNTERS: &[&str] = &[
    "client_req",
    "client_req_400",
    "client_req_417",
    "cache_hit",
    "cache_hit_grace",
    "cache_hitpass",
    "cache_hitmiss",
    "cache_miss",
    "backend_req",
    "s_pipe",
    "s_pass",
    "s_fetch",
    "s_bgfetch",
    "s_synth",
    "fetch_head",
    "fetch_length",
    "fetch_chunked",
    "fetch_eof",
    "fetch_bad",
    "fetch_none",
    "fetch_1xx",
    "fetch_204",
    "fetch_304",
    "fetch_failed",
    "n_purges",
    "esi_errors",
    "esi_warnings",
    "losthdr",
    "sc_rem_close",
    "sc_req_close",
    "sc_req_http10",
    "sc_rx_bad",
    "sc_rx_body",
    "sc_rx_junk",
    "sc_rx_overflow",
    "sc_rx_timeout",
    "sc_tx_pipe",
    "sc_tx_error",
    "sc_tx_eof",
    "sc_resp_close",
    "sc_overload",
    "sc_pipe_overflow",
    "sc_range_short",
    "sc_req_http20",
    "sc_vcl_failure",
    "sess_closed_err",
    // Not n_object: the daemons serve case after case, and whether an
    // object of an earlier case expires inside this one's window is a
    // matter of the expiry thread's timing (a CI run saw varnishd -1).
    "SMA.Transient.c_fail",
    "SMA.s0.c_fail",
    // Not the header byte counters (X-Varnish ids differ in length) nor
    // s_resp_bodybytes (synthetic bodies carry the XID).
    "s_req_bodybytes",
    "s_pipe_in",
    "s_pipe_out",
];

/// Both daemons of a batch.
pub struct Pair {
    pub progs: Programs,
    pub root: PathBuf,
    pub v: Daemon,
    pub l: Daemon,
}

impl Pair {
    pub fn start(root: &Path) -> Result<Pair, String> {
        Pair::start_with(root, Programs::find()?)
    }

    /// Both daemons from the given programs.
    pub fn start_with(root: &Path, progs: Programs) -> Result<Pair, String> {
        let v = Daemon::start(Kind::Varnish, &progs, root, &[])?;
        let l = Daemon::start(Kind::Lacquer, &progs, root, &[])?;
        Ok(Pair {
            progs,
            root: root.to_path_buf(),
            v,
            l,
        })
    }

    /// Restarts a daemon that died (a crash is itself a difference).
    fn revive(&mut self) -> Result<(), String> {
        if !self.v.alive() {
            self.v = Daemon::start(Kind::Varnish, &self.progs, &self.root, &[])?;
        }
        if !self.l.alive() {
            self.l = Daemon::start(Kind::Lacquer, &self.progs, &self.root, &[])?;
        }
        Ok(())
    }
}

/// The transcript of one scenario on one daemon.
pub fn transcript(d: &mut Daemon, sc: &Scenario) -> Result<Vec<String>, String> {
    let be = Backend::start(sc.backend.clone()).map_err(|e| format!("backend: {e}"))?;
    let mut out = Vec::new();
    match d.load_vcl(&sc.vcl(be.port))? {
        Ok(()) => out.push("vcl accepted".to_string()),
        Err(msg) => {
            out.push("vcl rejected".to_string());
            // Not compared: the texts differ in wording; kept for reading.
            out.push(format!(
                "#msg {}",
                msg.lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(200)
                    .collect::<String>()
            ));
            return Ok(out);
        }
    }
    let (st, msg) = d.cli("ban req.url ~ .")?;
    if st != 200 {
        return Err(format!("{}: ban failed: {msg}", d.kind.name()));
    }
    for (k, v) in &sc.params {
        // A parameter one daemon refuses is a difference, not an error.
        let (st, _) = d.cli(&format!("param.set {k} {v}"))?;
        out.push(format!("param.set {k} {v}: {st}"));
    }
    let before = d.counters();
    out.extend(client::run(
        &format!("127.0.0.1:{}", d.http_port),
        &sc.steps,
    ));
    // Fetches that outlive their client finish within the timeouts.
    std::thread::sleep(Duration::from_millis(300));
    for (i, r) in be.log().iter().enumerate() {
        let how = if r.reused { "reused" } else { "new" };
        out.push(format!(
            "be{i} {how} {}",
            r.head.first().cloned().unwrap_or_default()
        ));
        for h in r.head.iter().skip(1) {
            out.push(format!("be{i} hdr {h}"));
        }
        if !r.body.is_empty() {
            out.push(format!("be{i} body {}", client::show(&r.body)));
        }
    }
    drop(be);
    for (k, _) in &sc.params {
        d.cli(&format!("param.reset {k}"))?;
    }
    let after = d.counters();
    for c in COUNTERS {
        let delta = after.get(*c).copied().unwrap_or(0) as i64
            - before.get(*c).copied().unwrap_or(0) as i64;
        if delta != 0 {
            out.push(format!("ctr {c} {delta:+}"));
        }
    }
    Ok(out)
}

/// Both transcripts of a scenario.
pub fn both(p: &mut Pair, sc: &Scenario) -> Result<(Vec<String>, Vec<String>), String> {
    p.revive()?;
    let (v, l) = std::thread::scope(|s| {
        let tv = s.spawn(|| transcript(&mut p.v, sc));
        let tl = s.spawn(|| transcript(&mut p.l, sc));
        (
            tv.join()
                .unwrap_or_else(|_| Err("varnishd run panicked".into())),
            tl.join()
                .unwrap_or_else(|_| Err("lacquerd run panicked".into())),
        )
    });
    let mut l = l?;
    if !p.l.alive() {
        l.push("lacquerd DIED".to_string());
    }
    Ok((v?, l))
}

/// A difference: its class and the first differing lines.
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    pub class: String,
    pub varnish: String,
    pub lacquer: String,
}

fn class_of(v: &str, l: &str) -> String {
    let either = |p: &str| v.contains(p) || l.contains(p);
    let field = |s: &str| s.split(' ').nth(2).map(str::to_string);
    if either("DIED") {
        return "crash".into();
    }
    if either("TIMEOUT") {
        return "hang".into();
    }
    if v.starts_with("param") || l.starts_with("param") {
        return "parameter".into();
    }
    if v.starts_with("vcl") || l.starts_with("vcl") {
        return "vcl-acceptance".into();
    }
    if v.starts_with("ctr") || l.starts_with("ctr") {
        return "counter".into();
    }
    if v.starts_with("be") || l.starts_with("be") {
        return "backend-request".into();
    }
    match (field(v).as_deref(), field(l).as_deref()) {
        (Some("status"), Some("status")) => {
            let code = |s: &str| s.split(' ').nth(4).map(str::to_string);
            if code(v) == code(l) {
                "reason".into()
            } else if [v, l]
                .iter()
                .any(|s| code(s).is_some_and(|c| c.starts_with('5')))
            {
                "error-status".into()
            } else {
                "status".into()
            }
        }
        (Some("hdr"), _) | (_, Some("hdr")) => "header".into(),
        (Some("body"), _) | (_, Some("body")) => "body".into(),
        _ => "connection".into(),
    }
}

/// Compares two transcripts (lines starting with `#` are notes).
pub fn compare(v: &[String], l: &[String]) -> Option<Diff> {
    let v: Vec<&String> = v.iter().filter(|x| !x.starts_with('#')).collect();
    let l: Vec<&String> = l.iter().filter(|x| !x.starts_with('#')).collect();
    let n = v.len().max(l.len());
    let none = String::from("<nothing>");
    for i in 0..n {
        let (a, b) = (
            v.get(i).copied().unwrap_or(&none),
            l.get(i).copied().unwrap_or(&none),
        );
        if a != b {
            return Some(Diff {
                class: class_of(a, b),
                varnish: a.clone(),
                lacquer: b.clone(),
            });
        }
    }
    None
}

/// Runs and compares; `Ok(None)` when both agree.
pub fn check(p: &mut Pair, sc: &Scenario) -> Result<Option<Diff>, String> {
    let (v, l) = both(p, sc)?;
    Ok(compare(&v, &l))
}

/// Candidate reductions of a scenario, largest first.
fn shrinks(sc: &Scenario) -> Vec<Scenario> {
    let mut out = Vec::new();
    for i in 0..sc.subs.len() {
        let mut s = sc.clone();
        s.subs.remove(i);
        out.push(s);
    }
    for i in 0..sc.steps.len() {
        if sc.steps.len() > 1 {
            let mut s = sc.clone();
            s.steps.remove(i);
            if i > 0
                && s.steps[i - 1].pipeline
                && s.steps.get(i).is_none_or(|n| n.conn != s.steps[i - 1].conn)
            {
                s.steps[i - 1].pipeline = false;
            }
            out.push(s);
        }
        if sc.steps[i].pipeline || sc.steps[i].close_early {
            let mut s = sc.clone();
            s.steps[i].pipeline = false;
            s.steps[i].close_early = false;
            out.push(s);
        }
    }
    for i in 0..sc.backend.len() {
        let mut s = sc.clone();
        s.backend.remove(i);
        out.push(s);
    }
    for i in 0..sc.params.len() {
        let mut s = sc.clone();
        s.params.remove(i);
        out.push(s);
    }
    for (i, (_, b)) in sc.subs.iter().enumerate() {
        for j in 0..b.len() {
            let mut s = sc.clone();
            s.subs[i].1.remove(j);
            out.push(s);
        }
    }
    for (i, r) in sc.backend.iter().enumerate() {
        for j in 0..r.headers.len() {
            let mut s = sc.clone();
            s.backend[i].headers.remove(j);
            out.push(s);
        }
        if r.gzip || r.delay_ms > 0 || r.stall_ms > 0 || r.truncate {
            let mut s = sc.clone();
            let b = &mut s.backend[i];
            (b.gzip, b.delay_ms, b.stall_ms, b.truncate) = (false, 0, 0, false);
            out.push(s);
        }
    }
    out
}

/// Shrinks `sc` while it still differs in the same class; at most
/// `budget` runs.
pub fn minimise(p: &mut Pair, sc: &Scenario, class: &str, mut budget: usize) -> Scenario {
    let mut cur = sc.clone();
    'outer: loop {
        for cand in shrinks(&cur) {
            if budget == 0 {
                break 'outer;
            }
            budget -= 1;
            if let Ok(Some(d)) = check(p, &cand)
                && d.class == class
            {
                cur = cand;
                continue 'outer;
            }
        }
        break;
    }
    cur
}
