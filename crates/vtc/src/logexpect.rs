//! `logexpect lN`: reads the daemon's log through a [`LogSource`] and checks
//! that records appear in the order the spec says, with varnishtest 7.1's
//! semantics: the spec (`expect SKIP VXID TAG [REGEX]`, `fail add VXID TAG
//! [REGEX]`, `fail clear`) is parsed into a list first, then every record is
//! checked against the active fail rules and the current expectation. A
//! block of `expect ?` lines matches in any order. `-err` inverts success.

use crate::ctx::{Ctx, R, lock};
use crate::script::{self, Cmd};
use crate::server::join_polling;
use crate::sources::{LogQuery, LogRecord, LogSource};
use crate::{bail, fail};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skip {
    /// `*`: skip any number of records.
    Any,
    /// `?`: one of a block of alternatives matching in any order.
    Alt,
    /// At most N records skipped.
    N(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sel {
    Any,
    Last,
    Is(u64),
}

#[derive(Debug, Clone)]
struct Pattern {
    vxid: Sel,
    tag: Option<Option<String>>,
    re: Option<fancy_regex::Regex>,
    text: String,
}

#[derive(Debug, Clone)]
enum Item {
    Expect(Skip, Pattern),
    FailAdd(Pattern),
    FailClear,
}

impl Pattern {
    /// Parse `VXID TAG [REGEX]`.
    fn parse(args: &[String], caseless: bool, text: String) -> R<Self> {
        if args.len() < 2 || args.len() > 3 {
            bail!("Syntax error");
        }
        let vxid = match args[0].as_str() {
            "*" => Sel::Any,
            "=" => Sel::Last,
            n => Sel::Is(
                n.parse()
                    .map_err(|_| fail!("Not a positive integer: '{n}'"))?,
            ),
        };
        // None = any tag, Some(None) = the previous record's tag.
        let tag = match args[1].as_str() {
            "*" => None,
            "=" => Some(None),
            t => Some(Some(t.to_string())),
        };
        let re = match args.get(2) {
            Some(r) => {
                let pat = if caseless {
                    format!("(?i){r}")
                } else {
                    r.clone()
                };
                Some(
                    crate::text::compile_regex(&pat)
                        .map_err(|e| fail!("Regex error ({e}): '{r}'"))?,
                )
            }
            None => None,
        };
        Ok(Pattern {
            vxid,
            tag,
            re,
            text,
        })
    }

    fn matches(&self, r: &LogRecord, last: &Option<(u64, String)>) -> bool {
        let v_ok = match self.vxid {
            Sel::Any => true,
            Sel::Last => last.as_ref().is_some_and(|(v, _)| *v == r.vxid),
            Sel::Is(n) => r.vxid == n,
        };
        let (t_ok, tag_given) = match &self.tag {
            None => (true, false),
            Some(None) => (
                last.as_ref()
                    .is_some_and(|(_, t)| t.eq_ignore_ascii_case(&r.tag)),
                true,
            ),
            Some(Some(t)) => (t.eq_ignore_ascii_case(&r.tag), true),
        };
        // As in varnishtest, the regex only applies when a tag is given.
        let re_ok = !tag_given
            || !t_ok
            || self
                .re
                .as_ref()
                .is_none_or(|re| crate::text::re_match(re, &r.data));
        v_ok && t_ok && re_ok
    }
}

#[derive(Debug)]
struct State {
    spec: Option<(String, usize)>,
    vname: Option<String>,
    query: LogQuery,
    err: bool,
    caseless: bool,
    thread: Option<JoinHandle<()>>,
}

/// One declared logexpect.
#[derive(Debug)]
pub struct LogExpect {
    /// `lN`.
    pub name: String,
    state: Mutex<State>,
    waiting: Arc<AtomicBool>,
}

/// Parse the spec into its list of items.
fn parse_spec(ctx: &Ctx, name: &str, spec: &str, line: usize, caseless: bool) -> R<Vec<Item>> {
    let mut items = Vec::new();
    let r = script::run_collect(ctx, name, spec, line, &mut |cmd: &Cmd| {
        let av = &cmd.args;
        let text = av.join(" ");
        match av[0].as_str() {
            "expect" => {
                let skip = match cmd.arg(1)? {
                    "*" => Skip::Any,
                    "?" => Skip::Alt,
                    n => Skip::N(
                        n.parse()
                            .map_err(|_| fail!("Not a positive integer: '{n}'"))?,
                    ),
                };
                items.push(Item::Expect(
                    skip,
                    Pattern::parse(&av[2..], caseless, text)?,
                ));
            }
            "fail" => match cmd.arg(1)? {
                "clear" => items.push(Item::FailClear),
                "add" => items.push(Item::FailAdd(Pattern::parse(&av[2..], caseless, text)?)),
                o => bail!("Unknown fail argument '{o}'"),
            },
            o => bail!("Unknown logexp command: \"{o}\""),
        }
        Ok(())
    });
    match r {
        Ok(()) => Ok(items),
        Err(Some((_, e))) => Err(e),
        Err(None) => Err(ctx.aborted_err()),
    }
}

/// Matching state over the item list.
struct Matcher<'a> {
    ctx: &'a Ctx,
    name: &'a str,
    items: Vec<Item>,
    seen: Vec<bool>,
    cur: Option<usize>,
    started: bool,
    fails: Vec<usize>,
    skip_cnt: u64,
    last: Option<(u64, String)>,
}

enum Outcome {
    Continue,
    Done,
}

impl Matcher<'_> {
    fn log_rec(&self, legend: &str, r: &LogRecord) {
        self.ctx.log(
            4,
            self.name,
            &format!(
                "{legend:<5}| {:>10} {:<15} {} {}",
                r.vxid, r.tag, r.kind, r.data
            ),
        );
    }

    /// Advance to the next expectation, applying fail add/clear items.
    fn next(&mut self) {
        loop {
            let n = match self.cur {
                Some(i) if matches!(self.items[i], Item::Expect(Skip::Alt, _)) && !self.seen[i] => {
                    return;
                }
                Some(i) => i + 1,
                None if !self.started => {
                    self.started = true;
                    0
                }
                None => return,
            };
            if n >= self.items.len() {
                self.cur = None;
                return;
            }
            self.cur = Some(n);
            match &self.items[n] {
                Item::Expect(Skip::Alt, _) if self.seen[n] => continue,
                Item::FailClear => {
                    self.ctx.log(3, self.name, "condition| fail clear");
                    self.fails.clear();
                }
                Item::FailAdd(p) => {
                    self.ctx
                        .log(3, self.name, &format!("condition| {}", p.text));
                    self.fails.push(n);
                }
                Item::Expect(_, p) => {
                    self.ctx
                        .log(3, self.name, &format!("expecting| {}", p.text));
                    return;
                }
            }
        }
    }

    fn done(&self) -> bool {
        self.fails.is_empty() && self.cur.is_none()
    }

    fn record(&mut self, r: &LogRecord) -> R<Outcome> {
        if r.tag == "Batch" || r.tag == "Witness" {
            return Ok(Outcome::Continue);
        }
        for &f in &self.fails {
            if let Item::FailAdd(p) = &self.items[f]
                && p.matches(r, &self.last)
            {
                self.log_rec("fail", r);
                bail!("bad| expectation failed (forbidden record: {})", p.text);
            }
        }
        let Some(mut i) = self.cur else {
            return Ok(Outcome::Continue);
        };
        loop {
            let Item::Expect(skip, p) = &self.items[i] else {
                return Ok(Outcome::Continue);
            };
            let (skip, ok) = (*skip, p.matches(r, &self.last));
            if ok {
                self.log_rec("match", r);
                if skip == Skip::Alt {
                    self.seen[i] = true;
                }
                self.last = Some((r.vxid, r.tag.clone()));
                self.skip_cnt = 0;
                self.next();
                return Ok(if self.done() {
                    Outcome::Done
                } else {
                    Outcome::Continue
                });
            }
            match skip {
                Skip::Alt => {
                    // Try the next alternative of the block not seen yet.
                    let mut j = i + 1;
                    while j < self.items.len()
                        && matches!(self.items[j], Item::Expect(Skip::Alt, _))
                        && self.seen[j]
                    {
                        j += 1;
                    }
                    if j < self.items.len() && matches!(self.items[j], Item::Expect(Skip::Alt, _)) {
                        i = j;
                        continue;
                    }
                    self.log_rec("err", r);
                    bail!("bad| expectation failed ({})", p.text);
                }
                Skip::Any => {
                    self.skip_cnt += 1;
                    return Ok(Outcome::Continue);
                }
                Skip::N(n) if n > self.skip_cnt => {
                    self.skip_cnt += 1;
                    return Ok(Outcome::Continue);
                }
                Skip::N(_) => {
                    self.log_rec("err", r);
                    bail!("bad| expectation failed ({})", p.text);
                }
            }
        }
    }
}

