//! Hitch's configuration file (`hitch.conf`), as `lacquerd -A FILE` reads it.
//!
//! The format is a list of `key = value` assignments; `#` starts a comment
//! that runs to the end of the line. A value is a quoted string (`"..."`
//! with `\"` and `\\` escapes), one or more bare words (`tls-protos =
//! TLSv1.2 TLSv1.3`), or a `{ ... }` block of assignments (`frontend` and
//! `pem-file`). `frontend` and `pem-file` may be given several times; every
//! other key once per scope. Options allowed in a frontend block override
//! the top-level ones for that frontend only.
//!
//! Keys that configure Hitch as a separate process (`backend`, `workers`,
//! `daemon`, `user`, `write-proxy-v2`, …) or OpenSSL details rustls has no
//! equivalent for are accepted with a warning ([`HitchConf::warnings`]),
//! never applied approximately. A key Hitch does not know, a value of the
//! wrong kind or a malformed line is an error naming the file and line.
//! One key is Lacquer's own: `ticket-key-file`, the secret several nodes
//! share so that clients resume their TLS sessions on any of them.

use std::fmt;
use std::path::{Path, PathBuf};

/// A syntax or value error, with the place it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfError {
    pub file: String,
    pub line: usize,
    pub msg: String,
}

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.msg)
    }
}

impl std::error::Error for ConfError {}

/// `client-verify`: whether clients are asked for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientVerify {
    #[default]
    None,
    Optional,
    Required,
}

/// A TLS protocol version Lacquer can offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Proto {
    Tls12,
    Tls13,
}

/// One `pem-file`: a certificate chain with its key (in the same file
/// unless `private-key` names another), and an optional OCSP staple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemFile {
    pub cert: PathBuf,
    pub private_key: Option<PathBuf>,
    pub ocsp_resp_file: Option<PathBuf>,
    /// `ocsp-dir`: where a staple cached by Hitch's file naming is looked
    /// for first ([`crate::ocsp`]).
    pub ocsp_dir: Option<PathBuf>,
    /// Line of the assignment, for messages about the files it names.
    pub line: usize,
}

/// The options that may appear both at the top level and in a frontend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    pub pem_files: Vec<PemFile>,
    pub ciphers: Option<String>,
    pub ciphersuites: Option<String>,
    pub tls_protos: Option<Vec<Proto>>,
    pub sni_nomatch_abort: Option<bool>,
    pub client_verify: Option<ClientVerify>,
    pub client_verify_ca: Option<PathBuf>,
    pub prefer_server_ciphers: Option<bool>,
}

/// One `frontend`: where to listen and its own options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontend {
    /// `None` or `*` for every interface.
    pub host: Option<String>,
    pub port: String,
    /// `match-global-certs`: the top-level certificates are offered too
    /// when the frontend has its own (Hitch's default: only when it has none).
    pub match_global_certs: bool,
    pub scope: Scope,
    pub line: usize,
}

/// A parsed `hitch.conf`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HitchConf {
    pub file: String,
    pub frontends: Vec<Frontend>,
    pub global: Scope,
    pub pem_dir: Option<PathBuf>,
    pub pem_dir_glob: Option<String>,
    /// `alpn-protos`: what the operator allows; Lacquer offers the
    /// intersection with what the listener really serves.
    pub alpn_protos: Option<Vec<String>>,
    pub ocsp_dir: Option<PathBuf>,
    /// `ticket-key-file` (Lacquer's own key): the secret session-ticket
    /// keys derive from, shared by the nodes that read the same file.
    pub ticket_key_file: Option<PathBuf>,
    /// Keys accepted but not applied, one message each (file and line).
    pub warnings: Vec<String>,
}

/// The effective options of one frontend: its own, else the top level's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub pem_files: Vec<PemFile>,
    pub ciphers: Option<String>,
    pub ciphersuites: Option<String>,
    pub tls_protos: Vec<Proto>,
    pub sni_nomatch_abort: bool,
    pub client_verify: ClientVerify,
    pub client_verify_ca: Option<PathBuf>,
    pub prefer_server_ciphers: bool,
}

