//! The management CLI protocol, as varnishd speaks it on `-T`, `-M` and `-d`.
//!
//! A request is one line of words (double quotes and backslash escapes as
//! varnishd's argument parser takes them) or a line ending in `<< TOKEN`
//! followed by a here-document closed by a line holding only `TOKEN`.
//! A reply is a 13-byte status line, `"%-3d %-8u\n"` (status, body length),
//! the body and a newline. With `-S`, a connection starts with status 107 and
//! a challenge that the client answers with `auth <sha256 hex>`.
//!
//! [`COMMANDS`] is the single table of commands (syntax, help, argument
//! counts); `help`, argument checking and `lacquer adm` all read it.

/// CLI status codes (varnishd's `enum VCLI_status_e`).
pub mod status {
    pub const SYNTAX: u16 = 100;
    pub const UNKNOWN: u16 = 101;
    pub const UNIMPL: u16 = 102;
    pub const TOOFEW: u16 = 104;
    pub const TOOMANY: u16 = 105;
    pub const PARAM: u16 = 106;
    pub const AUTH: u16 = 107;
    pub const OK: u16 = 200;
    pub const TRUNCATED: u16 = 201;
    pub const CANT: u16 = 300;
    pub const COMMS: u16 = 400;
    pub const CLOSE: u16 = 500;
}

/// varnishd's answer to a command it does not know (status 101), which
/// its dispatcher writes before it looks the command up.
pub const UNKNOWN_REQUEST: &str = "Unknown request.\nType 'help' for more info.\n";

/// One management command.
#[derive(Debug)]
pub struct Command {
    pub name: &'static str,
    pub syntax: &'static str,
    pub help: &'static str,
    pub min_args: usize,
    /// `None`: unlimited.
    pub max_args: Option<usize>,
    /// Accepts `-j` for JSON output (not counted in the argument limits).
    pub json: bool,
    /// Debug commands are hidden from `help` unless asked for by name.
    pub debug: bool,
    /// Which of varnishd's two processes answers it.
    pub served: Served,
}

/// Where varnishd serves a command: its manager, its cache process (the
/// child), or the manager and then the child while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// Only the manager sees it.
    Manager,
    /// The manager answers it, and passes it on to the running child,
    /// which logs it as `CLI` records (`Rd <request>`, `Wr <status>
    /// <length> <answer>`).
    Both,
    /// Only the running child knows it: while the child is stopped the
    /// manager answers 101 and `help` leaves it out.
    Child,
}

impl Command {
    /// Whether the command exists in the current state: child-only
    /// commands exist only while the child runs.
    pub fn available(&self, running: bool) -> bool {
        running || self.served != Served::Child
    }

    /// Whether the running child logs it as `CLI` records.
    pub fn child_logs(&self) -> bool {
        self.served != Served::Manager
    }
}

const MGT: Served = Served::Manager;
const BOTH: Served = Served::Both;
const CHILD: Served = Served::Child;

macro_rules! cmd {
    ($name:literal, $syntax:literal, $help:literal, $min:expr, $max:expr, $json:expr, $debug:expr, $served:expr) => {
        Command {
            name: $name,
            syntax: $syntax,
            help: $help,
            min_args: $min,
            max_args: $max,
            json: $json,
            debug: $debug,
            served: $served,
        }
    };
}

