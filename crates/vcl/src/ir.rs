//! The compiled, resolved and typed form of a VCL program, designed for a
//! fast tree-walking interpreter.
//!
//! Everything a name could mean has been resolved: variables are
//! [`VarId`]s with their header name pre-split and lowercased, subroutine
//! calls are indexes into [`Program::subs`], backends / probes / ACLs /
//! object instances / vmod functions are indexes into the program's tables,
//! constants are converted to their final type, regexes are compiled, and
//! every implicit conversion (to string, to boolean) is an explicit node. The
//! interpreter therefore never looks anything up by name and never has to
//! know VCL's typing rules.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};

use crate::subs::{Action, BuiltinSub, SubMask};
use crate::types::{ArithOp, CmpOp, Type};
use crate::vars::{VarId, VclVersion};
use crate::vmod::VmodDecl;

/// Index into [`Program::subs`].
pub type SubIdx = usize;
/// Index into [`Program::backends`].
pub type BackendIdx = usize;
/// Index into [`Program::probes`].
pub type ProbeIdx = usize;
/// Index into [`Program::acls`].
pub type AclIdx = usize;
/// Index into [`Program::vmods`].
pub type VmodIdx = usize;
/// Index into [`Program::instances`].
pub type InstanceIdx = usize;

/// A compiled VCL program. Immutable, `Send + Sync`; share it as
/// `Arc<Program>`.
#[derive(Debug)]
pub struct Program {
    pub version: VclVersion,
    /// Every subroutine (user and built-in VCL, same-name bodies
    /// concatenated), including unused ones when unused-checks are off.
    pub subs: Vec<SubDef>,
    /// The entry subroutine of each built-in method, indexed by
    /// [`BuiltinSub::index`].
    pub methods: [SubIdx; 14],
    pub backends: Vec<BackendDef>,
    /// The default backend: the one named `default`, else the first
    /// declared. `None` when the VCL declares none (a director set in
    /// `vcl_init` must then be assigned to `req.backend_hint`).
    pub default_backend: Option<BackendIdx>,
    pub probes: Vec<ProbeDef>,
    /// The probe named `default`, used by backends without `.probe`.
    pub default_probe: Option<ProbeIdx>,
    pub acls: Vec<AclDef>,
    /// Imported vmods, in import order.
    pub vmods: Vec<ImportedVmod>,
    /// Object instances created by `new` in `vcl_init`.
    pub instances: Vec<InstanceDef>,
    /// VCL labels referenced by `return (vcl(label))`.
    pub labels: Vec<String>,
    /// Every regex used by the program (also referenced from the
    /// expressions), so they can be built ahead of the first request.
    pub regexes: Vec<Arc<VclRegex>>,
    /// Warnings of the compilation (unused objects when `vcc_err_unref`
    /// is off); render them with the compilation's source map.
    pub warnings: Vec<crate::diag::Diagnostic>,
}

impl Program {
    /// The entry subroutine of a built-in method.
    pub fn method(&self, m: BuiltinSub) -> &SubDef {
        &self.subs[self.methods[m.index()]]
    }

    /// The first argument of every call to the vmod function
    /// `vmod.func` (the vmod's own name, not its alias) in the program:
    /// `Some` with the constant when it is one, `None` when it is computed
    /// at run time. Lets the server plan ahead for calls it cannot
    /// suspend, like `std.cache_req_body()` which must read the body.
    pub fn first_args_of(&self, vmod: &str, func: &str) -> Vec<Option<&Value>> {
        let Some((vi, fi)) = self.vmods.iter().enumerate().find_map(|(i, v)| {
            (v.name == vmod)
                .then(|| v.decl.function(func).map(|(f, _)| (i, f)))
                .flatten()
        }) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for sub in &self.subs {
            walk_stmts(&sub.body, &mut |e| {
                if let ExprKind::VmodCall { vmod, func, args } = &e.kind
                    && (*vmod, *func) == (vi, fi)
                {
                    out.push(match args.first() {
                        Some(CallArg::Value(Expr {
                            kind: ExprKind::Const(v),
                            ..
                        })) => Some(v),
                        _ => None,
                    });
                }
            });
        }
        out
    }

    /// Builds every regex matcher now (they are otherwise built on first
    /// use); call after loading, e.g. from a background thread. Returns the
    /// patterns the engine refused (they never match).
    pub fn prepare_regexes(&self) -> Vec<&str> {
        self.regexes
            .iter()
            .filter(|r| !r.prepare())
            .map(|r| r.as_str())
            .collect()
    }