impl HitchConf {
    /// The options `fe` runs with (top-level defaults filled in).
    pub fn effective(&self, fe: &Frontend) -> Effective {
        let g = &self.global;
        let s = &fe.scope;
        let pem_files = if s.pem_files.is_empty() {
            g.pem_files.clone()
        } else if fe.match_global_certs {
            g.pem_files.iter().chain(&s.pem_files).cloned().collect()
        } else {
            s.pem_files.clone()
        };
        Effective {
            pem_files,
            ciphers: s.ciphers.clone().or_else(|| g.ciphers.clone()),
            ciphersuites: s.ciphersuites.clone().or_else(|| g.ciphersuites.clone()),
            tls_protos: s
                .tls_protos
                .clone()
                .or_else(|| g.tls_protos.clone())
                .unwrap_or_else(|| vec![Proto::Tls12, Proto::Tls13]),
            sni_nomatch_abort: s.sni_nomatch_abort.or(g.sni_nomatch_abort).unwrap_or(false),
            client_verify: s.client_verify.or(g.client_verify).unwrap_or_default(),
            client_verify_ca: s
                .client_verify_ca
                .clone()
                .or_else(|| g.client_verify_ca.clone()),
            prefer_server_ciphers: s
                .prefer_server_ciphers
                .or(g.prefer_server_ciphers)
                .unwrap_or(false),
        }
    }
}

/// Reads and parses a `hitch.conf` file.
pub fn load(path: &Path) -> Result<HitchConf, ConfError> {
    let file = path.display().to_string();
    let text = std::fs::read(path).map_err(|e| ConfError {
        file: file.clone(),
        line: 0,
        msg: format!("cannot read the file: {e}"),
    })?;
    let text = String::from_utf8_lossy(&text);
    parse(&file, &text)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Str(String),
    Eq,
    Open,
    Close,
    Newline,
}

fn lex(file: &str, text: &str) -> Result<Vec<(Tok, usize)>, ConfError> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut it = text.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\n' => {
                out.push((Tok::Newline, line));
                line += 1;
            }
            c if c.is_whitespace() => {}
            '#' => {
                while it.peek().is_some_and(|&c| c != '\n') {
                    it.next();
                }
            }
            '=' => out.push((Tok::Eq, line)),
            '{' => out.push((Tok::Open, line)),
            '}' => out.push((Tok::Close, line)),
            '"' => {
                let start = line;
                let mut s = String::new();
                loop {
                    match it.next() {
                        None => {
                            return Err(ConfError {
                                file: file.to_string(),
                                line: start,
                                msg: "unterminated quoted string".into(),
                            });
                        }
                        Some('"') => break,
                        Some('\\') => match it.next() {
                            Some(e @ ('"' | '\\')) => s.push(e),
                            Some(e) => {
                                s.push('\\');
                                s.push(e);
                            }
                            None => {}
                        },
                        Some('\n') => {
                            return Err(ConfError {
                                file: file.to_string(),
                                line: start,
                                msg: "newline inside a quoted string".into(),
                            });
                        }
                        Some(c) => s.push(c),
                    }
                }
                out.push((Tok::Str(s), start));
            }
            c => {
                let mut s = String::from(c);
                while let Some(&n) = it.peek() {
                    if n.is_whitespace() || matches!(n, '=' | '{' | '}' | '"' | '#') {
                        break;
                    }
                    s.push(n);
                    it.next();
                }
                out.push((Tok::Word(s), line));
            }
        }
    }
    Ok(out)
}

/// A value as written.
#[derive(Debug, Clone)]
enum Value {
    /// A quoted string, or bare words joined by one space.
    Text(String),
    Block(Vec<Assign>),
}

#[derive(Debug, Clone)]
struct Assign {
    key: String,
    value: Value,
    line: usize,
}