/// Every command, sorted by name.
#[rustfmt::skip]
pub static COMMANDS: &[Command] = &[
    cmd!("auth", "auth <response>", "Authenticate with the response to the challenge.", 1, Some(1), false, false, MGT),
    cmd!("backend.list", "backend.list [-j] [-p] [<backend_pattern>]", "List backends and their health.", 0, Some(2), true, false, CHILD),
    cmd!("backend.set_health", "backend.set_health <backend_pattern> [auto|healthy|sick]", "Force the health of the matching backends, or return them to probing.", 2, Some(2), false, false, CHILD),
    cmd!("ban", "ban <field> <operator> <arg> [&& <field> <oper> <arg> ...]", "Invalidate every object matching all the conditions.", 3, None, false, false, CHILD),
    cmd!("ban.list", "ban.list [-j]", "List the bans still in force.", 0, Some(0), true, false, CHILD),
    cmd!("banner", "banner", "Print the welcome banner.", 0, Some(0), false, false, MGT),
    cmd!("debug.fragfetch", "debug.fragfetch", "Cut fetched bodies into pieces of at most the given number of bytes (test-only: needs -p debug=+vtc_mode).", 1, Some(1), false, true, CHILD),
    cmd!("debug.listen_address", "debug.listen_address", "Print the addresses the listeners are bound to.", 0, Some(0), false, true, CHILD),
    cmd!("debug.panic.master", "debug.panic.master", "Panic the manager process: lacquerd aborts (for testing what watches it).", 0, Some(0), false, true, MGT),
    cmd!("debug.panic.worker", "debug.panic.worker", "Panic the cache: it stops serving and loses its objects, as varnishd's worker process dying (test-only).", 0, Some(0), false, true, CHILD),
    cmd!("debug.srandom", "debug.srandom", "Seed the random generator of std.random() and the random directors with the given number (default 1), for repeatable tests.", 0, Some(1), false, true, CHILD),
    cmd!("debug.vmod", "debug.vmod", "Show the loaded vmods: how many VCLs use each, its name and where it comes from.", 0, Some(0), false, true, CHILD),
    cmd!("debug.xid", "debug.xid [<xid> [<cachesize>]]", "Print, or set, the next transaction id.", 0, Some(2), false, true, CHILD),
    cmd!("help", "help [-j|<command>]", "List commands, or explain one.", 0, Some(1), true, false, MGT),
    cmd!("panic.clear", "panic.clear [-z]", "Forget the last panic; -z also zeroes the panic counters.", 0, Some(1), false, false, MGT),
    cmd!("panic.show", "panic.show [-j]", "Print the last panic, if any.", 0, Some(0), true, false, MGT),
    cmd!("param.reset", "param.reset <param>", "Return a parameter to its default.", 1, Some(1), false, false, MGT),
    cmd!("param.set", "param.set [-j] <param> <value>", "Change a parameter.", 2, Some(2), true, false, MGT),
    cmd!("param.show", "param.show [-l|-j] [<param>|changed]", "Print parameters and their values.", 0, Some(2), true, false, MGT),
    cmd!("pid", "pid [-j]", "Print the process id.", 0, Some(0), true, false, MGT),
    cmd!("ping", "ping [-j] [<timestamp>]", "Keep the connection alive.", 0, Some(1), true, false, MGT),
    cmd!("quit", "quit", "Close the connection.", 0, Some(0), false, false, MGT),
    cmd!("start", "start", "Start serving requests.", 0, Some(0), false, false, MGT),
    cmd!("status", "status [-j]", "Print whether the cache is serving.", 0, Some(0), true, false, MGT),
    cmd!("stop", "stop", "Stop serving requests.", 0, Some(0), false, false, MGT),
    cmd!("storage.list", "storage.list [-j]", "List the stores.", 0, Some(0), true, false, BOTH),
    cmd!("tls.cert.commit", "tls.cert.commit", "Install the staged certificate changes (running connections keep theirs).", 0, Some(0), false, false, MGT),
    cmd!("tls.cert.discard", "tls.cert.discard <id>", "Stage the removal of a certificate.", 1, Some(1), false, false, MGT),
    cmd!("tls.cert.list", "tls.cert.list", "List the certificates in use and the staged changes.", 0, Some(0), false, false, MGT),
    cmd!("tls.cert.load", "tls.cert.load [<id>] <pem-file>", "Stage a certificate (key and chain in one PEM file); it becomes the default.", 1, Some(2), false, false, MGT),
    cmd!("tls.cert.reload", "tls.cert.reload", "Read every certificate in use again from its files (as SIGHUP).", 0, Some(0), false, false, MGT),
    cmd!("tls.cert.rollback", "tls.cert.rollback", "Forget the staged certificate changes.", 0, Some(0), false, false, MGT),
    cmd!("vcl.deps", "vcl.deps [-j]", "List loaded VCLs and the labels pointing at them.", 0, Some(0), true, false, MGT),
    cmd!("vcl.discard", "vcl.discard <name_pattern>...", "Unload the named VCLs when they are no longer in use.", 1, None, false, false, MGT),
    cmd!("vcl.inline", "vcl.inline <configname> <quoted_VCLstring> [auto|cold|warm]", "Compile and load VCL source given inline.", 2, Some(3), false, false, MGT),
    cmd!("vcl.label", "vcl.label <label> <configname>", "Point a label at a VCL.", 2, Some(2), false, false, BOTH),
    cmd!("vcl.list", "vcl.list [-j]", "List loaded VCLs.", 0, Some(0), true, false, BOTH),
    cmd!("vcl.load", "vcl.load <configname> <filename> [auto|cold|warm]", "Compile and load a VCL file.", 2, Some(3), false, false, MGT),
    cmd!("vcl.show", "vcl.show [-v] [<configname>]", "Print the source of a VCL.", 0, Some(2), false, false, CHILD),
    cmd!("vcl.state", "vcl.state <configname> [auto|cold|warm]", "Force the temperature of a VCL.", 2, Some(2), false, false, BOTH),
    cmd!("vcl.symtab", "vcl.symtab", "Dump the symbols each loaded VCL defines.", 0, Some(0), false, true, MGT),
    cmd!("vcl.use", "vcl.use <configname|label>", "Send new requests to this VCL.", 1, Some(1), false, false, BOTH),
    cmd!("wasm.update", "wasm.update <tenant> <filename>", "Load a new program for a vmod wasm tenant in every VCL that has it, without a reload (requests in flight finish on the old one; a module that fails to load changes nothing).", 2, Some(2), false, false, CHILD),
];

