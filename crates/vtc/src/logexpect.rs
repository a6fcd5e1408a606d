//! `logexpect lN`: reads the daemon's log through a [`LogSource`] and checks
//! that records appear in the order the spec says (`expect SKIP VXID TAG
//! [REGEX]`), failing on records declared forbidden (`fail add ...`).

use crate::ctx::{Ctx, R, lock};
use crate::script::{self, Cmd};
use crate::server::join_polling;
use crate::sources::{LogQuery, LogRecord, LogSource};
use crate::{bail, fail};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Skip {
    Any,
    N(u64),
}

#[derive(Debug, Clone)]
enum Vxid {
    Any,
    Same,
    Id(u64),
}

#[derive(Debug, Clone)]
struct Pattern {
    skip: Skip,
    vxid: Vxid,
    tag: Option<String>,
    re: Option<fancy_regex::Regex>,
    text: String,
}

impl Pattern {
    fn parse(args: &[String], with_skip: bool) -> R<Self> {
        let mut it = args.iter();
        let skip = if with_skip {
            match it.next().map(String::as_str) {
                Some("*") => Skip::Any,
                Some(n) => Skip::N(n.parse().map_err(|_| fail!("logexpect: bad skip '{n}'"))?),
                None => bail!("logexpect: missing skip"),
            }
        } else {
            Skip::N(0)
        };
        let vxid = match it.next().map(String::as_str) {
            Some("*") => Vxid::Any,
            Some("=") => Vxid::Same,
            Some(n) => Vxid::Id(n.parse().map_err(|_| fail!("logexpect: bad vxid '{n}'"))?),
            None => bail!("logexpect: missing vxid"),
        };
        let tag = match it.next().map(String::as_str) {
            Some("*") => None,
            Some(t) => Some(t.to_string()),
            None => bail!("logexpect: missing tag"),
        };
        let re = match it.next() {
            Some(r) => Some(
                crate::text::compile_regex(r)
                    .map_err(|e| fail!("logexpect: bad regex '{r}': {e}"))?,
            ),
            None => None,
        };
        if it.next().is_some() {
            bail!("logexpect: too many arguments");
        }
        Ok(Pattern {
            skip,
            vxid,
            tag,
            re,
            text: args.join(" "),
        })
    }

    fn matches(&self, r: &LogRecord, last_vxid: Option<u64>) -> bool {
        let v_ok = match self.vxid {
            Vxid::Any => true,
            Vxid::Same => Some(r.vxid) == last_vxid,
            Vxid::Id(n) => r.vxid == n,
        };
        let t_ok = self
            .tag
            .as_deref()
            .is_none_or(|t| t.eq_ignore_ascii_case(&r.tag));
        let re_ok = self
            .re
            .as_ref()
            .is_none_or(|re| re.is_match(&r.data).unwrap_or(false));
        v_ok && t_ok && re_ok
    }
}

#[derive(Debug)]
struct State {
    spec: Option<(String, usize)>,
    vname: Option<String>,
    query: LogQuery,
    err: bool,
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

struct Runner<'a> {
    ctx: &'a Ctx,
    name: &'a str,
    src: Box<dyn LogSource>,
    last_vxid: Option<u64>,
    fails: Vec<Pattern>,
}