struct Parser<'a> {
    file: &'a str,
    toks: Vec<(Tok, usize)>,
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, line: usize, msg: impl Into<String>) -> ConfError {
        ConfError {
            file: self.file.to_string(),
            line,
            msg: msg.into(),
        }
    }

    fn line(&self) -> usize {
        self.toks
            .get(self.pos)
            .or(self.toks.last())
            .map_or(1, |t| t.1)
    }

    fn skip_newlines(&mut self) {
        while matches!(self.toks.get(self.pos), Some((Tok::Newline, _))) {
            self.pos += 1;
        }
    }

    /// Assignments until `}` (inside a block) or the end of the file.
    fn assigns(&mut self, in_block: bool) -> Result<Vec<Assign>, ConfError> {
        let mut out = Vec::new();
        loop {
            self.skip_newlines();
            let line = self.line();
            match self.toks.get(self.pos).cloned() {
                None if in_block => return Err(self.err(line, "missing '}' at end of file")),
                None => return Ok(out),
                Some((Tok::Close, _)) if in_block => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some((Tok::Word(key), line)) => {
                    self.pos += 1;
                    match self.toks.get(self.pos) {
                        Some((Tok::Eq, _)) => self.pos += 1,
                        _ => return Err(self.err(line, format!("expected '=' after '{key}'"))),
                    }
                    let value = self.value(line, &key)?;
                    out.push(Assign { key, value, line });
                }
                Some((t, line)) => {
                    return Err(self.err(line, format!("expected an option name, found {t:?}")));
                }
            }
        }
    }

    fn value(&mut self, line: usize, key: &str) -> Result<Value, ConfError> {
        match self.toks.get(self.pos).cloned() {
            Some((Tok::Str(s), _)) => {
                self.pos += 1;
                Ok(Value::Text(s))
            }
            Some((Tok::Open, _)) => {
                self.pos += 1;
                Ok(Value::Block(self.assigns(true)?))
            }
            Some((Tok::Word(_), _)) => {
                // Bare words up to the end of the line, a '}', or the
                // next `key =` on the same line.
                let mut words = Vec::new();
                while let Some((Tok::Word(w), _)) = self.toks.get(self.pos) {
                    if matches!(self.toks.get(self.pos + 1), Some((Tok::Eq, _))) {
                        break;
                    }
                    words.push(w.clone());
                    self.pos += 1;
                }
                if words.is_empty() {
                    return Err(self.err(line, format!("missing value for '{key}'")));
                }
                Ok(Value::Text(words.join(" ")))
            }
            _ => Err(self.err(line, format!("missing value for '{key}'"))),
        }
    }
}

/// Keys Hitch knows that configure what Lacquer does differently or does
/// not do; each is accepted and reported, never applied.
const NOT_APPLIED: &[(&str, &str)] = &[
    (
        "backend",
        "Lacquer serves the decrypted requests itself; there is no backend to forward to",
    ),
    ("workers", "connections are served by Lacquer's own tasks"),
    ("daemon", "use lacquerd's own options to daemonize"),
    ("user", "Lacquer does not switch users for TLS"),
    ("group", "Lacquer does not switch groups for TLS"),
    ("chroot", "Lacquer does not chroot for TLS"),
    ("syslog", "TLS events go to the shared-memory log"),
    ("syslog-facility", "TLS events go to the shared-memory log"),
    ("quiet", "TLS events go to the shared-memory log"),
    ("log-level", "TLS events go to the shared-memory log"),
    ("log-filename", "TLS events go to the shared-memory log"),
    (
        "write-proxy",
        "no PROXY header is needed: VCL sees the client directly",
    ),
    (
        "write-proxy-v1",
        "no PROXY header is needed: VCL sees the client directly",
    ),
    (
        "write-proxy-v2",
        "no PROXY header is needed: VCL sees the client directly",
    ),
    (
        "write-ip",
        "no address header is needed: VCL sees the client directly",
    ),
    ("proxy-proxy", "PROXY headers are not read on -A listeners"),
    (
        "proxy-tlv",
        "vmod tls and vmod proxy see the TLS details directly",
    ),
    (
        "proxy-client-cert",
        "vmod tls sees the client certificate directly",
    ),
    ("ssl-engine", "rustls does not use OpenSSL engines"),
    ("engine", "rustls does not use OpenSSL engines"),
    ("keepalive", "TCP keep-alive follows lacquerd's parameters"),
    (
        "backlog",
        "the listen backlog is the listen_depth parameter",
    ),
    ("backend-refresh", "there is no backend to look up"),
    (
        "backend-connect-timeout",
        "there is no backend to connect to",
    ),
    (
        "ssl-handshake-timeout",
        "the handshake timeout is the tls_handshake_timeout parameter",
    ),
    (
        "tcp-fastopen",
        "TCP Fast Open is not enabled on -A listeners",
    ),
    (
        "ocsp-connect-tmo",
        "OCSP responses are not fetched; they are stapled from ocsp-dir (files Hitch named) or pem-file { ocsp-resp-file }",
    ),
    (
        "ocsp-resp-tmo",
        "OCSP responses are not fetched; they are stapled from ocsp-dir (files Hitch named) or pem-file { ocsp-resp-file }",
    ),
    (
        "ocsp-refresh-interval",
        "OCSP responses are not fetched; they are stapled from ocsp-dir (files Hitch named) or pem-file { ocsp-resp-file }",
    ),
    (
        "ocsp-verify-staple",
        "a stapled OCSP response is sent as read from its file, not verified",
    ),
    (
        "ecdh-curve",
        "rustls chooses among X25519, P-256 and P-384 itself",
    ),
    (
        "dhparam-file",
        "rustls offers no finite-field Diffie-Hellman suites",
    ),
    (
        "session-cache",
        "TLS sessions resume through tickets and Lacquer's own session cache",
    ),
    (
        "shared-cache-listen",
        "share session tickets between nodes with a ticket key file instead",
    ),
    (
        "shared-cache-peer",
        "share session tickets between nodes with a ticket key file instead",
    ),
    (
        "shared-cache-if",
        "share session tickets between nodes with a ticket key file instead",
    ),
    ("send-bufsize", "socket buffers keep the kernel's defaults"),
    ("recv-bufsize", "socket buffers keep the kernel's defaults"),
    ("sni-nomatch-reject", "use sni-nomatch-abort"),
];