/// Looks a command up by name.
pub fn command(name: &str) -> Option<&'static Command> {
    COMMANDS
        .binary_search_by(|c| c.name.cmp(name))
        .ok()
        .map(|i| &COMMANDS[i])
}

/// A reply: status and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub body: String,
}

impl Reply {
    pub fn ok(body: impl Into<String>) -> Self {
        Reply {
            status: status::OK,
            body: body.into(),
        }
    }

    pub fn err(status: u16, body: impl Into<String>) -> Self {
        Reply {
            status,
            body: body.into(),
        }
    }

    /// The reply as it goes on the wire, truncated to `limit` body bytes
    /// (`cli_limit`) with status 201 when cut.
    pub fn encode(&self, limit: usize) -> Vec<u8> {
        let (status, body) = if self.body.len() > limit {
            let mut cut = limit;
            while !self.body.is_char_boundary(cut) {
                cut -= 1;
            }
            (status::TRUNCATED, &self.body[..cut])
        } else {
            (self.status, self.body.as_str())
        };
        let mut out = lacquer_cli::status_line(status, body.len()).into_bytes();
        out.extend_from_slice(body.as_bytes());
        out.push(b'\n');
        out
    }
}

/// Why a request line could not be split into words.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    #[error("Missing '\"'")]
    MissingQuote,
    #[error("Invalid backslash sequence")]
    BadEscape,
    /// A double quote inside an unquoted word.
    #[error("Invalid '\"'")]
    InvalidQuote,
    /// A quoted word right after another, with only blanks between.
    #[error("Missing separator between arguments")]
    MissingSeparator,
}