    /// A subroutine by name.
    pub fn sub_by_name(&self, name: &str) -> Option<SubIdx> {
        self.subs.iter().position(|s| s.name == name)
    }
}

/// One subroutine.
#[derive(Debug)]
pub struct SubDef {
    pub name: String,
    pub body: Vec<Stmt>,
    /// Set for `vcl_recv` and the other built-in method entry points.
    pub method: Option<BuiltinSub>,
    /// The built-in methods this subroutine may be called from at run
    /// time (by a vmod, or `call` of a SUB value): where everything it
    /// uses is available.
    pub callable_from: SubMask,
}

/// A backend declaration.
#[derive(Debug, Clone)]
pub struct BackendDef {
    pub name: String,
    /// `backend x none;`: never healthy, never connected to.
    pub none: bool,
    /// `.host` as written (may be empty with `.path`).
    pub host: String,
    /// `.port` as written, `"80"` when absent.
    pub port: String,
    /// Addresses `.host`/`.port` resolved to at compile time.
    pub addrs: Vec<SocketAddr>,
    /// `.path`: a Unix domain socket.
    pub path: Option<String>,
    pub host_header: Option<String>,
    pub connect_timeout: Option<f64>,
    pub first_byte_timeout: Option<f64>,
    pub between_bytes_timeout: Option<f64>,
    pub max_connections: Option<u64>,
    pub proxy_header: Option<u64>,
    pub probe: Option<ProbeIdx>,
    pub preamble: Option<Arc<[u8]>>,
    /// `.ssl = 1`: TLS to the backend, with these settings.
    pub tls: Option<BackendTlsDef>,
}

/// A backend's TLS attributes (Varnish Enterprise's defaults filled in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendTlsDef {
    /// Send SNI (`.ssl_sni`, default 1; `.ssl_nosni = 1` turns it off).
    pub sni: bool,
    /// Verify the certificate chain (`.ssl_verify_peer`, default 1;
    /// `.ssl_noverify = 1` turns it off).
    pub verify_peer: bool,
    /// Verify the name (`.ssl_verify_host`, default 0).
    pub verify_host: bool,
    /// `.ssl_ca`: a CA file instead of the system's trust store.
    pub ca_file: Option<String>,
    /// `.certificate`: a client certificate (key and chain in one PEM).
    pub certificate: Option<String>,
}

/// A health probe (named, or inline in a backend).
#[derive(Debug, Clone)]
pub struct ProbeDef {
    /// The name; inline probes are named after their backend (`vgc_probe_<backend>`).
    pub name: String,
    pub url: Option<String>,
    /// `.request` lines (without CRLF).
    pub request: Option<Vec<String>>,
    pub timeout: Option<f64>,
    pub interval: Option<f64>,
    pub window: Option<u64>,
    pub threshold: Option<u64>,
    pub initial: Option<u64>,
    pub expected_response: Option<u64>,
}

/// One resolved ACL entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclEntry {
    pub negated: bool,
    pub addr: IpAddr,
    /// Prefix length in bits.
    pub prefix: u8,
    /// How a `+log` ACL names this entry in `VCL_acl`, as vcc does: the
    /// address string as written (an in-string `/mask` left out), `/N` when
    /// the mask was a separate token, and ` fixed: net/N` when host bits
    /// had to be cleared (`"1.2.3.4"/24 fixed: 1.2.3.0/24`).
    pub log_text: Box<str>,
}

impl AclEntry {
    /// Whether `ip` lies inside this entry's network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => prefix_eq(&a.octets(), &b.octets(), self.prefix),
            (IpAddr::V6(a), IpAddr::V6(b)) => prefix_eq(&a.octets(), &b.octets(), self.prefix),
            (IpAddr::V6(a), IpAddr::V4(b)) => {
                // An IPv4 client matched against an IPv4-mapped IPv6 entry.
                prefix_eq(&a.octets(), &b.to_ipv6_mapped().octets(), self.prefix)
            }
            (IpAddr::V4(a), IpAddr::V6(b)) => match b.to_ipv4_mapped() {
                Some(b) => prefix_eq(&a.octets(), &b.octets(), self.prefix),
                None => false,
            },
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let bits = bits as usize;
    let full = bits / 8;
    if a[..full] != b[..full] {
        return false;
    }
    let rem = bits % 8;
    if rem == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rem);
    a[full] & mask == b[full] & mask
}