fn run_matcher(m: &mut Matcher<'_>, src: &mut dyn LogSource, waiting: &AtomicBool) -> R<()> {
    m.next();
    if m.done() {
        return Ok(());
    }
    let mut quiet = 0u32;
    loop {
        if m.ctx.aborted() {
            return Err(m.ctx.aborted_err());
        }
        match src.next(Duration::from_millis(50)) {
            Ok(Some(r)) => {
                quiet = 0;
                if let Outcome::Done = m.record(&r)? {
                    return Ok(());
                }
            }
            Ok(None) => {
                // Only fail rules left after the last expectation: once the
                // test waits for us and the log stays quiet, they held.
                if m.cur.is_none() && waiting.load(Ordering::SeqCst) {
                    quiet += 1;
                    if quiet >= 20 {
                        return Ok(());
                    }
                }
            }
            Err(e) => bail!("bad| log reader failed: {e}"),
        }
    }
}

impl LogExpect {
    fn start(self: &Arc<Self>, ctx: &Arc<Ctx>) -> R<()> {
        let mut st = lock(&self.state);
        if st.thread.as_ref().is_some_and(|t| !t.is_finished()) {
            bail!("logexpect {} already running", self.name);
        }
        let (spec, line) = st
            .spec
            .clone()
            .ok_or_else(|| fail!("logexpect {} has no specification", self.name))?;
        let vname = st
            .vname
            .clone()
            .ok_or_else(|| fail!("logexpect {}: -v is required", self.name))?;
        let items = parse_spec(ctx, &self.name, &spec, line, st.caseless)?;
        let mut q = st.query.clone();
        q.workdir = ctx.tmpdir.join(&vname);
        ctx.log(4, &self.name, "begin|");
        // Attach before returning, so that records produced by the
        // commands after `-start` are seen.
        let mut src = (ctx.cfg.logs)(&q).map_err(|e| fail!("cannot read the log: {e}"))?;
        let err = st.err;
        self.waiting.store(false, Ordering::SeqCst);
        let (c2, me) = (ctx.clone(), self.clone());
        st.thread = Some(std::thread::spawn(move || {
            let n = items.len();
            let mut m = Matcher {
                ctx: &c2,
                name: &me.name,
                items,
                seen: vec![false; n],
                cur: None,
                started: false,
                fails: Vec::new(),
                skip_cnt: 0,
                last: None,
            };
            let res = run_matcher(&mut m, src.as_mut(), &me.waiting);
            match (res, err) {
                (Ok(()), false) => c2.log(4, &me.name, "end|"),
                (Err(_), _) if c2.aborted() => {}
                (Err(e), false) => c2.fail(&me.name, line, &e.0),
                (Err(_), true) => c2.log(4, &me.name, "end| failed as expected"),
                (Ok(()), true) => c2.fail(
                    &me.name,
                    line,
                    "logexpect succeeded, but -err expected a failure",
                ),
            }
        }));
        Ok(())
    }