/// Splits a request line into words: blanks separate words, double quotes
/// group, and backslash escapes (`\n \r \t \" \\ \xHH \NNN`) are decoded in
/// quoted words.
pub fn split_words(line: &str) -> Result<Vec<String>, SyntaxError> {
    let b = line.as_bytes();
    let mut words = Vec::new();
    let mut i = 0;
    // Whether the last word was quoted: varnishd wants something other
    // than blanks between two quoted words.
    let mut after_quote = false;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let mut w: Vec<u8> = Vec::new();
        if b[i] == b'"' {
            if after_quote {
                return Err(SyntaxError::MissingSeparator);
            }
            after_quote = true;
            i += 1;
            loop {
                match b.get(i) {
                    None => return Err(SyntaxError::MissingQuote),
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(b'\\') => {
                        let (byte, used) = unescape(&b[i + 1..])?;
                        w.push(byte);
                        i += 1 + used;
                    }
                    Some(&c) => {
                        w.push(c);
                        i += 1;
                    }
                }
            }
        } else {
            after_quote = false;
            while i < b.len() && !b[i].is_ascii_whitespace() {
                if b[i] == b'"' {
                    return Err(SyntaxError::InvalidQuote);
                }
                if b[i] == b'\\' {
                    let (byte, used) = unescape(&b[i + 1..])?;
                    w.push(byte);
                    i += 1 + used;
                } else {
                    w.push(b[i]);
                    i += 1;
                }
            }
        }
        words.push(String::from_utf8_lossy(&w).into_owned());
    }
    Ok(words)
}

/// Decodes the escape after a backslash; returns the byte and bytes used.
fn unescape(s: &[u8]) -> Result<(u8, usize), SyntaxError> {
    let c = *s.first().ok_or(SyntaxError::BadEscape)?;
    Ok(match c {
        b'n' => (b'\n', 1),
        b'r' => (b'\r', 1),
        b't' => (b'\t', 1),
        b'"' => (b'"', 1),
        b'\\' => (b'\\', 1),
        b'x' => {
            let hex = s.get(1..3).ok_or(SyntaxError::BadEscape)?;
            let hex = std::str::from_utf8(hex).map_err(|_| SyntaxError::BadEscape)?;
            (
                u8::from_str_radix(hex, 16).map_err(|_| SyntaxError::BadEscape)?,
                3,
            )
        }
        b'0'..=b'7' => {
            let n = s
                .iter()
                .take(3)
                .take_while(|d| (b'0'..=b'7').contains(*d))
                .count();
            let oct = std::str::from_utf8(&s[..n]).map_err(|_| SyntaxError::BadEscape)?;
            let v = u16::from_str_radix(oct, 8).map_err(|_| SyntaxError::BadEscape)?;
            (u8::try_from(v).map_err(|_| SyntaxError::BadEscape)?, n)
        }
        _ => return Err(SyntaxError::BadEscape),
    })
}

/// Reassembles requests from the lines of a connection, handling
/// here-documents (`… << TOKEN` up to a line equal to `TOKEN`).
#[derive(Debug, Default)]
pub struct RequestReader {
    pending: Option<(Vec<String>, String, String)>,
}

/// What one line of input produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A complete request's words.
    Request(Vec<String>),
    /// The line was consumed as part of a here-document.
    More,
    /// An empty line: nothing to do.
    Empty,
    /// The line could not be split.
    Error(SyntaxError),
}

impl RequestReader {
    /// Feeds one line, without its terminating newline.
    pub fn line(&mut self, line: &str) -> Line {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some((words, token, mut body)) = self.pending.take() {
            if line == token {
                let mut words = words;
                words.push(body);
                return Line::Request(words);
            }
            body.push_str(line);
            body.push('\n');
            self.pending = Some((words, token, body));
            return Line::More;
        }
        let mut words = match split_words(line) {
            Ok(w) => w,
            Err(e) => return Line::Error(e),
        };
        if words.is_empty() {
            return Line::Empty;
        }
        // As varnishd, a leading '-' (which in -I files means "failure is
        // not fatal") is not part of the command's name.
        if let Some(name) = words[0].strip_prefix('-')
            && !name.is_empty()
        {
            words[0] = name.to_string();
        }
        let last = words.len() - 1;
        if words.len() >= 2 && words[last - 1] == "<<" {
            let token = words.pop().expect("checked length");
            words.pop();
            self.pending = Some((words, token, String::new()));
            return Line::More;
        }
        if let Some(token) = words[last].strip_prefix("<<").filter(|t| !t.is_empty()) {
            let token = token.to_string();
            words.pop();
            self.pending = Some((words, token, String::new()));
            return Line::More;
        }
        Line::Request(words)
    }
}

