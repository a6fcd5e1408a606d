//! Abstract syntax tree of a VCL program (VCL 4.0 / 4.1 as Varnish 7.1 parses it).
//!
//! The parser produces this tree after include expansion; every node carries a
//! [`Span`] into the file it came from, so later passes (symbol resolution, type
//! checking, IR lowering) can report errors at the right place. The tree keeps
//! what was written: names are not resolved, dotted names stay a list of
//! segments (`req.http.Foo` is one [`Path`] with three segments), number units
//! are kept as written, string literals are stored decoded (VCL has no escapes,
//! so decoding only strips the delimiters).
//!
//! Structural checks that Varnish performs while parsing (backend fields and
//! their duplicates, probe window/threshold limits, ACL masks, return action
//! names and argument counts) are done by the parser, so a tree free of errors
//! satisfies them.
//!
//! Left to semantic analysis, because vcc needs the symbol table or types
//! for them (the parser accepts these shapes silently):
//! - an identifier statement that is not a call ([`StmtKind::Expr`] holding
//!   a [`ExprKind::Path`]): "Symbol not found: 'x'" / "Symbol cannot be used
//!   here.";
//! - a [`ExprKind::Call`] whose callee is not a function or method: vcc
//!   stops at the `(` (e.g. "Expected ')' got '('" inside a condition);
//! - the right side of `~`/`!~` on strings must be a string literal
//!   ("Expected CSTR got 'x'"); on IPs it names an ACL;
//! - `set` operators other than `=` per variable type ("Expected '=' got
//!   '+='"); number units (duration or bytes, "Unknown duration unit 'k'");
//! - `new x = obj;` without parentheses; redefinitions of names; host names
//!   in ACLs ([`AclEntry::net`] is `None`);
//! - `vcl_*` subroutines of the built-in VCL (e.g. `vcl_req_cookie`) may be
//!   defined by the user and are concatenated like methods.

use crate::source::Span;

/// A single identifier token (`vcl_recv`, `std`, `default`).
#[derive(Debug, Clone, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// One segment of a dotted [`Path`].
#[derive(Debug, Clone, PartialEq)]
pub struct PathSegment {
    /// Segment text; for a quoted segment the decoded string contents.
    pub name: String,
    /// True for a quoted segment, as in `req.http."X-Foo"` (VCL >= 4.1).
    pub quoted: bool,
    pub span: Span,
}

/// A possibly dotted name: `req.http.X-Forwarded-For`, `std.log`,
/// `obj.method`, `vcl_recv`. Which prefix is a symbol and what follows (a
/// header name, an object method, a type method such as `.upper`) is decided
/// during semantic analysis against the symbol table, as vcc does.
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    pub segments: Vec<PathSegment>,
    pub span: Span,
}

impl Path {
    /// The segments joined with `.` (quoted segments without quotes).
    pub fn dotted(&self) -> String {
        let mut s = String::new();
        for (i, seg) in self.segments.iter().enumerate() {
            if i > 0 {
                s.push('.');
            }
            s.push_str(&seg.name);
        }
        s
    }

    /// True if this is a single unquoted identifier.
    pub fn is_simple(&self) -> bool {
        self.segments.len() == 1 && !self.segments[0].quoted
    }
}

/// How a string literal was delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrDelim {
    /// `"..."` (single line).
    Quote,
    /// `{"..."}` long string.
    Brace,
    /// `"""..."""` long string.
    TripleQuote,
}

/// A string literal, already decoded (delimiters stripped).
#[derive(Debug, Clone, PartialEq)]
pub struct StrLit {
    pub value: String,
    pub delim: StrDelim,
    pub span: Span,
}

/// A numeric literal. Integers (`CNUM`) have no `.`; reals (`FNUM`) have one.
#[derive(Debug, Clone, PartialEq)]
pub struct NumLit {
    /// Source text, e.g. `10`, `1.5`, `4.`.
    pub text: String,
    /// Value as a float (exact for integers up to 2^53).
    pub value: f64,
    /// True when written without a decimal point.
    pub is_int: bool,
    pub span: Span,
}

/// A BLOB literal `:base64:` (decoded bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct BlobLit {
    pub bytes: Vec<u8>,
    pub span: Span,
}