fn parse_bool(p: &Parser<'_>, a: &Assign, s: &str) -> Result<bool, ConfError> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "yes" | "true" | "1" => Ok(true),
        "off" | "no" | "false" | "0" => Ok(false),
        _ => Err(p.err(a.line, format!("'{}' takes on or off, not '{s}'", a.key))),
    }
}

/// Parses the text of a `hitch.conf` (`file` names it in messages).
pub fn parse(file: &str, text: &str) -> Result<HitchConf, ConfError> {
    let toks = lex(file, text)?;
    let mut p = Parser { file, toks, pos: 0 };
    let top = p.assigns(false)?;
    let mut conf = HitchConf {
        file: file.to_string(),
        ..HitchConf::default()
    };
    let mut seen: Vec<&str> = Vec::new();
    for a in &top {
        if !matches!(a.key.as_str(), "frontend" | "pem-file") {
            if seen.contains(&a.key.as_str()) {
                return Err(p.err(a.line, format!("'{}' is set twice", a.key)));
            }
            seen.push(a.key.as_str());
        }
        if scope_option(&p, &mut conf.global, a, &mut conf.warnings)? {
            continue;
        }
        let text = |a: &Assign| -> Result<String, ConfError> {
            match &a.value {
                Value::Text(s) => Ok(s.clone()),
                Value::Block(_) => Err(p.err(a.line, format!("'{}' takes no block", a.key))),
            }
        };
        match a.key.as_str() {
            "frontend" => conf.frontends.push(frontend(&p, a, &mut conf.warnings)?),
            "pem-dir" => conf.pem_dir = Some(PathBuf::from(text(a)?)),
            "pem-dir-glob" => conf.pem_dir_glob = Some(text(a)?),
            "ticket-key-file" => conf.ticket_key_file = Some(PathBuf::from(text(a)?)),
            "ocsp-dir" => {
                conf.ocsp_dir = Some(PathBuf::from(text(a)?));
            }
            "alpn-protos" => {
                let list: Vec<String> = text(a)?
                    .split([',', ' '])
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                if list.is_empty() {
                    return Err(p.err(a.line, "alpn-protos lists no protocol"));
                }
                for proto in &list {
                    if proto != "h2" && proto != "http/1.1" && proto != "http/1.0" {
                        conf.warnings.push(format!(
                            "{file}:{}: alpn-protos: '{proto}' is not a protocol Lacquer serves; not offered",
                            a.line
                        ));
                    }
                }
                conf.alpn_protos = Some(list);
            }
            "ssl" | "tls" => {
                let on = parse_bool(&p, a, &text(a)?)?;
                if on {
                    if conf.global.tls_protos.is_some() {
                        return Err(p.err(
                            a.line,
                            format!("'{}' and tls-protos both select the protocols", a.key),
                        ));
                    }
                    conf.warnings.push(format!(
                        "{file}:{}: {} = on: SSLv3, TLSv1.0 and TLSv1.1 are not offered (rustls has only TLSv1.2 and TLSv1.3)",
                        a.line, a.key
                    ));
                    conf.global.tls_protos = Some(vec![Proto::Tls12]);
                }
            }
            key => {
                if let Some((_, why)) = NOT_APPLIED.iter().find(|(k, _)| *k == key) {
                    conf.warnings
                        .push(format!("{file}:{}: {key} is not applied: {why}", a.line));
                } else if matches!(key, "host" | "port" | "match-global-certs") {
                    return Err(p.err(a.line, format!("'{key}' belongs in a frontend block")));
                } else {
                    return Err(p.err(a.line, format!("unknown option '{key}'")));
                }
            }
        }
    }
    // ocsp-dir holds for every pem-file, wherever it was written.
    if let Some(dir) = &conf.ocsp_dir {
        let fronts = conf.frontends.iter_mut().map(|f| &mut f.scope);
        for scope in std::iter::once(&mut conf.global).chain(fronts) {
            for pem in &mut scope.pem_files {
                pem.ocsp_dir = Some(dir.clone());
            }
        }
    }
    Ok(conf)
}