/// An ACL.
#[derive(Debug, Clone)]
pub struct AclDef {
    pub name: String,
    /// Entries, most specific (longest prefix) first.
    pub entries: Vec<AclEntry>,
    /// `+log`: log which entry matched.
    pub log: bool,
}

impl AclDef {
    /// Varnish semantics: the most specific entry containing `ip` decides;
    /// a negated entry means "no match"; no entry means no match.
    pub fn matches(&self, ip: IpAddr) -> bool {
        self.entries
            .iter()
            .find(|e| e.contains(ip))
            .is_some_and(|e| !e.negated)
    }
}

/// An imported vmod.
#[derive(Debug, Clone)]
pub struct ImportedVmod {
    /// The vmod's own name.
    pub name: String,
    /// The name VCL refers to it by (`import x as alias`), else `name`.
    pub alias: String,
    pub decl: Arc<VmodDecl>,
}

/// An object created with `new`.
#[derive(Debug, Clone)]
pub struct InstanceDef {
    pub name: String,
    pub vmod: VmodIdx,
    /// Index into the vmod's `objects`.
    pub class: usize,
}

/// A header name referenced by a variable like `req.http.X-Foo`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HeaderName {
    /// As written in the VCL (used when creating the header).
    pub name: Arc<str>,
    /// ASCII-lowercased, for case-insensitive lookup.
    pub lower: Arc<str>,
}

/// The extra part of a variable reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VarArg {
    None,
    Header(HeaderName),
    /// `storage.<name>.*`.
    Storage(Arc<str>),
}

/// A resolved variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VarRef {
    pub id: VarId,
    pub arg: VarArg,
}

/// A constant value, already in its final type.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(Arc<str>),
    Bool(bool),
    Int(i64),
    Real(f64),
    /// Seconds.
    Duration(f64),
    /// Bytes.
    Bytes(f64),
    Ip(SocketAddr),
    Blob(Arc<[u8]>),
}

/// A VCL regex. The pattern is validated when the VCL is compiled; the
/// matching engine (`regex` crate) is built on first use, so loading a VCL
/// with hundreds of regexes stays fast. Patterns that need backreferences
/// or lookaround use `fancy-regex`, compiled eagerly.
#[derive(Debug, Clone)]
pub struct VclRegex {
    pattern: Box<str>,
    engine: Engine,
}

#[derive(Debug, Clone)]
enum Engine {
    /// Translated pattern and the lazily built matcher (`None` if the
    /// engine refused a pattern its parser accepted, e.g. size limits).
    Std(Box<str>, OnceLock<Option<regex::Regex>>),
    Fancy(fancy_regex::Regex),
}

impl VclRegex {
    /// Validates a pattern (PCRE-like syntax as far as the engines allow).
    pub fn new(pattern: &str) -> Result<VclRegex, String> {
        let translated = translate_pcre(pattern);
        let engine = match regex_syntax::Parser::new().parse(&translated) {
            Ok(_) => Engine::Std(translated.into_boxed_str(), OnceLock::new()),
            Err(std_err) => match fancy_regex::Regex::new(&translated) {
                Ok(r) => Engine::Fancy(r),
                Err(_) => return Err(std_err.to_string()),
            },
        };
        Ok(VclRegex {
            pattern: pattern.into(),
            engine,
        })
    }

    /// The source pattern as written in the VCL.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// The pattern in `regex`-crate syntax (PCRE-only escapes such as `\R`,
    /// `\h` and `\Q..\E` rewritten); what an executor using its own
    /// `regex`-based engine should compile.
    pub fn translated_pattern(&self) -> &str {
        match &self.engine {
            Engine::Std(p, _) => p,
            Engine::Fancy(r) => r.as_str(),
        }
    }

    /// Builds the matcher now (instead of on first use); returns false if
    /// the engine cannot handle the pattern.
    pub fn prepare(&self) -> bool {
        match &self.engine {
            Engine::Std(..) => self.std().is_some(),
            Engine::Fancy(_) => true,
        }
    }

    fn std(&self) -> Option<&regex::Regex> {
        match &self.engine {
            Engine::Std(p, cell) => cell.get_or_init(|| regex::Regex::new(p).ok()).as_ref(),
            Engine::Fancy(_) => None,
        }
    }