impl Runner<'_> {
    fn next(&mut self) -> R<LogRecord> {
        loop {
            if self.ctx.aborted() {
                return Err(self.ctx.aborted_err());
            }
            match self.src.next(Duration::from_millis(50)) {
                Ok(Some(r)) => {
                    self.check_fail(&r)?;
                    return Ok(r);
                }
                Ok(None) => {}
                Err(e) => bail!("log reader failed: {e}"),
            }
        }
    }

    /// Keep checking records against the `fail` rules until `waiting` is
    /// set and no record arrived for a second.
    fn drain(&mut self, waiting: &AtomicBool) -> R<()> {
        let mut quiet = 0u32;
        loop {
            if self.ctx.aborted() {
                return Err(self.ctx.aborted_err());
            }
            match self.src.next(Duration::from_millis(50)) {
                Ok(Some(r)) => {
                    quiet = 0;
                    self.check_fail(&r)?;
                }
                Ok(None) => {
                    if waiting.load(Ordering::SeqCst) {
                        quiet += 1;
                        if quiet >= 20 {
                            return Ok(());
                        }
                    }
                }
                Err(_) => return Ok(()),
            }
        }
    }

    fn check_fail(&self, r: &LogRecord) -> R<()> {
        for f in &self.fails {
            if f.matches(r, self.last_vxid) {
                bail!(
                    "fail| {:>10} {:<15} {} {} (forbidden: {})",
                    r.vxid,
                    r.tag,
                    r.kind,
                    r.data,
                    f.text
                );
            }
        }
        Ok(())
    }

    fn command(&mut self, cmd: &Cmd) -> R<()> {
        match cmd.args[0].as_str() {
            "expect" => {
                let p = Pattern::parse(&cmd.args[1..], true)?;
                self.ctx
                    .log(3, self.name, &format!("expecting| {}", p.text));
                let mut skipped = 0u64;
                loop {
                    let r = self.next()?;
                    if p.matches(&r, self.last_vxid) {
                        self.last_vxid = Some(r.vxid);
                        self.ctx.log(
                            3,
                            self.name,
                            &format!("match| {:>10} {:<15} {} {}", r.vxid, r.tag, r.kind, r.data),
                        );
                        return Ok(());
                    }
                    self.ctx.log(
                        4,
                        self.name,
                        &format!("skip| {:>10} {:<15} {} {}", r.vxid, r.tag, r.kind, r.data),
                    );
                    if let Skip::N(n) = p.skip {
                        if skipped >= n {
                            bail!(
                                "bad| {:>10} {:<15} {} {} (expected: {})",
                                r.vxid,
                                r.tag,
                                r.kind,
                                r.data,
                                p.text
                            );
                        }
                        skipped += 1;
                    }
                }
            }
            "fail" => match cmd.args.get(1).map(String::as_str) {
                Some("add") => {
                    let p = Pattern::parse(&cmd.args[2..], false)?;
                    self.fails.push(p);
                    Ok(())
                }
                Some("clear") => {
                    self.fails.clear();
                    Ok(())
                }
                _ => bail!("logexpect: fail needs 'add' or 'clear'"),
            },
            other => match crate::commands::common(self.ctx, self.name, cmd)? {
                true => Ok(()),
                false => bail!("Unknown logexp command: \"{other}\""),
            },
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
        let mut q = st.query.clone();
        q.workdir = ctx.tmpdir.join(&vname);
        ctx.log(2, &self.name, "begin");
        // Attach before returning, so that records produced by the
        // commands after `-start` are seen.
        let src = (ctx.cfg.logs)(&q).map_err(|e| fail!("cannot read the log: {e}"))?;
        let err = st.err;
        self.waiting.store(false, Ordering::SeqCst);
        let (c2, me) = (ctx.clone(), self.clone());
        st.thread = Some(std::thread::spawn(move || {
            let mut r = Runner {
                ctx: &c2,
                name: &me.name,
                src,
                last_vxid: None,
                fails: Vec::new(),
            };
            let name = me.name.clone();
            let mut res = script::run_collect(&c2, &name, &spec, line, &mut |cmd| r.command(cmd));
            if res.is_ok() && !r.fails.is_empty() {
                // Forbidden records stay forbidden after the last expect:
                // keep reading until the test waits for us and the log
                // has been quiet for a second.
                res = r.drain(&me.waiting).map_err(|e| Some((line, e)));
            }
            match (res, err) {
                (Ok(()), false) => c2.log(2, &name, "end"),
                (Err(None), _) => {}
                (Err(Some((l, e))), false) => c2.fail(&name, l, &e.0),
                (Err(Some((_, e))), true) => {
                    c2.log(2, &name, &format!("failed as expected (-err): {}", e.0));
                }
                (Ok(()), true) => c2.fail(
                    &name,
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
        Pattern::parse(&v, true).unwrap()
    }

    #[test]
    fn pattern_matching() {
        let p = pat("0 1001 ReqURL ^/foo");
        assert!(p.matches(&rec(1001, "requrl", "/foo/bar"), None));
        assert!(!p.matches(&rec(1002, "ReqURL", "/foo"), None));
        assert!(!p.matches(&rec(1001, "ReqURL", "/bar"), None));
        let p = pat("* = * ");
        assert_eq!(p.skip, Skip::Any);
        assert!(p.matches(&rec(7, "X", ""), Some(7)));
        assert!(!p.matches(&rec(8, "X", ""), Some(7)));
        assert!(Pattern::parse(&["x".to_string()], true).is_err());
    }
}