/// A duration constant where vcc requires one (backend and probe fields):
/// a number followed by a time unit `ms s m h d w y`.
#[derive(Debug, Clone, PartialEq)]
pub struct DurationLit {
    /// The number as written (a leading `-` is folded into `seconds`).
    pub number: NumLit,
    pub unit: Ident,
    /// Value in seconds.
    pub seconds: f64,
    pub span: Span,
}

/// A non-negative integer constant (backend/probe fields).
#[derive(Debug, Clone, PartialEq)]
pub struct UintLit {
    pub value: u64,
    pub span: Span,
}

/// A whole program: the main file with all includes expanded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Vcl {
    /// The leading `vcl X.Y;` declaration; `None` only when it was missing
    /// (which is an error).
    pub version: Option<VersionDecl>,
    /// Top-level declarations in source order (after include expansion).
    pub items: Vec<Item>,
    /// How each header variable is spelled where the program first names
    /// it, keyed by object (`req`, `beresp`, ...) and header name, both
    /// lowercased: vcc finds symbols whatever their case, so every
    /// `set` of that header writes this spelling (see
    /// [`crate::parser::header_spellings`]).
    pub header_spellings: std::collections::HashMap<(String, String), String>,
}

/// VCL syntax version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum VclVersion {
    V40,
    V41,
}

impl VclVersion {
    /// Version as vcc numbers it (40, 41).
    pub fn number(self) -> u32 {
        match self {
            VclVersion::V40 => 40,
            VclVersion::V41 => 41,
        }
    }
}

/// `vcl 4.1;`
#[derive(Debug, Clone, PartialEq)]
pub struct VersionDecl {
    pub version: VclVersion,
    pub span: Span,
}

/// A top-level declaration.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A further `vcl X.Y;` (e.g. at the top of an included file). It may not
    /// be higher than the main file's version (checked by the parser).
    Version(VersionDecl),
    Import(Import),
    Backend(Backend),
    Probe(Probe),
    Acl(Acl),
    Sub(Sub),
}

impl Item {
    /// Span of the whole declaration.
    pub fn span(&self) -> Span {
        match self {
            Item::Version(v) => v.span,
            Item::Import(i) => i.span,
            Item::Backend(b) => b.span,
            Item::Probe(p) => p.span,
            Item::Acl(a) => a.span,
            Item::Sub(s) => s.span,
        }
    }
}

/// `import name [as alias] [from "path"];`
#[derive(Debug, Clone, PartialEq)]
pub struct Import {
    pub name: Ident,
    pub alias: Option<Ident>,
    pub from: Option<StrLit>,
    pub span: Span,
}

/// `backend name { ... }` or `backend name none;`
#[derive(Debug, Clone, PartialEq)]
pub struct Backend {
    /// The name; `default` makes it the default backend.
    pub name: Ident,
    pub body: BackendBody,
    pub span: Span,
}

/// Body of a backend declaration.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendBody {
    /// `none` / `None`: a backend that is never healthy.
    None(Span),
    /// `{ .field = value; ... }`
    Def(FieldList),
}

/// `probe name { ... }`; the name `default` sets the default probe.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub name: Ident,
    pub spec: FieldList,
    pub span: Span,
}

/// A braced list of `.field = value;` settings (backend or probe body).
/// Field names are unique and valid for their context (checked by the
/// parser).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldList {
    pub fields: Vec<Field>,
    pub span: Span,
}

impl FieldList {
    /// The field named `name` (without the leading dot), if set.
    pub fn get(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name.name == name)
    }

    /// The string value of field `name`, if set to a string.
    pub fn string(&self, name: &str) -> Option<&StrLit> {
        match self.get(name).map(|f| &f.value) {
            Some(FieldValue::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// The duration value of field `name` in seconds.
    pub fn duration(&self, name: &str) -> Option<f64> {
        match self.get(name).map(|f| &f.value) {
            Some(FieldValue::Duration(d)) => Some(d.seconds),
            _ => None,
        }
    }

    /// The integer value of field `name`.
    pub fn uint(&self, name: &str) -> Option<u64> {
        match self.get(name).map(|f| &f.value) {
            Some(FieldValue::Uint(u)) => Some(u.value),
            _ => None,
        }
    }
}

/// One `.name = value;` setting.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// Field name without the dot (`host`, `first_byte_timeout`).
    pub name: Ident,
    pub value: FieldValue,
    /// From the dot to the `;` (or closing brace of an inline probe).
    pub span: Span,
}

/// Value of a backend or probe field. Which variant a field takes:
/// backend `host port path host_header` → `Str`; `connect_timeout
/// first_byte_timeout between_bytes_timeout` → `Duration`; `max_connections
/// proxy_header` → `Uint`; `probe` → `ProbeRef` or `ProbeInline`; `preamble`
/// → `Blob`. Probe `url` → `Str`; `request` → `Strings`; `timeout interval`
/// → `Duration`; `window threshold initial expected_response` → `Uint`.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Str(StrLit),
    Strings(Vec<StrLit>),
    Duration(DurationLit),
    Uint(UintLit),
    /// `.probe = name;` (`default` refers to the default probe).
    ProbeRef(Ident),
    ProbeInline(FieldList),
    Blob(BlobLit),
}