    /// True if the pattern matches anywhere in `s`. A failure of the
    /// engine (backtracking limits, or a pattern the engine refused)
    /// counts as no match.
    pub fn is_match(&self, s: &str) -> bool {
        match &self.engine {
            Engine::Std(..) => self.std().is_some_and(|r| r.is_match(s)),
            Engine::Fancy(r) => r.is_match(s).unwrap_or(false),
        }
    }

    /// `regsub` / `regsuball`: replaces the first (or every) match of the
    /// pattern in `s` by `tmpl`, with `\0`..`\9` expanded to the capture
    /// groups.
    pub fn regsub(&self, s: &str, tmpl: &SubstTemplate, all: bool) -> String {
        let mut out = String::with_capacity(s.len());
        let mut last = 0;
        let mut groups: Vec<Option<(usize, usize)>> = Vec::new();
        let mut pos = 0;
        while pos <= s.len() {
            groups.clear();
            let found = match &self.engine {
                Engine::Std(..) => self.std().and_then(|r| r.captures_at(s, pos)).map(|c| {
                    groups.extend(c.iter().map(|m| m.map(|m| (m.start(), m.end()))));
                }),
                Engine::Fancy(r) => match r.captures_from_pos(s, pos) {
                    Ok(Some(c)) => {
                        groups.extend(c.iter().map(|m| m.map(|m| (m.start(), m.end()))));
                        Some(())
                    }
                    _ => None,
                },
            };
            if found.is_none() {
                break;
            }
            let Some((ms, me)) = groups[0] else { break };
            out.push_str(&s[last..ms]);
            for part in &tmpl.parts {
                match part {
                    SubstPart::Lit(l) => out.push_str(l),
                    SubstPart::Group(g) => {
                        if let Some(Some((a, b))) = groups.get(*g as usize) {
                            out.push_str(&s[*a..*b]);
                        }
                    }
                }
            }
            last = me;
            if !all {
                break;
            }
            pos = if me == ms {
                // Empty match: step over one character to make progress.
                match s[me..].chars().next() {
                    Some(c) => {
                        let next = me + c.len_utf8();
                        out.push_str(&s[me..next]);
                        last = next;
                        next
                    }
                    None => break,
                }
            } else {
                me
            };
        }
        out.push_str(&s[last..]);
        out
    }
}

/// Rewrites the PCRE escapes the `regex` crate lacks: `\R` (any newline
/// sequence), `\h` / `\H` (horizontal space), outside character classes.
fn translate_pcre(p: &str) -> String {
    if !p.contains('\\') {
        return p.to_string();
    }
    let mut out = String::with_capacity(p.len() + 16);
    let mut in_class = false;
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(n) = chars.next() else {
                    out.push(c);
                    break;
                };
                match (n, in_class) {
                    ('Q', _) => {
                        // \Q...\E: everything in between is literal.
                        let rest = chars.as_str();
                        let (lit, after) = match rest.find("\\E") {
                            Some(i) => (&rest[..i], &rest[i + 2..]),
                            None => (rest, ""),
                        };
                        if in_class {
                            for ch in lit.chars() {
                                out.push_str(&regex_syntax::escape(ch.encode_utf8(&mut [0; 4])));
                            }
                        } else {
                            out.push_str(&regex_syntax::escape(lit));
                        }
                        chars = after.chars();
                    }
                    ('R', false) => out.push_str(r"(?:\r\n|[\n\x0b\x0c\r\x{85}\x{2028}\x{2029}])"),
                    ('h', false) => out.push_str(r"[\t \x{a0}]"),
                    ('H', false) => out.push_str(r"[^\t \x{a0}]"),
                    ('h', true) => out.push_str(r"\t \x{a0}"),
                    _ => {
                        out.push(c);
                        out.push(n);
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push(c);
                // A leading ']' (or '^]') is literal.
                let rest = chars.as_str();
                if let Some(r) = rest.strip_prefix("^]") {
                    out.push_str("^]");
                    chars = r.chars();
                } else if let Some(r) = rest.strip_prefix(']') {
                    out.push(']');
                    chars = r.chars();
                }
            }
            '[' if in_class && chars.as_str().starts_with(':') => {
                // POSIX class like [:upper:] inside a bracket expression.
                out.push(c);
                let rest = chars.as_str();
                if let Some(end) = rest.find(":]") {
                    out.push_str(&rest[..end + 2]);
                    chars = rest[end + 2..].chars();
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// One piece of a substitution template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubstPart {
    Lit(String),
    Group(u8),
}

/// A parsed `regsub` substitution: `\N` is capture group N, `\\` a literal
/// backslash; any other backslash is kept as is (like Varnish).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubstTemplate {
    pub parts: Vec<SubstPart>,
}

impl SubstTemplate {
    /// Parses a substitution string.
    pub fn parse(s: &str) -> SubstTemplate {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut chars = s.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.peek().copied() {
                    Some(d @ '0'..='9') => {
                        chars.next();
                        if !lit.is_empty() {
                            parts.push(SubstPart::Lit(std::mem::take(&mut lit)));
                        }
                        parts.push(SubstPart::Group(d as u8 - b'0'));
                        continue;
                    }
                    Some('\\') => {
                        chars.next();
                        lit.push('\\');
                        continue;
                    }
                    _ => {}
                }
            }
            lit.push(c);
        }
        if !lit.is_empty() {
            parts.push(SubstPart::Lit(lit));
        }
        SubstTemplate { parts }
    }
}