    fn wait(&self, ctx: &Ctx) -> R<()> {
        self.waiting.store(true, Ordering::SeqCst);
        let t = lock(&self.state).thread.take();
        if let Some(t) = t {
            ctx.log(2, &self.name, "Waiting for logexp");
            join_polling(ctx, t)?;
        }
        Ok(())
    }

    /// True while the reader thread runs.
    pub fn running(&self) -> bool {
        lock(&self.state)
            .thread
            .as_ref()
            .is_some_and(|t| !t.is_finished())
    }
}

/// The `logexpect` command.
pub fn cmd_logexpect(ctx: &Arc<Ctx>, cmd: &Cmd) -> R<()> {
    let name = cmd.arg(1)?.to_string();
    if !name.starts_with('l') {
        bail!("logexpect name must start with 'l' ({name})");
    }
    let existing = lock(&ctx.logexpects)
        .iter()
        .find(|l| l.name == name)
        .cloned();
    let le = match existing {
        Some(l) => l,
        None => {
            let l = Arc::new(LogExpect {
                name: name.clone(),
                waiting: Arc::new(AtomicBool::new(false)),
                state: Mutex::new(State {
                    spec: None,
                    vname: None,
                    query: LogQuery {
                        grouping: "vxid".into(),
                        ..LogQuery::default()
                    },
                    err: false,
                    caseless: false,
                    thread: None,
                }),
            });
            lock(&ctx.logexpects).push(l.clone());
            l
        }
    };
    let av = &cmd.args;
    let mut i = 2;
    while i < av.len() {
        let a = av[i].as_str();
        match a {
            "-v" => {
                lock(&le.state).vname = Some(cmd.arg(i + 1)?.to_string());
                i += 1;
            }
            "-g" => {
                lock(&le.state).query.grouping = cmd.arg(i + 1)?.to_string();
                i += 1;
            }
            "-q" => {
                lock(&le.state).query.query = Some(cmd.arg(i + 1)?.to_string());
                i += 1;
            }
            "-d" => {
                lock(&le.state).query.from_head = script::parse_int(cmd.arg(i + 1)?)? != 0;
                i += 1;
            }
            "-i" => {
                lock(&le.state)
                    .query
                    .include
                    .push(cmd.arg(i + 1)?.to_string());
                i += 1;
            }
            "-x" => {
                lock(&le.state)
                    .query
                    .exclude
                    .push(cmd.arg(i + 1)?.to_string());
                i += 1;
            }
            "-err" => lock(&le.state).err = true,
            "-b" | "-c" => {
                // A re-declared logexpect switches between backend-only and
                // client-only records.
                let mut st = lock(&le.state);
                st.query.extra.retain(|x| x != "-b" && x != "-c");
                st.query.extra.push(a.to_string());
            }
            "-I" | "-X" | "-T" | "-L" => {
                let v = cmd.arg(i + 1)?.to_string();
                let mut st = lock(&le.state);
                st.query.extra.push(a.to_string());
                st.query.extra.push(v);
                i += 1;
            }
            "-C" => lock(&le.state).caseless = true,
            // -m only adds debugging output for misses.
            "-m" => {}
            "-start" => le.start(ctx)?,
            "-wait" => le.wait(ctx)?,
            "-run" => {
                le.start(ctx)?;
                le.wait(ctx)?;
            }
            _ if a.starts_with('-') => bail!("Unknown logexp argument: {a}"),
            _ => {
                let line = cmd.lines.get(i).copied().unwrap_or(cmd.line);
                lock(&le.state).spec = Some((a.to_string(), line));
            }
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(vxid: u64, tag: &str, data: &str) -> LogRecord {
        LogRecord {
            vxid,
            tag: tag.into(),
            kind: 'c',
            data: data.into(),
        }
    }

    fn pat(s: &str) -> Pattern {
        let v: Vec<String> = s.split(' ').map(String::from).collect();
        Pattern::parse(&v, false, s.into()).unwrap()
    }

    #[test]
    fn pattern_matching() {
        let p = pat("1001 ReqURL ^/foo");
        assert!(p.matches(&rec(1001, "requrl", "/foo/bar"), &None));
        assert!(!p.matches(&rec(1002, "ReqURL", "/foo"), &None));
        assert!(!p.matches(&rec(1001, "ReqURL", "/bar"), &None));
        let p = pat("= *");
        let last = Some((7, "X".to_string()));
        assert!(p.matches(&rec(7, "X", ""), &last));
        assert!(!p.matches(&rec(8, "X", ""), &last));
        assert!(Pattern::parse(&["x".to_string()], false, String::new()).is_err());
    }

    fn matcher(ctx: &Ctx, items: Vec<Item>) -> Matcher<'_> {
        let n = items.len();
        let mut m = Matcher {
            ctx,
            name: "l1",
            items,
            seen: vec![false; n],
            cur: None,
            started: false,
            fails: Vec::new(),
            skip_cnt: 0,
            last: None,
        };
        m.next();
        m
    }

    fn test_ctx() -> Ctx {
        let cfg = Arc::new(crate::Config::new(std::path::Path::new("/nonexistent")));
        Ctx::new(
            "t".into(),
            std::env::temp_dir(),
            cfg,
            crate::macros::Macros::new(),
        )
    }

    #[test]
    fn alternatives_any_order() {
        let ctx = test_ctx();
        let mut m = matcher(
            &ctx,
            vec![
                Item::Expect(Skip::Alt, pat("1 A")),
                Item::Expect(Skip::Alt, pat("1 B")),
            ],
        );
        assert!(matches!(m.record(&rec(1, "B", "")), Ok(Outcome::Continue)));
        assert!(matches!(m.record(&rec(1, "A", "")), Ok(Outcome::Done)));
    }

    #[test]
    fn skip_and_fail() {
        let ctx = test_ctx();
        let mut m = matcher(
            &ctx,
            vec![
                Item::FailAdd(pat("* X")),
                Item::Expect(Skip::N(1), pat("1 A")),
                Item::FailClear,
            ],
        );
        assert!(matches!(m.record(&rec(1, "B", "")), Ok(Outcome::Continue)));
        assert!(matches!(m.record(&rec(1, "A", "")), Ok(Outcome::Done)));
        let mut m = matcher(
            &ctx,
            vec![
                Item::FailAdd(pat("* X")),
                Item::Expect(Skip::Any, pat("1 A")),
            ],
        );
        assert!(m.record(&rec(1, "X", "")).is_err());
        let mut m = matcher(&ctx, vec![Item::Expect(Skip::N(0), pat("1 A"))]);
        assert!(m.record(&rec(1, "B", "")).is_err());
    }
}