/// `acl name [+log] [-pedantic] [+table] { entries }`
#[derive(Debug, Clone, PartialEq)]
pub struct Acl {
    pub name: Ident,
    pub flags: Vec<AclFlag>,
    pub entries: Vec<AclEntry>,
    pub span: Span,
}

impl Acl {
    /// Value of flag `name` if given (`+x` → true, `-x` → false).
    pub fn flag(&self, name: &str) -> Option<bool> {
        self.flags
            .iter()
            .rev()
            .find(|f| f.name.name == name)
            .map(|f| f.enabled)
    }
}

/// `+log` / `-pedantic` after an ACL name.
#[derive(Debug, Clone, PartialEq)]
pub struct AclFlag {
    pub enabled: bool,
    pub name: Ident,
    pub span: Span,
}

/// One ACL line: `[!] ["("] "addr" [")"] [/ mask];`
#[derive(Debug, Clone, PartialEq)]
pub struct AclEntry {
    /// `!` given: a match excludes.
    pub negated: bool,
    /// Parenthesised: a host name that does not resolve is ignored instead
    /// of being an error.
    pub optional: bool,
    /// Address or host name as written (decoded string, a `/mask` suffix
    /// included).
    pub addr: StrLit,
    /// Mask as written, either `"addr/N"` inside the string or `/ N`
    /// after it.
    pub mask: Option<UintLit>,
    /// The network when `addr` is an IP address literal (after vcc's
    /// clearing of host bits); `None` for host names, which are resolved
    /// later.
    pub net: Option<AclNet>,
    pub span: Span,
}

/// An IP network of an ACL entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclNet {
    pub addr: std::net::IpAddr,
    /// Prefix length (32 / 128 when no mask was given; for IPv4
    /// net-notation like `"10.1"` it is 8 per given component).
    pub mask: u8,
    /// Host bits were set and had to be cleared (only allowed under
    /// `-pedantic`); the match log then says ` fixed: addr/mask`.
    pub fixed: bool,
}

/// `sub name { ... }`
#[derive(Debug, Clone, PartialEq)]
pub struct Sub {
    pub name: Ident,
    pub body: Block,
    pub span: Span,
}

/// `{ stmt* }`
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub span: Span,
}

/// A statement with its span (first token to the terminating `;` or `}`).
#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

/// Assignment operator of `set`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignOp {
    /// `=`
    Assign,
    /// `+=`
    Add,
    /// `-=`
    Sub,
    /// `*=`
    Mul,
    /// `/=`
    Div,
}

impl AssignOp {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            AssignOp::Assign => "=",
            AssignOp::Add => "+=",
            AssignOp::Sub => "-=",
            AssignOp::Mul => "*=",
            AssignOp::Div => "/=",
        }
    }
}

/// One `if`/`elseif` arm.
#[derive(Debug, Clone, PartialEq)]
pub struct IfArm {
    pub cond: Expr,
    pub body: Block,
    /// From the `if`/`elseif`/`else` keyword to the end of the block.
    pub span: Span,
}

/// `return (name [ (args) ]);`
#[derive(Debug, Clone, PartialEq)]
pub struct ReturnAction {
    /// One of Varnish's return actions (`deliver`, `synth`, ...; the name is
    /// validated by the parser, its legality in a given sub is not).
    pub name: Ident,
    /// Arguments: `synth(status [, reason])`, `error(status [, reason])`,
    /// `pass(duration)`, `fail(reason)`, `vcl(label)` (the label is a
    /// [`ExprKind::Path`]). Empty for all other actions.
    pub args: Vec<Expr>,
    pub span: Span,
}