/// Applies an option that may appear at the top level or in a frontend;
/// `false` when `a` is not one.
fn scope_option(
    p: &Parser<'_>,
    scope: &mut Scope,
    a: &Assign,
    warnings: &mut Vec<String>,
) -> Result<bool, ConfError> {
    let text = || -> Result<String, ConfError> {
        match &a.value {
            Value::Text(s) => Ok(s.clone()),
            Value::Block(_) => Err(p.err(a.line, format!("'{}' takes no block", a.key))),
        }
    };
    match a.key.as_str() {
        "pem-file" => scope.pem_files.push(pem_file(p, a)?),
        "ciphers" => scope.ciphers = Some(text()?),
        "ciphersuites" => scope.ciphersuites = Some(text()?),
        "tls-protos" => {
            let mut protos = Vec::new();
            for tok in text()?.split_whitespace() {
                match tok {
                    "TLSv1.2" => protos.push(Proto::Tls12),
                    "TLSv1.3" => protos.push(Proto::Tls13),
                    "SSLv3" | "TLSv1.0" | "TLSv1.1" => warnings.push(format!(
                        "{}:{}: tls-protos: {tok} is not offered (rustls has only TLSv1.2 and TLSv1.3)",
                        p.file, a.line
                    )),
                    _ => {
                        return Err(p.err(
                            a.line,
                            format!(
                                "tls-protos: unknown protocol '{tok}' (known: SSLv3 TLSv1.0 TLSv1.1 TLSv1.2 TLSv1.3)"
                            ),
                        ));
                    }
                }
            }
            if protos.is_empty() {
                return Err(p.err(
                    a.line,
                    "tls-protos selects no protocol Lacquer offers (TLSv1.2, TLSv1.3)",
                ));
            }
            protos.sort();
            protos.dedup();
            scope.tls_protos = Some(protos);
        }
        "sni-nomatch-abort" => scope.sni_nomatch_abort = Some(parse_bool(p, a, &text()?)?),
        "prefer-server-ciphers" => {
            scope.prefer_server_ciphers = Some(parse_bool(p, a, &text()?)?);
        }
        "client-verify" => {
            scope.client_verify = Some(match text()?.as_str() {
                "none" => ClientVerify::None,
                "optional" => ClientVerify::Optional,
                "required" | "require" => ClientVerify::Required,
                other => {
                    return Err(p.err(
                        a.line,
                        format!("client-verify takes none, optional or required, not '{other}'"),
                    ));
                }
            });
        }
        "client-verify-ca" => scope.client_verify_ca = Some(PathBuf::from(text()?)),
        _ => return Ok(false),
    }
    Ok(true)
}

