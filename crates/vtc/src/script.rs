//! Runs a vtc script (a whole file or a nested spec): tokenises it, expands
//! macros in each command just before it runs, hands the command to a
//! handler, and turns a handler error into the test's failure with the
//! actor name and the file line of the command.

use crate::ctx::{Ctx, Fail, R};
use crate::lexer::{self, Token};
use std::sync::atomic::{AtomicBool, Ordering};

/// One command ready to run.
#[derive(Debug, Clone)]
pub struct Cmd {
    /// File line of the command.
    pub line: usize,
    /// Expanded words; `args[0]` is the command name.
    pub args: Vec<String>,
    /// File line where each word starts (used for nested blocks).
    pub lines: Vec<usize>,
}

impl Cmd {
    /// Argument `i`, or a failure naming the missing operand.
    pub fn arg(&self, i: usize) -> R<&str> {
        self.args
            .get(i)
            .map(String::as_str)
            .ok_or_else(|| crate::fail!("{}: missing argument", self.args[0]))
    }
}

/// Why a script stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// A command failed or the test was aborted (timeout, skip, failure
    /// elsewhere).
    Aborted,
}

/// Run `text` (starting at file line `first_line`) as actor `actor`,
/// calling `handler` for every command. When `cancel` is set while a
/// command fails, the failure is not recorded (the actor was stopped on
/// purpose, e.g. `server -break`).
pub fn run(
    ctx: &Ctx,
    actor: &str,
    text: &str,
    first_line: usize,
    cancel: Option<&AtomicBool>,
    handler: &mut dyn FnMut(&Cmd) -> R<()>,
) -> Result<(), Stopped> {
    let cancelled = || cancel.is_some_and(|c| c.load(Ordering::SeqCst));
    match run_collect(ctx, actor, text, first_line, handler) {
        Ok(()) => Ok(()),
        Err(None) => Err(Stopped::Aborted),
        Err(Some((line, e))) => {
            if !cancelled()
                && (!ctx.aborted() || ctx.failure().is_none() && ctx.skipped().is_none())
            {
                ctx.fail(actor, line, &e.0);
            }
            Err(Stopped::Aborted)
        }
    }
}

/// Like [`run`], but a failing command is returned (with its line) instead
/// of being recorded as the test's failure. `Err(None)` means the test was
/// aborted elsewhere.
pub fn run_collect(
    ctx: &Ctx,
    actor: &str,
    text: &str,
    first_line: usize,
    handler: &mut dyn FnMut(&Cmd) -> R<()>,
) -> Result<(), Option<(usize, Fail)>> {
    let cmds = lexer::tokenize(text, first_line).map_err(|e| Some((e.line, Fail(e.msg))))?;
    for raw in cmds {
        if ctx.aborted() {
            return Err(None);
        }
        let cmd = expand(ctx, raw.line, &raw.tokens).map_err(|e| Some((raw.line, e)))?;
        ctx.log(2, actor, &format!("=== {}", summary(&raw.tokens)));
        handler(&cmd).map_err(|e| Some((cmd.line, e)))?;
    }
    if ctx.aborted() {
        return Err(None);
    }
    Ok(())
}

fn expand(ctx: &Ctx, line: usize, tokens: &[Token]) -> R<Cmd> {
    let mut args = Vec::with_capacity(tokens.len());
    let mut lines = Vec::with_capacity(tokens.len());
    for t in tokens {
        if t.text.contains("${") {
            args.push(ctx.expand(&t.text)?);
        } else {
            args.push(t.text.clone());
        }
        lines.push(t.line);
    }
    Ok(Cmd { line, args, lines })
}

/// A one-line rendering of a command for the log (like varnishtest's
/// `=== ...` lines, cut at 60 characters).
fn summary(tokens: &[Token]) -> String {
    let mut s = String::new();
    for t in tokens {
        if !s.is_empty() {
            s.push(' ');
        }
        if t.brace {
            s.push('{');
            break;
        }
        if t.text.contains(char::is_whitespace) || t.text.is_empty() {
            s.push('"');
            s.push_str(&t.text);
            s.push('"');
        } else {
            s.push_str(&t.text);
        }
    }
    if s.chars().count() > 60 {
        let cut: String = s.chars().take(60).collect();
        format!("{cut}...")
    } else {
        s.replace('\n', "\\n")
    }
}

/// Parse a floating point number of seconds like varnishtest (`VNUM`).
pub fn parse_f64(s: &str) -> R<f64> {
    s.trim()
        .parse::<f64>()
        .map_err(|_| crate::fail!("not a number: '{s}'"))
}

/// Parse an integer, accepting `0x` hex like `strtoul(.., 0)`.
pub fn parse_int(s: &str) -> R<i64> {
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i64::from_str_radix(h, 16)
    } else {
        t.parse::<i64>()
    }
    .map_err(|_| crate::fail!("not an integer: '{s}'"))?;
    Ok(if neg { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints() {
        assert_eq!(parse_int("0x10").unwrap(), 16);
        assert_eq!(parse_int("-3").unwrap(), -3);
        assert!(parse_int("x").is_err());
    }
}