/// The statements of a subroutine body.
#[derive(Debug, Clone, PartialEq)]
pub enum StmtKind {
    /// A nested `{ ... }` block.
    Block(Block),
    /// `if (c) {..} [elseif|elsif|elif|else if (c) {..}]* [else {..}]`
    If {
        /// The `if` arm followed by every `else if` arm, in order.
        arms: Vec<IfArm>,
        otherwise: Option<Block>,
    },
    /// `set target op value;`
    Set {
        target: Path,
        op: AssignOp,
        op_span: Span,
        value: Expr,
    },
    /// `unset target;`
    Unset { target: Path },
    /// `call name;` or, with a SUB-valued expression, `call obj.method();`
    /// (VCL 4.1 / Varnish 7.1 accepts any expression of type SUB). Usually
    /// an [`ExprKind::Path`].
    Call { target: Expr },
    /// `return (action);` or, in a custom sub, bare `return;` (`None`).
    Return(Option<ReturnAction>),
    /// `synthetic(expr);`
    Synthetic(Expr),
    /// `ban(expr);`
    Ban(Expr),
    /// `hash_data(expr);`
    HashData(Expr),
    /// `new name = constructor(args);`. The constructor is an
    /// [`ExprKind::Call`], or an [`ExprKind::Path`] when written without
    /// parentheses (vcc then reports the symbol first: "Symbol not found: 'x'"
    /// or, for a real constructor, "Expected '(' got ';'").
    New { name: Ident, constructor: Expr },
    /// A bare function or method call used as a statement:
    /// `std.log("x");`, `obj.method(a, b);` (an [`ExprKind::Call`] or
    /// [`ExprKind::Method`]). It is an [`ExprKind::Path`] when an identifier
    /// statement is not followed by `(`: the parser then skips to the `;`
    /// without a message, and semantic analysis must reject it as vcc does
    /// ("Symbol not found: 'x'" or "Symbol cannot be used here.").
    Expr(Expr),
}

/// An expression with its span.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

/// Unary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    /// `!`
    Not,
    /// `-` (vcc applies it to a number, or to the whole following
    /// expression when no number follows)
    Neg,
}

/// Binary operators, lowest precedence first: `||`; `&&`; comparisons
/// (at most one per operand, as in vcc); `+ -`; `* / %`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// `~` (regex match or ACL membership)
    Match,
    /// `!~`
    NotMatch,
    Add,
    Sub,
    Mul,
    Div,
    /// `%` (INT only: "Operator % only possible on INT")
    Rem,
}

impl BinaryOp {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            BinaryOp::Or => "||",
            BinaryOp::And => "&&",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::Match => "~",
            BinaryOp::NotMatch => "!~",
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
        }
    }
}

/// A call argument: positional `expr` or named `name = expr`.
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    pub name: Option<Ident>,
    pub value: Expr,
    pub span: Span,
}

/// Expression forms.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// A string literal.
    Str(StrLit),
    /// A number, optionally followed by a unit identifier (`10s`, `1.5m`,
    /// `100KB`). The unit's meaning (duration or bytes) depends on the
    /// expected type and is decided in semantic analysis, as in vcc.
    Num {
        lit: NumLit,
        unit: Option<Ident>,
    },
    /// A BLOB literal `:base64:`.
    Blob(BlobLit),
    /// A name: variable, header, backend, ACL, probe, sub, `true`/`false`,
    /// enum value, object, function used without arguments.
    Path(Path),
    /// `callee(args)`: functions (`regsub`, `std.log`), object methods
    /// (`obj.backend`), type methods (`req.http.x.upper`) and constructors.
    Call {
        callee: Path,
        args: Vec<Arg>,
        /// Span of the parenthesised argument list.
        args_span: Span,
    },
    /// `recv.name` or `recv.name(args)` after a call, a parenthesised
    /// expression or a literal (type methods such as `.upper()`). A method
    /// directly after a name is part of the [`Path`] instead.
    Method {
        recv: Box<Expr>,
        name: Ident,
        /// The arguments and the span of the parenthesised list, if any.
        args: Option<(Vec<Arg>, Span)>,
    },
    /// `(expr)`; kept so that later passes can apply vcc's rules about
    /// parenthesised sub-expressions and report accurate spans.
    Paren(Box<Expr>),
    Unary {
        op: UnaryOp,
        operand: Box<Expr>,
    },
    Binary {
        op: BinaryOp,
        op_span: Span,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
}