fn pem_file(p: &Parser<'_>, a: &Assign) -> Result<PemFile, ConfError> {
    match &a.value {
        Value::Text(s) => {
            if s.is_empty() {
                return Err(p.err(a.line, "pem-file names no file"));
            }
            Ok(PemFile {
                cert: PathBuf::from(s),
                private_key: None,
                ocsp_resp_file: None,
                ocsp_dir: None,
                line: a.line,
            })
        }
        Value::Block(items) => {
            let (mut cert, mut key, mut ocsp) = (None, None, None);
            for i in items {
                let Value::Text(s) = &i.value else {
                    return Err(p.err(i.line, format!("'{}' takes no block", i.key)));
                };
                let slot = match i.key.as_str() {
                    "cert" => &mut cert,
                    "private-key" => &mut key,
                    "ocsp-resp-file" => &mut ocsp,
                    other => {
                        return Err(p.err(
                            i.line,
                            format!(
                                "unknown option '{other}' in a pem-file block (known: cert, private-key, ocsp-resp-file)"
                            ),
                        ));
                    }
                };
                if slot.is_some() {
                    return Err(p.err(i.line, format!("'{}' is set twice", i.key)));
                }
                *slot = Some(PathBuf::from(s));
            }
            Ok(PemFile {
                cert: cert.ok_or_else(|| p.err(a.line, "pem-file block without 'cert'"))?,
                private_key: key,
                ocsp_resp_file: ocsp,
                ocsp_dir: None,
                line: a.line,
            })
        }
    }
}

/// `frontend = "[HOST]:PORT[+CERT]"` or a `frontend = { ... }` block.
fn frontend(p: &Parser<'_>, a: &Assign, warnings: &mut Vec<String>) -> Result<Frontend, ConfError> {
    match &a.value {
        Value::Text(s) => {
            let (addr, cert) = match s.split_once('+') {
                Some((addr, cert)) => (addr, Some(cert)),
                None => (s.as_str(), None),
            };
            let (host, port) = split_addr(addr)
                .ok_or_else(|| p.err(a.line, format!("frontend '{s}' is not [HOST]:PORT")))?;
            let mut scope = Scope::default();
            if let Some(c) = cert {
                scope.pem_files.push(PemFile {
                    cert: PathBuf::from(c),
                    private_key: None,
                    ocsp_resp_file: None,
                    ocsp_dir: None,
                    line: a.line,
                });
            }
            Ok(Frontend {
                host,
                port,
                match_global_certs: false,
                scope,
                line: a.line,
            })
        }
        Value::Block(items) => {
            let (mut host, mut port, mut mgc) = (None, None, false);
            let mut scope = Scope::default();
            let mut seen: Vec<&str> = Vec::new();
            for i in items {
                if i.key != "pem-file" {
                    if seen.contains(&i.key.as_str()) {
                        return Err(p.err(i.line, format!("'{}' is set twice", i.key)));
                    }
                    seen.push(i.key.as_str());
                }
                if scope_option(p, &mut scope, i, warnings)? {
                    continue;
                }
                let Value::Text(s) = &i.value else {
                    return Err(p.err(i.line, format!("'{}' takes no block", i.key)));
                };
                match i.key.as_str() {
                    "host" => host = Some(s.clone()),
                    "port" => port = Some(s.clone()),
                    "match-global-certs" => mgc = parse_bool(p, i, s)?,
                    other => {
                        return Err(p.err(
                            i.line,
                            format!("'{other}' cannot be set in a frontend block"),
                        ));
                    }
                }
            }
            let port = port.ok_or_else(|| p.err(a.line, "frontend block without 'port'"))?;
            if port.is_empty() || !port.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err(p.err(a.line, format!("frontend port '{port}' is not a port")));
            }
            Ok(Frontend {
                host: host.filter(|h| h != "*" && !h.is_empty()),
                port,
                match_global_certs: mgc,
                scope,
                line: a.line,
            })
        }
    }
}

/// `[HOST]:PORT`, `HOST:PORT`, `*:PORT` → (host, port); `None` host for `*`.
fn split_addr(s: &str) -> Option<(Option<String>, String)> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        (h, after.strip_prefix(':')?)
    } else {
        s.rsplit_once(':')?
    };
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return None;
    }
    let host = (!host.is_empty() && host != "*").then(|| host.to_string());
    Some((host, port.to_string()))
}