/// The words of a command as varnishd's cache process receives them: the
/// manager passes a command it does not serve itself on with each
/// argument written out unquoted, so an argument holding spaces arrives
/// as several and an empty one not at all. Other commands keep their
/// words.
pub fn as_child_reads(words: Vec<String>, running: bool) -> Vec<String> {
    let child = running && command(&words[0]).is_some_and(|c| c.served == Served::Child);
    if !child || words[1..].iter().all(|w| !w.is_empty() && !w.contains(' ')) {
        return words;
    }
    let mut out = vec![words[0].clone()];
    for w in &words[1..] {
        out.extend(w.split(' ').filter(|p| !p.is_empty()).map(str::to_string));
    }
    out
}

/// Checks a request's argument count against the table; `-j` (where the
/// command takes it) is not counted.
/// `running` says whether the child runs: its own commands are unknown to
/// the manager while it does not.
pub fn check_args(words: &[String], running: bool) -> Result<&'static Command, Reply> {
    let unknown = || Reply::err(status::UNKNOWN, UNKNOWN_REQUEST);
    let name = words.first().ok_or_else(unknown)?;
    let cmd = command(name).ok_or_else(|| {
        if name.bytes().any(|b| b.is_ascii_uppercase()) {
            Reply::err(
                status::UNKNOWN,
                "Unknown request.\nType 'help' for more info.\nall commands are in lower-case.\n",
            )
        } else {
            unknown()
        }
    })?;
    if !cmd.available(running) {
        return Err(Reply::err(
            status::UNKNOWN,
            "Unknown request in manager process (child not running).\nType 'help' for more info.",
        ));
    }
    // As varnishd's dispatcher: `-j` first asks for JSON, which only
    // some commands have.
    if !cmd.json && words.get(1).is_some_and(|w| w == "-j") {
        return Err(Reply::err(status::UNIMPL, "JSON unimplemented\n"));
    }
    let n = words[1..]
        .iter()
        .filter(|w| !(cmd.json && w.as_str() == "-j"))
        .count();
    if n < cmd.min_args {
        return Err(Reply::err(status::TOOFEW, "Too few parameters\n"));
    }
    if cmd.max_args.is_some_and(|m| n > m) {
        return Err(Reply::err(status::TOOMANY, "Too many parameters\n"));
    }
    Ok(cmd)
}

/// The text of `help`: the syntax of every ordinary command (`help`),
/// every debug command (`help -d`) or both (`help -a`), of those that
/// exist while the child runs or not (`running`).
pub fn help_text(ordinary: bool, debug: bool, running: bool) -> String {
    let mut s = String::new();
    for c in COMMANDS
        .iter()
        .filter(|c| c.available(running))
        .filter(|c| if c.debug { debug } else { ordinary })
    {
        s.push_str(c.syntax);
        s.push('\n');
    }
    s
}

/// A fresh 32-character challenge for `-S` authentication.
pub fn challenge() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::with_capacity(32);
    while out.len() < 32 {
        let mut h = RandomState::new().build_hasher();
        h.write_usize(out.len());
        let v = h.finish();
        for i in 0..8 {
            if out.len() < 32 {
                out.push((b'a' + ((v >> (i * 8)) as u8 % 26)) as char);
            }
        }
    }
    out
}