/// A statement.
#[derive(Debug)]
pub enum Stmt {
    /// `set var = value;` (`op` is `None` for `=`, or the arithmetic
    /// operator of `+=`, `-=`, `*=`, `/=`; for strings `+=` appends).
    Set {
        var: VarRef,
        op: Option<ArithOp>,
        value: Expr,
    },
    Unset(VarRef),
    Call(SubIdx),
    /// `call` of a SUB value computed at run time (e.g. returned by a vmod).
    CallDynamic(Expr),
    If {
        /// Condition / body pairs, tried in order.
        arms: Vec<(Expr, Vec<Stmt>)>,
        otherwise: Vec<Stmt>,
    },
    Return(Return),
    /// `synthetic(...)` (VCL 4.0 style body in vcl_synth / backend_error).
    Synthetic(Expr),
    Ban(Expr),
    HashData(Expr),
    /// `new x = vmod.obj(args)`.
    New {
        instance: InstanceIdx,
        args: Vec<CallArg>,
    },
    /// A function or method call whose result (if any) is discarded.
    Eval(Expr),
}

/// How a subroutine returns. An action returned from a custom subroutine
/// ends the whole method with that action, not just the custom subroutine.
#[derive(Debug)]
pub enum Return {
    /// Bare `return;` from a custom subroutine: back to the caller.
    FromSub,
    /// `return (action[(args)])`. Arguments by action: `synth` / `error`:
    /// INT status and optional STRING reason; `pass`: optional DURATION
    /// (hit-for-pass TTL); `fail`: optional STRING reason; others: none.
    Action { action: Action, args: Vec<Expr> },
    /// `vcl(label)`: index into [`Program::labels`].
    Vcl(usize),
}

/// A call argument after matching named/positional arguments to the
/// declaration: one per declared argument, in declaration order.
#[derive(Debug)]
pub enum CallArg {
    /// A value (given, or the declared default).
    Value(Expr),
    /// An optional (`[...]`) argument that was not given.
    Absent,
    /// An ENUM value.
    Enum(Arc<str>),
    /// A hidden PRIV_* argument; the runtime supplies the state.
    Priv(crate::vmod::PrivKind),
}

/// Built-in methods on typed values (`req.http.x.lower()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeMethod {
    Upper,
    Lower,
    /// `BACKEND.resolve()`: the backend a director picks now.
    Resolve,
}

/// An expression with its result type.
#[derive(Debug)]
pub struct Expr {
    pub ty: Type,
    pub kind: ExprKind,
}