/// Whether `name` matches a shell-style `glob` (`*` and `?`), as
/// `pem-dir-glob` filters file names.
pub fn glob_match(glob: &str, name: &str) -> bool {
    fn m(g: &[u8], n: &[u8]) -> bool {
        match g.split_first() {
            None => n.is_empty(),
            Some((b'*', rest)) => (0..=n.len()).any(|i| m(rest, &n[i..])),
            Some((b'?', rest)) => !n.is_empty() && m(rest, &n[1..]),
            Some((c, rest)) => n.first() == Some(c) && m(rest, &n[1..]),
        }
    }
    // Collapse runs of '*' so the backtracking stays linear in practice.
    let mut g = Vec::with_capacity(glob.len());
    for b in glob.bytes() {
        if !(b == b'*' && g.last() == Some(&b'*')) {
            g.push(b);
        }
    }
    m(&g, name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_object_store_report_config() {
        let c = parse(
            "hitch.conf",
            "frontend = {\n    host = \"*\"\n    port = \"443\"\n}\nbackend = \"[127.0.0.1]:8443\"\nworkers = 4\npem-file = \"/etc/hitch/example.pem\"\nwrite-proxy-v2 = on\n",
        )
        .unwrap();
        assert_eq!(c.frontends.len(), 1);
        assert_eq!(c.frontends[0].host, None);
        assert_eq!(c.frontends[0].port, "443");
        assert_eq!(
            c.global.pem_files[0].cert,
            PathBuf::from("/etc/hitch/example.pem")
        );
        assert_eq!(c.warnings.len(), 3, "{:?}", c.warnings);
        assert!(c.warnings[0].starts_with("hitch.conf:5: backend is not applied"));
        let e = c.effective(&c.frontends[0]);
        assert_eq!(e.pem_files.len(), 1);
        assert_eq!(e.tls_protos, vec![Proto::Tls12, Proto::Tls13]);
    }

    #[test]
    fn frontend_forms_and_scopes() {
        let c = parse(
            "f",
            concat!(
                "frontend = \"[127.0.0.1]:8443+/a.pem\"\n",
                "frontend = { host = \"::1\" port = \"9443\" pem-file = { cert = \"/b.pem\" private-key = \"/b.key\" ocsp-resp-file = \"/b.der\" } tls-protos = TLSv1.3 sni-nomatch-abort = on client-verify = required client-verify-ca = \"/ca.pem\" match-global-certs = on }\n",
                "frontend = \"*:80\"\n",
                "pem-file = \"/g.pem\"  # default\n",
                "ciphers = \"EECDH+AESGCM:EDH+AESGCM\"\n",
                "tls-protos = TLSv1.0 TLSv1.2\n",
                "alpn-protos = \"h2, http/1.1\"\n",
            ),
        )
        .unwrap();
        let f0 = &c.frontends[0];
        assert_eq!(f0.host.as_deref(), Some("127.0.0.1"));
        assert_eq!(f0.port, "8443");
        let e0 = c.effective(f0);
        assert_eq!(e0.pem_files.len(), 1);
        assert_eq!(e0.pem_files[0].cert, PathBuf::from("/a.pem"));
        assert_eq!(e0.tls_protos, vec![Proto::Tls12]);
        assert_eq!(e0.ciphers.as_deref(), Some("EECDH+AESGCM:EDH+AESGCM"));
        let f1 = &c.frontends[1];
        let e1 = c.effective(f1);
        assert_eq!(e1.pem_files.len(), 2, "global and own (match-global-certs)");
        assert_eq!(e1.pem_files[1].private_key, Some(PathBuf::from("/b.key")));
        assert_eq!(
            e1.pem_files[1].ocsp_resp_file,
            Some(PathBuf::from("/b.der"))
        );
        assert_eq!(e1.tls_protos, vec![Proto::Tls13]);
        assert!(e1.sni_nomatch_abort);
        assert_eq!(e1.client_verify, ClientVerify::Required);
        let e2 = c.effective(&c.frontends[2]);
        assert_eq!(c.frontends[2].host, None);
        assert_eq!(e2.pem_files[0].cert, PathBuf::from("/g.pem"));
        assert!(!e2.sni_nomatch_abort);
        assert_eq!(c.alpn_protos, Some(vec!["h2".into(), "http/1.1".into()]));
        assert!(
            c.warnings
                .iter()
                .any(|w| w.contains("TLSv1.0 is not offered"))
        );
    }

    #[test]
    fn errors_name_file_and_line() {
        let cases: &[(&str, &str)] = &[
            (
                "pem-file = \"/a\"\nbogus = 1\n",
                "f:2: unknown option 'bogus'",
            ),
            (
                "\n\nfrontend = {\n port = \"1\"\n",
                "f:4: missing '}' at end of file",
            ),
            ("frontend \"x\"\n", "f:1: expected '=' after 'frontend'"),
            ("ciphers = \"abc\n", "f:1: newline inside a quoted string"),
            (
                "tls-protos = TLSv1.1\n",
                "f:1: tls-protos selects no protocol",
            ),
            (
                "tls-protos = TLSv9\n",
                "f:1: tls-protos: unknown protocol 'TLSv9'",
            ),
            (
                "sni-nomatch-abort = maybe\n",
                "f:1: 'sni-nomatch-abort' takes on or off",
            ),
            (
                "ciphers = \"a\"\nciphers = \"b\"\n",
                "f:2: 'ciphers' is set twice",
            ),
            (
                "frontend = { host = \"*\" }\n",
                "f:1: frontend block without 'port'",
            ),
            (
                "frontend = \"localhost\"\n",
                "f:1: frontend 'localhost' is not [HOST]:PORT",
            ),
            (
                "frontend = { port = \"1\" workers = 2 }\n",
                "f:1: 'workers' cannot be set",
            ),
            (
                "pem-file = { private-key = \"/k\" }\n",
                "f:1: pem-file block without 'cert'",
            ),
            (
                "pem-file = { cert = \"/c\" chain = \"/k\" }\n",
                "f:1: unknown option 'chain' in a pem-file",
            ),
            (
                "client-verify = always\n",
                "f:1: client-verify takes none, optional or required",
            ),
            (
                "port = \"443\"\n",
                "f:1: 'port' belongs in a frontend block",
            ),
            ("= x\n", "f:1: expected an option name"),
            ("ciphers =\n", "f:1: missing value for 'ciphers'"),
        ];
        for (text, want) in cases {
            let e = parse("f", text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: got {e:?}, want {want:?}");
        }
    }

    #[test]
    fn values_and_comments() {
        let c = parse(
            "f",
            "# a comment\npem-file = \"/with \\\"quote\\\".pem\" # trailing\nprefer-server-ciphers = yes\npem-dir = /etc/certs\npem-dir-glob = \"*.pem\"\n",
        )
        .unwrap();
        assert_eq!(
            c.global.pem_files[0].cert,
            PathBuf::from("/with \"quote\".pem")
        );
        assert_eq!(c.global.prefer_server_ciphers, Some(true));
        assert_eq!(c.pem_dir, Some(PathBuf::from("/etc/certs")));
        let t = parse("f", "ticket-key-file = \"/etc/lacquer/tickets\"\n").unwrap();
        assert_eq!(
            t.ticket_key_file,
            Some(PathBuf::from("/etc/lacquer/tickets"))
        );
        assert!(glob_match(c.pem_dir_glob.as_deref().unwrap(), "a.pem"));
        assert!(!glob_match("*.pem", "a.key"));
        assert!(glob_match("s?te*.p*m", "site-one.pem"));
        assert!(glob_match("***", ""));
        // ocsp-dir, before or after the pem-files, applies to all of them.
        let o = parse(
            "f",
            "pem-file = \"/a.pem\"\nfrontend = { host = \"*\" port = \"443\" pem-file = \"/b.pem\" }\nocsp-dir = /var/lib/hitch\n",
        )
        .unwrap();
        let dir = Some(PathBuf::from("/var/lib/hitch"));
        assert_eq!(o.global.pem_files[0].ocsp_dir, dir);
        assert_eq!(o.frontends[0].scope.pem_files[0].ocsp_dir, dir);
        assert!(o.warnings.is_empty(), "{:?}", o.warnings);
    }

    #[test]
    fn tls_on_is_honest_about_old_versions() {
        let c = parse("f", "tls = on\n").unwrap();
        assert_eq!(c.global.tls_protos, Some(vec![Proto::Tls12]));
        assert!(c.warnings[0].contains("TLSv1.1 are not offered"));
        assert!(parse("f", "tls-protos = TLSv1.2\ntls = on\n").is_err());
    }
}