/// The body of the 107 reply that opens an authenticated connection.
pub fn auth_banner(challenge: &str) -> String {
    format!("{challenge}\n\nAuthentication required.\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_sorted() {
        for w in COMMANDS.windows(2) {
            assert!(w[0].name < w[1].name);
        }
    }

    #[test]
    fn wire_format() {
        assert_eq!(Reply::ok("PONG").encode(1000), b"200 4       \nPONG\n");
        assert_eq!(Reply::ok("").encode(1000), b"200 0       \n\n");
        let r = Reply::ok("abcdef").encode(3);
        assert_eq!(r, b"201 3       \nabc\n");
    }

    #[test]
    fn words() {
        assert_eq!(
            split_words(r#"ban req.url ~ "^/a b\"c""#).unwrap(),
            vec!["ban", "req.url", "~", "^/a b\"c"]
        );
        assert_eq!(
            split_words(r#"ping "\x41\101\n""#).unwrap(),
            vec!["ping", "AA\n"]
        );
        assert_eq!(split_words("\"open"), Err(SyntaxError::MissingQuote));
        assert_eq!(split_words(r#""\q""#), Err(SyntaxError::BadEscape));
        assert_eq!(split_words("  "), Ok(vec![]));
        assert_eq!(split_words("a b\"c"), Err(SyntaxError::InvalidQuote));
        assert_eq!(
            split_words(r#"ban "a" "b""#),
            Err(SyntaxError::MissingSeparator)
        );
        assert_eq!(split_words(r#""a" b "c""#).unwrap(), vec!["a", "b", "c"]);
        assert_eq!(split_words(r#""a"x"#).unwrap(), vec!["a", "x"]);
    }

    #[test]
    fn heredoc() {
        let mut r = RequestReader::default();
        assert_eq!(r.line("vcl.inline x << EOF"), Line::More);
        assert_eq!(r.line("vcl 4.1;"), Line::More);
        assert_eq!(r.line("backend b none;"), Line::More);
        assert_eq!(
            r.line("EOF"),
            Line::Request(vec![
                "vcl.inline".into(),
                "x".into(),
                "vcl 4.1;\nbackend b none;\n".into()
            ])
        );
        assert_eq!(r.line(""), Line::Empty);
        assert_eq!(r.line("vcl.inline y <<XX"), Line::More);
        assert_eq!(
            r.line("XX"),
            Line::Request(vec!["vcl.inline".into(), "y".into(), String::new()])
        );
    }

    #[test]
    fn arg_checks() {
        let w = |s: &str| split_words(s).unwrap();
        assert_eq!(
            check_args(&w("vcl.load"), true).unwrap_err().status,
            status::TOOFEW
        );
        assert_eq!(
            check_args(&w("ping a b"), true).unwrap_err().status,
            status::TOOMANY
        );
        assert_eq!(
            check_args(&w("nope"), true).unwrap_err().status,
            status::UNKNOWN
        );
        assert!(check_args(&w("ping -j 123"), false).is_ok());
        let ban = w("ban req.url ~ a && obj.status == 200");
        assert!(check_args(&ban, true).is_ok());
        // The child's own commands do not exist while it is stopped.
        let stopped = check_args(&ban, false).unwrap_err();
        assert_eq!(stopped.status, status::UNKNOWN);
        assert!(stopped.body.contains("child not running"));
        assert!(check_args(&w("vcl.list"), false).is_ok());
    }

    #[test]
    fn child_commands_lose_spaces_and_empty_words() {
        let w = |s: &str| split_words(s).unwrap();
        assert_eq!(
            as_child_reads(w(r#"ban req.url == "a b""#), true),
            w("ban req.url == a b")
        );
        assert_eq!(
            as_child_reads(w(r#"backend.list """#), true),
            w("backend.list")
        );
        // The manager's own commands, and a stopped child, keep them.
        assert_eq!(as_child_reads(w(r#"vcl.use "a b""#), true).len(), 2);
        assert_eq!(as_child_reads(w(r#"ban req.url == "a b""#), false).len(), 4);
    }

    #[test]
    fn auth() {
        let c = challenge();
        assert_eq!(c.len(), 32);
        assert!(c.bytes().all(|b| b.is_ascii_lowercase()));
        let plain = help_text(true, false, true);
        assert!(plain.contains("vcl.load <configname> <filename> [auto|cold|warm]\n"));
        assert!(!plain.contains("debug.xid"));
        assert!(help_text(false, true, true).contains("debug.xid"));
        assert!(!help_text(false, true, true).contains("vcl.load"));
        assert!(help_text(true, true, true).contains("debug.xid"));
        let stopped = help_text(true, true, false);
        assert!(!stopped.contains("debug.xid") && !stopped.contains("ban "));
        assert!(stopped.contains("vcl.use"));
    }
}