/// Expression forms.
#[derive(Debug)]
pub enum ExprKind {
    Const(Value),
    Var(VarRef),
    Backend(BackendIdx),
    /// The default backend (`default` in a BACKEND context).
    DefaultBackend,
    Probe(ProbeIdx),
    Acl(AclIdx),
    /// A regex given where a vmod takes a REGEX (compiled with the VCL).
    Regex(Arc<VclRegex>),
    Sub(SubIdx),
    /// `storage.<name>`.
    Stevedore(Arc<str>),
    Instance(InstanceIdx),
    /// Converts the operand (of type `operand.ty`) to a string as Varnish
    /// does: INT and BYTES as integers; REAL and DURATION with three
    /// decimals (`%.3f`); TIME as an HTTP date; BOOL as `true`/`false`; IP
    /// as the address without port; BACKEND and STEVEDORE as their name
    /// (unset when there is none); BLOB as `:base64:`; ENUM as its value.
    ToString(Box<Expr>),
    /// Truth value: INT and BACKEND are true when non-zero / set, DURATION
    /// when > 0, strings when set at all (an empty header is true, a
    /// missing one false).
    ToBool(Box<Expr>),
    /// Concatenation of string-typed parts; unset parts count as empty.
    Concat(Vec<Expr>),
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Neg(Box<Expr>),
    /// Arithmetic; operand types follow Varnish's table (`TIME - TIME` is a
    /// DURATION, `INT + REAL` a REAL, ...). `%` only on INT.
    Arith {
        op: ArithOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// Comparison of two values of the same type (`lhs.ty`); strings
    /// compare bytewise.
    Cmp {
        op: CmpOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    RegexMatch {
        subject: Box<Expr>,
        regex: Arc<VclRegex>,
        negate: bool,
    },
    AclMatch {
        ip: Box<Expr>,
        acl: AclIdx,
        negate: bool,
    },
    /// `ip ~ <ACL expression>`: the ACL is a value computed at run time
    /// (a vmod function or method returning ACL).
    AclMatchDyn {
        ip: Box<Expr>,
        acl: Box<Expr>,
        negate: bool,
    },
    /// `subject ~ <REGEX expression>`: the regex is a value computed at
    /// run time (a vmod function returning REGEX).
    RegexMatchDyn {
        subject: Box<Expr>,
        regex: Box<Expr>,
        negate: bool,
    },
    /// `regsub()`/`regsuball()` whose regex is a REGEX expression.
    RegsubDyn {
        all: bool,
        subject: Box<Expr>,
        regex: Box<Expr>,
        replacement: Box<Expr>,
    },
    Regsub {
        all: bool,
        subject: Box<Expr>,
        regex: Arc<VclRegex>,
        /// Pre-parsed when the substitution is a constant.
        template: Option<SubstTemplate>,
        /// The substitution expression (always present).
        replacement: Box<Expr>,
    },
    VmodCall {
        vmod: VmodIdx,
        /// Index into the vmod's `functions`.
        func: usize,
        args: Vec<CallArg>,
    },
    MethodCall {
        instance: InstanceIdx,
        /// Index into the class's `methods`.
        method: usize,
        args: Vec<CallArg>,
    },
    TypeMethod {
        method: TypeMethod,
        operand: Box<Expr>,
    },
}

/// Calls `f` on every expression in `stmts`, outer expressions first.
fn walk_stmts<'a>(stmts: &'a [Stmt], f: &mut impl FnMut(&'a Expr)) {
    for s in stmts {
        match s {
            Stmt::Set { value: e, .. }
            | Stmt::CallDynamic(e)
            | Stmt::Synthetic(e)
            | Stmt::Ban(e)
            | Stmt::HashData(e)
            | Stmt::Eval(e) => walk_expr(e, f),
            Stmt::If { arms, otherwise } => {
                for (cond, body) in arms {
                    walk_expr(cond, f);
                    walk_stmts(body, f);
                }
                walk_stmts(otherwise, f);
            }
            Stmt::Return(Return::Action { args, .. }) => {
                for a in args {
                    walk_expr(a, f);
                }
            }
            Stmt::New { args, .. } => walk_args(args, f),
            Stmt::Unset(_) | Stmt::Call(_) | Stmt::Return(_) => {}
        }
    }
}

fn walk_args<'a>(args: &'a [CallArg], f: &mut impl FnMut(&'a Expr)) {
    for a in args {
        if let CallArg::Value(e) = a {
            walk_expr(e, f);
        }
    }
}

fn walk_expr<'a>(e: &'a Expr, f: &mut impl FnMut(&'a Expr)) {
    f(e);
    match &e.kind {
        ExprKind::ToString(x)
        | ExprKind::ToBool(x)
        | ExprKind::Not(x)
        | ExprKind::Neg(x)
        | ExprKind::TypeMethod { operand: x, .. }
        | ExprKind::RegexMatch { subject: x, .. }
        | ExprKind::AclMatch { ip: x, .. } => walk_expr(x, f),
        ExprKind::Concat(xs) | ExprKind::And(xs) | ExprKind::Or(xs) => {
            for x in xs {
                walk_expr(x, f);
            }
        }
        ExprKind::Arith { lhs, rhs, .. }
        | ExprKind::Cmp { lhs, rhs, .. }
        | ExprKind::RegexMatchDyn {
            subject: lhs,
            regex: rhs,
            ..
        }
        | ExprKind::AclMatchDyn {
            ip: lhs, acl: rhs, ..
        } => {
            walk_expr(lhs, f);
            walk_expr(rhs, f);
        }
        ExprKind::RegsubDyn {
            subject,
            regex,
            replacement,
            ..
        } => {
            walk_expr(subject, f);
            walk_expr(regex, f);
            walk_expr(replacement, f);
        }
        ExprKind::Regsub {
            subject,
            replacement,
            ..
        } => {
            walk_expr(subject, f);
            walk_expr(replacement, f);
        }
        ExprKind::VmodCall { args, .. } | ExprKind::MethodCall { args, .. } => walk_args(args, f),
        ExprKind::Const(_)
        | ExprKind::Var(_)
        | ExprKind::Backend(_)
        | ExprKind::DefaultBackend
        | ExprKind::Probe(_)
        | ExprKind::Acl(_)
        | ExprKind::Regex(_)
        | ExprKind::Sub(_)
        | ExprKind::Stevedore(_)
        | ExprKind::Instance(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subst_template() {
        let t = SubstTemplate::parse(r"a\1b\\c\x");
        assert_eq!(
            t.parts,
            vec![
                SubstPart::Lit("a".into()),
                SubstPart::Group(1),
                SubstPart::Lit(r"b\c\x".into())
            ]
        );
    }

    #[test]
    fn regsub_first_and_all() {
        let r = VclRegex::new("(o)").unwrap();
        let t = SubstTemplate::parse(r"[\1]");
        assert_eq!(r.regsub("foo", &t, false), "f[o]o");
        assert_eq!(r.regsub("foo", &t, true), "f[o][o]");
        let e = VclRegex::new("x*").unwrap();
        assert_eq!(e.regsub("ab", &SubstTemplate::parse("-"), true), "-a-b-");
        let back = VclRegex::new(r"(a)\1").unwrap();
        assert!(matches!(back.engine, Engine::Fancy(_)));
        assert!(back.prepare());
        assert!(back.is_match("xaay"));
        assert_eq!(
            back.regsub("aab", &SubstTemplate::parse("<\\0>"), false),
            "<aa>b"
        );
        assert!(VclRegex::new("(").is_err());
    }

    #[test]
    fn pcre_escapes_translated() {
        let r = VclRegex::new(r"a\R$").unwrap();
        assert_eq!(r.as_str(), r"a\R$");
        assert!(r.translated_pattern().starts_with("a(?:"));
        assert!(r.is_match("a\r\n"));
        assert!(!r.is_match("ab"));
        let h = VclRegex::new(r"x\hy[\h]z").unwrap();
        assert!(h.is_match("x\ty z"));
        // Inside a class with a POSIX name and a literal bracket.
        let c = VclRegex::new(r"[]a[:upper:]]+").unwrap();
        assert!(c.is_match("]A"));
        let q = VclRegex::new(r"^/\Qa.b\E$").unwrap();
        assert!(q.is_match("/a.b"));
        assert!(!q.is_match("/axb"));
    }

    #[test]
    fn acl_most_specific_wins() {
        let acl = AclDef {
            name: "a".into(),
            log: false,
            entries: vec![
                AclEntry {
                    negated: true,
                    addr: "10.1.0.0".parse().unwrap(),
                    prefix: 16,
                    log_text: "\"10.1.0.0\"/16".into(),
                },
                AclEntry {
                    negated: false,
                    addr: "10.0.0.0".parse().unwrap(),
                    prefix: 8,
                    log_text: "\"10.0.0.0\"/8".into(),
                },
            ],
        };
        assert!(acl.matches("10.2.3.4".parse().unwrap()));
        assert!(!acl.matches("10.1.3.4".parse().unwrap()));
        assert!(!acl.matches("11.1.3.4".parse().unwrap()));
        assert!(!acl.matches("::1".parse().unwrap()));
    }
}
