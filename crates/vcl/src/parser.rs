//! Recursive-descent parser for VCL, following vcc_parse.c, vcc_action.c,
//! vcc_expr.c, vcc_backend.c and vcc_acl.c of Varnish 7.1.
//!
//! Entry points: [`parse`] and [`parse_with`]. Includes are expanded first at
//! token level (see [`crate::include`]); the parser then builds a [`Vcl`] tree
//! and reports Varnish's messages for everything that does not need the
//! symbol table or types. Where vcc stops at the first error, this parser
//! records it, skips the rest of the declaration it was in and continues with
//! the next one, so independent mistakes are reported together without
//! follow-on noise. Nesting of blocks and expressions is bounded so hostile
//! input cannot exhaust the stack, and every loop consumes a token, so parsing
//! is linear in the input.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::ast::*;
use crate::diag::{Diagnostic, Diagnostics, Note};
use crate::include::{self, FsLoader, IncludeConfig, SourceLoader, Stream};
use crate::lexer::{self, Punct, TokKind, Token};
use crate::source::{FileId, SourceMap, Span};

/// The built-in subroutines (VCL methods) of Varnish 7.1, in vcc's order.
pub const METHODS: &[&str] = &[
    "vcl_recv",
    "vcl_pipe",
    "vcl_pass",
    "vcl_hash",
    "vcl_purge",
    "vcl_miss",
    "vcl_hit",
    "vcl_deliver",
    "vcl_synth",
    "vcl_backend_fetch",
    "vcl_backend_response",
    "vcl_backend_error",
    "vcl_init",
    "vcl_fini",
];

/// Deepest nesting of blocks plus parenthesised/unary expressions accepted.
pub const MAX_NESTING: u32 = 100;

/// At most this many errors are reported by one parse.
const MAX_ERRORS: usize = 20;

static FS_LOADER: FsLoader = FsLoader;

/// Maps a `set` target's dotted name to the type vcc expects for its value.
pub type SetTypeFn = dyn Fn(&str) -> Option<&'static str>;

/// The type a vmod call's argument has, for vcc's "Unknown token 'x'
/// when looking for TYPE": given the callee (`module.function`,
/// `module.Class` for a constructor, `module.Class.method`), the
/// argument's position and its name when it is given by name. `None` when
/// there is no such callee, `Some(None)` when it has no such argument or
/// the argument is not a plain type.
pub type ArgTypeFn<'f> = dyn Fn(&str, usize, Option<&str>) -> Option<Option<&'static str>> + 'f;

/// Options of a parse.
pub struct ParseOptions<'a> {
    /// Directories searched for relative `include` names (vcl_path).
    pub vcl_path: Vec<String>,
    /// Allow file names with `/` in `include` and `import ... from`
    /// (varnishd's vcc_unsafe_path, on by default).
    pub unsafe_path: bool,
    /// The built-in VCL, parsed after the main file as part of the same
    /// program (as vcc does). Usually added with [`crate::source::FileKind::Builtin`].
    pub builtin: Option<FileId>,
    /// How included files are read.
    pub loader: &'a dyn SourceLoader,
    /// Optional: the type name vcc would expect on the right of
    /// `set NAME = ...` (e.g. `"STRING"` for `req.http.x`, `"INT"` for
    /// `resp.status`), given the dotted target name. Only used to word
    /// "Unknown token 'x' when looking for TYPE" like vcc; semantic analysis
    /// can supply its variable table here.
    pub set_type: Option<&'a SetTypeFn>,
    /// Optional: vmod argument types ([`ArgTypeFn`]), for the same
    /// messages inside a call's parentheses.
    pub arg_type: Option<&'a ArgTypeFn<'a>>,
}

impl Default for ParseOptions<'_> {
    fn default() -> Self {
        ParseOptions {
            vcl_path: Vec::new(),
            unsafe_path: true,
            builtin: None,
            loader: &FS_LOADER,
            set_type: None,
            arg_type: None,
        }
    }
}

impl std::fmt::Debug for ParseOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParseOptions")
            .field("vcl_path", &self.vcl_path)
            .field("unsafe_path", &self.unsafe_path)
            .field("builtin", &self.builtin)
            .finish()
    }
}

/// Parses `main` (expanding includes from the file system) with default
/// options.
pub fn parse(sm: &mut SourceMap, main: FileId) -> (Vcl, Diagnostics) {
    parse_with(sm, main, &ParseOptions::default())
}

/// Parses `main`, then `opts.builtin` if given, into one program.
/// Lexical and include errors stop the parse (the tree is then empty);
/// syntax errors are collected, one per declaration at most.
pub fn parse_with(sm: &mut SourceMap, main: FileId, opts: &ParseOptions<'_>) -> (Vcl, Diagnostics) {
    let mut files = vec![main];
    files.extend(opts.builtin);
    let cfg = IncludeConfig {
        vcl_path: &opts.vcl_path,
        unsafe_path: opts.unsafe_path,
        loader: opts.loader,
    };
    let (stream, diags) = include::expand(sm, &files, &cfg);
    if diags.has_errors() {
        return (Vcl::default(), diags);
    }
    let mut p = Parser {
        sm,
        stream,
        pos: 0,
        diags,
        syntax: None,
        open_braces: 0,
        depth: 0,
        in_method: false,
        unsafe_path: opts.unsafe_path,
        hint: None,
        default_probe: false,
        builtin_subs: Vec::new(),
        set_type: opts.set_type,
        arg_type: opts.arg_type,
        modules: HashMap::new(),
        objects: HashMap::new(),
        bare_words: false,
    };
    p.builtin_subs = match opts.builtin {
        Some(b) => p.sub_names_in(b),
        None => BUILTIN_SUBS.iter().map(|s| s.to_string()).collect(),
    };
    let mut vcl = p.program();
    vcl.header_spellings = header_spellings(p.sm, &p.stream.toks);
    (vcl, p.diags)
}

/// The spelling of each `OBJ.http.NAME` the token stream (user VCL,
/// includes in place, then the built-in VCL) names first, keyed by
/// lowercased object and name. vcc enters a header variable in its
/// symbol table at its first mention and finds it again whatever the
/// case, so a later `set beresp.http.Content-Type` writes the header as
/// an earlier `beresp.http.content-type` spelled it (checked against
/// varnishd 7.1 running Magento's VCL).
pub fn header_spellings(
    sm: &SourceMap,
    toks: &[Token],
) -> std::collections::HashMap<(String, String), String> {
    const OBJECTS: &[&str] = &["req", "req_top", "bereq", "beresp", "resp", "obj"];
    let mut out = std::collections::HashMap::new();
    for w in toks.windows(5) {
        let [obj, d1, http, d2, name] = w else {
            continue;
        };
        if obj.kind != TokKind::Id
            || !d1.is(Punct::Dot)
            || http.kind != TokKind::Id
            || !d2.is(Punct::Dot)
            || name.kind != TokKind::Id
        {
            continue;
        }
        let (o, h) = (sm.slice(obj.span), sm.slice(http.span));
        if !h.eq_ignore_ascii_case("http") || !OBJECTS.iter().any(|x| x.eq_ignore_ascii_case(o)) {
            continue;
        }
        let n = sm.slice(name.span);
        out.entry((o.to_ascii_lowercase(), n.to_ascii_lowercase()))
            .or_insert_with(|| n.to_string());
    }
    out
}

/// Adds `bytes` to `sm` as the main file named `name` and parses it.
/// Text that is not UTF-8 is reported (at the first bad byte) instead of
/// being parsed.
pub fn parse_source(
    sm: &mut SourceMap,
    name: &str,
    bytes: &[u8],
    opts: &ParseOptions<'_>,
) -> (FileId, Vcl, Diagnostics) {
    match sm.add_bytes(name, bytes, crate::source::FileKind::Main) {
        Ok(f) => {
            let (v, d) = parse_with(sm, f, opts);
            (f, v, d)
        }
        Err(bad) => {
            let mut d = Diagnostics::new();
            d.push(include::invalid_utf8(bad.file, bad.offset, sm));
            (bad.file, Vcl::default(), d)
        }
    }
}

/// Marker for "an error was reported, unwind to the declaration level".
#[derive(Debug)]
struct Stop;

type PResult<T> = Result<T, Stop>;

struct Parser<'a> {
    sm: &'a SourceMap,
    stream: Stream,
    pos: usize,
    diags: Diagnostics,
    /// The top-level VCL version (from the first `vcl X.Y;`).
    syntax: Option<VclVersion>,
    /// Braces opened (and not closed) in the current declaration.
    open_braces: u32,
    depth: u32,
    /// Parsing the body of a built-in method (vcl_*).
    in_method: bool,
    /// Type vcc would be looking for at a token position (statement
    /// contexts with a fixed type), for "Unknown token" messages.
    hint: Option<(&'static str, usize)>,
    /// A `probe default` was declared (so `.probe = default` is valid).
    default_probe: bool,
    /// `vcl_*` subroutine names that are not methods but may be defined
    /// (those of the built-in VCL).
    builtin_subs: Vec<String>,
    set_type: Option<&'a SetTypeFn>,
    arg_type: Option<&'a ArgTypeFn<'a>>,
    /// Imported vmods by the name VCL calls them (`import std as s`: s →
    /// std), and objects made with `new` (name → `module.Class`), as seen
    /// so far: what [`ArgTypeFn`] needs to name a callee.
    modules: HashMap<String, String>,
    objects: HashMap<String, String>,
    /// Parsing what vcc would not read as an expression: an ENUM argument
    /// (a bare word, `vtc.workspace_alloc(backend, 1)`), or the arguments
    /// of a callee it would already have refused as unknown.
    bare_words: bool,
    unsafe_path: bool,
}

fn num_value(text: &str) -> f64 {
    text.parse::<f64>().unwrap_or(0.0)
}

impl<'a> Parser<'a> {
    // ----------------------------------------------------------------
    // Token helpers

    fn tok(&self) -> Token {
        self.stream.toks[self.pos]
    }

    fn peek(&self, n: usize) -> Token {
        let i = (self.pos + n).min(self.stream.toks.len() - 1);
        self.stream.toks[i]
    }

    /// The dotted name (`a.b.c`) starting at the current token, read
    /// without moving: identifiers joined by dots, as vcc's symbol lookup
    /// sees them.
    fn peek_dotted(&self) -> String {
        let mut name = String::new();
        let mut n = 0;
        while self.peek(n).kind == TokKind::Id {
            name.push_str(self.text(self.peek(n)));
            if self.peek(n + 1).kind != TokKind::Punct(Punct::Dot) {
                break;
            }
            name.push('.');
            n += 2;
        }
        name
    }

    fn text(&self, t: Token) -> &'a str {
        self.sm.slice(t.span)
    }

    fn advance(&mut self) -> Token {
        let t = self.tok();
        if t.kind != TokKind::Eoi {
            self.pos += 1;
        }
        t
    }

    fn at(&self, p: Punct) -> bool {
        self.tok().is(p)
    }

    fn at_id(&self, name: &str) -> bool {
        let t = self.tok();
        t.kind == TokKind::Id && self.text(t) == name
    }

    fn describe(&self, t: Token) -> String {
        lexer::describe(self.sm.file(t.span.file).text(), &t)
    }

    fn error(&mut self, d: Diagnostic) -> Stop {
        if self.diags.error_count() < MAX_ERRORS {
            self.diags.push(d);
        }
        Stop
    }

    fn err_at(&mut self, msg: impl Into<String>, span: Span) -> Stop {
        self.error(Diagnostic::error(msg, span))
    }

    /// vcc's `Expected X got Y` error for the current token.
    fn expected(&mut self, what: TokKind) -> Stop {
        let t = self.tok();
        let msg = format!("Expected {} got {}", what.expect_name(), self.describe(t));
        self.err_at(msg, t.span)
    }

    /// SkipToken: require punctuation `p` and consume it.
    fn skip(&mut self, p: Punct) -> PResult<Token> {
        if self.at(p) {
            let t = self.advance();
            match p {
                Punct::LBrace => self.open_braces += 1,
                Punct::RBrace => self.open_braces = self.open_braces.saturating_sub(1),
                _ => {}
            }
            Ok(t)
        } else {
            Err(self.expected(TokKind::Punct(p)))
        }
    }

    fn expect_id(&mut self) -> PResult<Ident> {
        let t = self.tok();
        if t.kind != TokKind::Id {
            return Err(self.expected(TokKind::Id));
        }
        self.advance();
        Ok(Ident {
            name: self.text(t).to_string(),
            span: t.span,
        })
    }

    fn expect_str(&mut self) -> PResult<StrLit> {
        let t = self.tok();
        match t.kind {
            TokKind::CStr(d) => {
                self.advance();
                Ok(self.str_lit(t, d))
            }
            _ => Err(self.expected(TokKind::CStr(StrDelim::Quote))),
        }
    }

    fn str_lit(&self, t: Token, delim: StrDelim) -> StrLit {
        StrLit {
            value: lexer::str_value(self.sm.file(t.span.file).text(), &t),
            delim,
            span: t.span,
        }
    }

    /// vcc_ExpectVid: an identifier usable as the name of a declaration.
    fn expect_vid(&mut self, what: &str) -> PResult<Ident> {
        let id = self.expect_id()?;
        if self.at(Punct::Dot) {
            let mut end = id.span;
            let mut name = id.name.clone();
            while self.at(Punct::Dot) {
                let d = self.advance();
                name.push('.');
                end = d.span;
                if self.tok().kind != TokKind::Id {
                    break;
                }
                let t = self.advance();
                name.push_str(self.text(t));
                end = t.span;
            }
            return Err(self.err_at(
                format!("Name of {what}, '{name}', contains illegal character '.'"),
                id.span.to(end),
            ));
        }
        Ok(id)
    }

    /// The name of a new acl, backend, probe or object: not one of vcc's
    /// built-in symbols (of another kind, whatever the case), then not
    /// `vcl_*` (see [`Self::check_vcl_prefix`]).
    fn check_decl_name(&mut self, id: &Ident) -> PResult<()> {
        if let Some(kind) = builtin_symbol_kind(&id.name) {
            return Err(self.err_at(
                format!("Name {} must have type '{kind}'.", id.name),
                id.span,
            ));
        }
        self.check_vcl_prefix(id)
    }

    /// In VCL >= 4.1 new global names may not start with `vcl_`.
    fn check_vcl_prefix(&mut self, id: &Ident) -> PResult<()> {
        if self.syntax.unwrap_or(VclVersion::V41) >= VclVersion::V41 && has_vcl_prefix(&id.name) {
            return Err(self.err_at("Symbols named 'vcl_*' are reserved.\nAt:", id.span));
        }
        Ok(())
    }

    fn enter(&mut self, span: Span) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.err_at(
                format!(
                    "Nesting too deep (more than {MAX_NESTING} levels of blocks or expressions)"
                ),
                span,
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    /// After an error: skip the rest of the current declaration. Inside
    /// braces, skip to the brace closing the outermost one; outside, skip
    /// to a `;` or past a balanced `{...}`.
    fn recover(&mut self) {
        let mut depth = self.open_braces;
        loop {
            let t = self.tok();
            match t.kind {
                TokKind::Eoi => break,
                TokKind::Punct(Punct::LBrace) => depth += 1,
                TokKind::Punct(Punct::RBrace) => {
                    if depth <= 1 {
                        self.advance();
                        break;
                    }
                    depth -= 1;
                }
                TokKind::Punct(Punct::Semi) if depth == 0 => {
                    self.advance();
                    break;
                }
                _ => {}
            }
            self.advance();
        }
        self.open_braces = 0;
        self.depth = 0;
    }

    /// Names declared with `sub NAME` in file `f`.
    fn sub_names_in(&self, f: FileId) -> Vec<String> {
        let toks = &self.stream.toks;
        toks.windows(2)
            .filter(|w| {
                w[0].span.file == f
                    && w[0].kind == TokKind::Id
                    && w[1].kind == TokKind::Id
                    && self.text(w[0]) == "sub"
            })
            .map(|w| self.text(w[1]).to_string())
            .collect()
    }

    /// An expression where vcc looks for type `hint`.
    fn expr_typed(&mut self, hint: &'static str) -> PResult<Expr> {
        self.hint = Some((hint, self.pos));
        let r = self.expr();
        self.hint = None;
        r
    }

    // ----------------------------------------------------------------
    // Top level

    fn program(&mut self) -> Vcl {
        let mut vcl = Vcl::default();
        if !self.at_id("vcl") {
            let t = self.tok();
            self.err_at(
                "VCL version declaration missing\nUpdate your VCL to Version 4 syntax, and add\n\tvcl 4.1;\non the first line of the VCL files.",
                t.span,
            );
            return vcl;
        }
        match self.version_decl() {
            Ok(v) => vcl.version = Some(v),
            Err(Stop) => return vcl,
        }
        while self.tok().kind != TokKind::Eoi {
            if self.diags.error_count() >= MAX_ERRORS {
                break;
            }
            self.open_braces = 0;
            self.depth = 0;
            match self.item() {
                Ok(Some(item)) => vcl.items.push(item),
                Ok(None) => {}
                Err(Stop) => self.recover(),
            }
        }
        vcl
    }

    fn item(&mut self) -> PResult<Option<Item>> {
        let t = self.tok();
        if t.kind == TokKind::CSrc {
            self.advance();
            return Err(self.error(inline_c(t.span)));
        }
        if t.kind == TokKind::Id {
            match self.text(t) {
                "acl" => return self.acl().map(|a| Some(Item::Acl(a))),
                "sub" => return self.sub().map(|s| Some(Item::Sub(s))),
                "backend" => return self.backend().map(|b| Some(Item::Backend(b))),
                "probe" => return self.probe().map(|p| Some(Item::Probe(p))),
                "import" => return self.import().map(|i| Some(Item::Import(i))),
                "vcl" => return self.version_decl().map(|v| Some(Item::Version(v))),
                _ => {}
            }
        }
        let msg = format!(
            "Expected one of\n\t'acl', 'sub', 'backend', 'probe', 'import',  or 'vcl'\nFound: {} at",
            self.describe(t)
        );
        self.advance();
        Err(self.err_at(msg, t.span))
    }

    fn version_decl(&mut self) -> PResult<VersionDecl> {
        let t0 = self.advance();
        let t = self.tok();
        if t.kind != TokKind::FNum {
            return Err(self.expected(TokKind::FNum));
        }
        let txt = self.text(t).as_bytes();
        if txt.len() != 3 || txt[1] != b'.' {
            return Err(self.err_at("Don't play silly buggers with VCL version numbers", t.span));
        }
        self.advance();
        let n = (txt[0] - b'0') as u32 * 10 + (txt[2] - b'0') as u32;
        let version = match n {
            40 => VclVersion::V40,
            41 => VclVersion::V41,
            _ => {
                return Err(self.err_at(
                    format!("VCL version {}.{} not supported.", n / 10, n % 10),
                    t0.span.to(t.span),
                ));
            }
        };
        if !self.at(Punct::Semi) {
            return Err(self.err_at(
                "Expected 'vcl N.N;' found no semi-colon",
                t0.span.to(t.span),
            ));
        }
        let semi = self.advance();
        let top = *self.syntax.get_or_insert(version);
        if version > top {
            return Err(self.err_at(
                format!(
                    "VCL version {:.1} higher than the top level version {:.1}",
                    version.number() as f64 / 10.0,
                    top.number() as f64 / 10.0
                ),
                t0.span.to(semi.span),
            ));
        }
        Ok(VersionDecl {
            version,
            span: t0.span.to(semi.span),
        })
    }

    fn import(&mut self) -> PResult<Import> {
        let t0 = self.advance();
        let name = self.expect_id()?;
        let mut alias = None;
        if self.at_id("as") {
            self.advance();
            alias = Some(self.expect_id()?);
        }
        let mut from = None;
        if self.tok().kind == TokKind::Id {
            if !self.at_id("from") {
                let t = self.tok();
                return Err(self.err_at("Expected 'from path ...'", t.span));
            }
            self.advance();
            let s = self.expect_str()?;
            if !self.unsafe_path && s.value.contains('/') {
                let msg = format!(
                    "'import ... from path ...' is unsafe.\nAt:'{}'",
                    self.sm.slice(s.span)
                );
                return Err(self.err_at(msg, s.span));
            }
            from = Some(s);
        }
        let semi = self.skip(Punct::Semi)?;
        let called = alias.as_ref().unwrap_or(&name).name.clone();
        self.modules.insert(called, name.name.clone());
        Ok(Import {
            name,
            alias,
            from,
            span: t0.span.to(semi.span),
        })
    }

    // ----------------------------------------------------------------
    // Backends and probes

    fn backend(&mut self) -> PResult<Backend> {
        let t0 = self.advance();
        let name = self.expect_vid("backend")?;
        if name.name != "default" {
            self.check_decl_name(&name)?;
        }
        if self.at_id("none") || self.at_id("None") {
            let n = self.advance();
            let semi = self.skip(Punct::Semi)?;
            return Ok(Backend {
                name,
                body: BackendBody::None(n.span),
                span: t0.span.to(semi.span),
            });
        }
        let open = self.skip(Punct::LBrace)?;
        if self.at_id("set") {
            let t = self.tok();
            return Err(self.err_at(
                format!(
                    "NB: Backend Syntax has changed:\nRemove \"set\" and \"backend\" in front of backend fields.\n{} at ",
                    self.describe(t)
                ),
                t.span,
            ));
        }
        let mut fields: Vec<Field> = Vec::new();
        let mut address: Option<Span> = None;
        while !self.at(Punct::RBrace) {
            let (fname, start) = self.field_name(BACKEND_FIELDS, &fields)?;
            let value = match fname.name.as_str() {
                "host" | "path" => {
                    if fname.name == "path" && self.syntax == Some(VclVersion::V40) {
                        let t = self.tok();
                        return Err(self.err_at(
                            format!(
                                "Unix socket backends only supported in VCL4.1 and higher.\n{} at ",
                                self.describe(t)
                            ),
                            t.span,
                        ));
                    }
                    if let Some(prev) = address {
                        return Err(self.error(
                            Diagnostic::error("Address redefinition at:", fname.span)
                                .with_note("Previous definition:", Some(prev)),
                        ));
                    }
                    address = Some(fname.span);
                    FieldValue::Str(self.expect_str()?)
                }
                "port" | "host_header" | "ssl_ca" | "certificate" => {
                    FieldValue::Str(self.expect_str()?)
                }
                "ssl" | "ssl_sni" | "ssl_verify_peer" | "ssl_verify_host" | "ssl_nosni"
                | "ssl_noverify" => {
                    let u = self.uint()?;
                    if u.value > 1 {
                        return Err(self.err_at(format!(".{} must be 0 or 1", fname.name), u.span));
                    }
                    FieldValue::Uint(u)
                }
                "connect_timeout" | "first_byte_timeout" | "between_bytes_timeout" => {
                    FieldValue::Duration(self.duration()?)
                }
                "max_connections" => FieldValue::Uint(self.uint()?),
                "proxy_header" => {
                    let u = self.uint()?;
                    if u.value != 1 && u.value != 2 {
                        return Err(self.err_at(".proxy_header must be 1 or 2", u.span));
                    }
                    FieldValue::Uint(u)
                }
                "probe" => {
                    if self.at(Punct::LBrace) {
                        let spec = self.probe_spec()?;
                        let span = start.to(spec.span);
                        fields.push(Field {
                            name: fname,
                            value: FieldValue::ProbeInline(spec),
                            span,
                        });
                        continue;
                    }
                    if self.tok().kind == TokKind::Id {
                        let id = self.expect_id()?;
                        if id.name == "default" && !self.default_probe {
                            let t = self.tok();
                            return Err(self.err_at(
                                format!("No default probe defined\n{} at", self.describe(t)),
                                t.span,
                            ));
                        }
                        FieldValue::ProbeRef(id)
                    } else {
                        let t = self.tok();
                        return Err(self.err_at(
                            format!(
                                "Expected '{{' or name of probe, got {} at",
                                self.describe(t)
                            ),
                            t.span,
                        ));
                    }
                }
                "preamble" => {
                    let t = self.tok();
                    match t.kind {
                        TokKind::CBlob(i) => {
                            self.advance();
                            FieldValue::Blob(BlobLit {
                                bytes: self.stream.blobs[i as usize].clone(),
                                span: t.span,
                            })
                        }
                        _ => return Err(self.expected(TokKind::CBlob(0))),
                    }
                }
                _ => unreachable!("field names are validated by field_name"),
            };
            let semi = self.skip(Punct::Semi)?;
            fields.push(Field {
                name: fname,
                value,
                span: start.to(semi.span),
            });
        }
        if address.is_none() {
            return Err(self.err_at("Expected .host or .path.", name.span));
        }
        let close = self.skip(Punct::RBrace)?;
        Ok(Backend {
            name,
            body: BackendBody::Def(FieldList {
                fields,
                span: open.span.to(close.span),
            }),
            span: t0.span.to(close.span),
        })
    }

    /// vcc_IsField: `.name =`, checking the name against `allowed` and for
    /// duplicates. Returns the name and the span of the dot.
    fn field_name(&mut self, allowed: &[&str], seen: &[Field]) -> PResult<(Ident, Span)> {
        let dot = self.skip(Punct::Dot)?;
        let name = self.expect_id()?;
        self.skip(Punct::Assign)?;
        if !allowed.contains(&name.name.as_str()) {
            return Err(self.err_at(format!("Unknown field: '{}' at", name.name), name.span));
        }
        if let Some(prev) = seen.iter().find(|f| f.name.name == name.name) {
            let prev = prev.name.span;
            return Err(self.error(
                Diagnostic::error(format!("Field '{}' redefined at:", name.name), name.span)
                    .with_note("First defined at:", Some(prev)),
            ));
        }
        Ok((name, dot.span))
    }

    fn probe(&mut self) -> PResult<Probe> {
        let t0 = self.advance();
        let name = self.expect_vid("backend probe")?;
        if name.name != "default" {
            self.check_decl_name(&name)?;
        }
        let spec = self.probe_spec()?;
        if name.name == "default" {
            self.default_probe = true;
        }
        let span = t0.span.to(spec.span);
        Ok(Probe { name, spec, span })
    }

    fn probe_spec(&mut self) -> PResult<FieldList> {
        let open = self.skip(Punct::LBrace)?;
        let mut fields: Vec<Field> = Vec::new();
        let mut request: Option<Span> = None;
        let mut window: Option<UintLit> = None;
        let mut threshold: Option<UintLit> = None;
        while !self.at(Punct::RBrace) {
            let (fname, start) = self.field_name(PROBE_FIELDS, &fields)?;
            let value = match fname.name.as_str() {
                "url" | "request" => {
                    if let Some(prev) = request {
                        return Err(self.error(
                            Diagnostic::error("Probe request redefinition at:", fname.span)
                                .with_note("Previous definition:", Some(prev)),
                        ));
                    }
                    request = Some(fname.span);
                    if fname.name == "url" {
                        FieldValue::Str(self.expect_str()?)
                    } else {
                        let mut v = vec![self.expect_str()?];
                        while let TokKind::CStr(d) = self.tok().kind {
                            let t = self.advance();
                            v.push(self.str_lit(t, d));
                        }
                        FieldValue::Strings(v)
                    }
                }
                "timeout" | "interval" => FieldValue::Duration(self.duration()?),
                "window" => {
                    let u = self.uint()?;
                    window = Some(u.clone());
                    FieldValue::Uint(u)
                }
                "threshold" => {
                    let u = self.uint()?;
                    threshold = Some(u.clone());
                    FieldValue::Uint(u)
                }
                "initial" => FieldValue::Uint(self.uint()?),
                "expected_response" => {
                    let u = self.uint()?;
                    if !(100..=999).contains(&u.value) {
                        let t = self.tok();
                        return Err(self.err_at(
                            "Must specify .expected_response with exactly three digits (100 <= x <= 999)",
                            t.span,
                        ));
                    }
                    FieldValue::Uint(u)
                }
                _ => unreachable!("field names are validated by field_name"),
            };
            let semi = self.skip(Punct::Semi)?;
            fields.push(Field {
                name: fname,
                value,
                span: start.to(semi.span),
            });
        }
        match (&threshold, &window) {
            (None, Some(w)) => {
                return Err(self.err_at("Must specify .threshold with .window", w.span));
            }
            (Some(t), None) => {
                if t.value > 64 {
                    return Err(self.err_at("Threshold must be 64 or less.", t.span));
                }
            }
            (Some(t), Some(w)) => {
                if w.value > 64 {
                    return Err(self.err_at("Window must be 64 or less.", w.span));
                }
                if t.value > w.value {
                    return Err(self.error(
                        Diagnostic::error("Threshold can not be greater than window.", t.span)
                            .with_note("", Some(w.span)),
                    ));
                }
            }
            (None, None) => {}
        }
        let close = self.skip(Punct::RBrace)?;
        Ok(FieldList {
            fields,
            span: open.span.to(close.span),
        })
    }

    /// vcc_Duration: a number followed by a time unit.
    fn duration(&mut self) -> PResult<DurationLit> {
        let number = self.number_lit(TokKind::CNum)?;
        if self.tok().kind != TokKind::Id {
            return Err(self.expected(TokKind::Id));
        }
        let t = self.advance();
        let unit = Ident {
            name: self.text(t).to_string(),
            span: t.span,
        };
        let Some(scale) = duration_unit(&unit.name) else {
            return Err(self.err_at(
                format!(
                    "Unknown duration unit '{}'\nLegal duration units are 'ms', 's', 'm', 'h', 'd', 'w' and 'y'",
                    unit.name
                ),
                unit.span,
            ));
        };
        let span = number.span.to(unit.span);
        Ok(DurationLit {
            seconds: number.value * scale,
            number,
            unit,
            span,
        })
    }

    /// A CNUM or FNUM token; `want` names the expected kind in errors.
    fn number_lit(&mut self, want: TokKind) -> PResult<NumLit> {
        let t = self.tok();
        if t.kind != TokKind::CNum && t.kind != TokKind::FNum {
            return Err(self.expected(want));
        }
        self.advance();
        let text = self.text(t);
        Ok(NumLit {
            text: text.to_string(),
            value: num_value(text),
            is_int: t.kind == TokKind::CNum,
            span: t.span,
        })
    }

    /// vcc_UintVal: an integer constant.
    fn uint(&mut self) -> PResult<UintLit> {
        let t = self.tok();
        if t.kind != TokKind::CNum {
            return Err(self.expected(TokKind::CNum));
        }
        self.advance();
        Ok(UintLit {
            value: self.text(t).parse::<u64>().unwrap_or(u64::MAX),
            span: t.span,
        })
    }

    // ----------------------------------------------------------------
    // ACLs

    fn acl(&mut self) -> PResult<Acl> {
        let t0 = self.advance();
        let name = self.expect_vid("ACL")?;
        self.check_decl_name(&name)?;
        let mut flags = Vec::new();
        loop {
            let t1 = self.tok();
            if !(t1.is(Punct::Plus) || t1.is(Punct::Minus)) {
                break;
            }
            let t2 = self.peek(1);
            if t2.span.start != t1.span.end || t2.span.file != t1.span.file {
                return Err(self.error(
                    Diagnostic::error("Expected a flag at:", t1.span)
                        .with_note("Valid ACL flags are `log` and `table`:", None),
                ));
            }
            self.advance();
            let t2 = self.tok();
            let fname = self.text(t2);
            if t2.kind != TokKind::Id || !matches!(fname, "log" | "pedantic" | "table") {
                return Err(self.err_at("Unknown ACL flag:", t2.span));
            }
            self.advance();
            flags.push(AclFlag {
                enabled: t1.is(Punct::Plus),
                name: Ident {
                    name: fname.to_string(),
                    span: t2.span,
                },
                span: t1.span.to(t2.span),
            });
        }
        let pedantic = flags
            .iter()
            .rev()
            .find(|f| f.name.name == "pedantic")
            .is_none_or(|f| f.enabled);
        self.skip(Punct::LBrace)?;
        let mut entries = Vec::new();
        while !self.at(Punct::RBrace) {
            entries.push(self.acl_entry(pedantic)?);
            self.skip(Punct::Semi)?;
        }
        let close = self.skip(Punct::RBrace)?;
        Ok(Acl {
            name,
            flags,
            entries,
            span: t0.span.to(close.span),
        })
    }

    fn acl_entry(&mut self, pedantic: bool) -> PResult<AclEntry> {
        let start = self.tok().span;
        let mut negated = false;
        let mut optional = false;
        if self.at(Punct::Bang) {
            negated = true;
            self.advance();
        }
        if self.at(Punct::LParen) {
            optional = true;
            self.advance();
        }
        if !negated && self.at(Punct::Bang) {
            negated = true;
            self.advance();
        }
        let addr = self.expect_str()?;
        let mut host = addr.value.clone();
        let mut mask: Option<UintLit> = None;
        let mut end = addr.span;
        if let Some(slash) = addr.value.find('/') {
            let m = &addr.value[slash + 1..];
            if !m.bytes().all(|b| b.is_ascii_digit()) {
                return Err(self.err_at(".../mask is not numeric.", addr.span));
            }
            mask = Some(UintLit {
                value: m
                    .parse::<u64>()
                    .unwrap_or(if m.is_empty() { 0 } else { u64::MAX }),
                span: addr.span,
            });
            host.truncate(slash);
            if self.at(Punct::Slash) {
                let t = self.tok();
                return Err(self.err_at("/mask only allowed once.", t.span));
            }
        } else if self.at(Punct::Slash) {
            self.advance();
            let u = self.uint()?;
            end = u.span;
            mask = Some(u);
        }
        if optional {
            end = self.skip(Punct::RParen)?.span;
        }
        let net = self.acl_net(&host, &addr, mask.as_ref(), pedantic)?;
        Ok(AclEntry {
            negated,
            optional,
            addr,
            mask,
            net,
            span: start.to(end),
        })
    }

    /// The parse-time part of vcc's address handling: IPv4 net-notation
    /// ("10.1" is 10.1.0.0/16) and IPv6 literals, with the mask width and
    /// host-bit checks. Host names are left for resolution later.
    fn acl_net(
        &mut self,
        host: &str,
        addr: &StrLit,
        mask: Option<&UintLit>,
        pedantic: bool,
    ) -> PResult<Option<AclNet>> {
        let mask_span = mask.map(|m| m.span).unwrap_or(addr.span);
        let (ip, bits, width): (IpAddr, u64, u64) = if let Some((b, given)) = net_notation(host) {
            let m = mask.map(|m| m.value).unwrap_or(8 + 8 * given as u64);
            (IpAddr::V4(Ipv4Addr::from(b)), m, 32)
        } else if let Ok(v6) = host.parse::<Ipv6Addr>() {
            (IpAddr::V6(v6), mask.map(|m| m.value).unwrap_or(128), 128)
        } else {
            return Ok(None);
        };
        if bits > width {
            let fam = if width == 32 { "IPv4" } else { "IPv6" };
            return Err(self.err_at(
                format!("Too wide mask (/{bits}) for {fam} address"),
                mask_span,
            ));
        }
        let bits = bits as u8;
        let masked = mask_ip(ip, bits);
        if masked != ip && pedantic {
            return Err(self.err_at(
                format!("Non-zero bits in masked part, (maybe use {masked}/{bits} ?)"),
                addr.span,
            ));
        }
        Ok(Some(AclNet {
            addr: masked,
            mask: bits,
            fixed: masked != ip,
        }))
    }

    // ----------------------------------------------------------------
    // Subroutines and statements

    fn sub(&mut self) -> PResult<Sub> {
        let t0 = self.advance();
        let name = self.expect_vid("subroutine")?;
        if let Some(kind) = builtin_symbol_kind(&name.name).filter(|k| *k != "sub") {
            return Err(self.error(
                Diagnostic::error(
                    format!(
                        "Symbol '{}' has wrong type ({kind}), expected sub:\nAt: ",
                        name.name
                    ),
                    name.span,
                )
                .ranged()
                .with_note("Symbol was builtin", None),
            ));
        }
        // vcc's symbol table ignores case: `sub VCL_RECV` is vcl_recv.
        let lname = name.name.to_ascii_lowercase();
        let is_method = METHODS.contains(&lname.as_str());
        if !is_method && has_vcl_prefix(&name.name) && !self.builtin_subs.contains(&lname) {
            let mut list = String::from("Valid vcl_* subroutines are:");
            for m in METHODS {
                list.push_str("\n\t");
                list.push_str(m);
            }
            return Err(self.error(
                Diagnostic::error("The names 'vcl_*' are reserved for subroutines.", name.span)
                    .with_note(list, None),
            ));
        }
        self.in_method = is_method;
        let body = self.block()?;
        let span = t0.span.to(body.span);
        Ok(Sub { name, body, span })
    }

    fn block(&mut self) -> PResult<Block> {
        let open = self.tok().span;
        self.enter(open)?;
        self.skip(Punct::LBrace)?;
        let mut stmts = Vec::new();
        loop {
            let t = self.tok();
            match t.kind {
                TokKind::Punct(Punct::LBrace) => {
                    let b = self.block()?;
                    let span = b.span;
                    stmts.push(Stmt {
                        kind: StmtKind::Block(b),
                        span,
                    });
                }
                TokKind::Punct(Punct::RBrace) => {
                    let close = self.skip(Punct::RBrace)?;
                    self.leave();
                    return Ok(Block {
                        stmts,
                        span: open.to(close.span),
                    });
                }
                TokKind::CSrc => {
                    self.advance();
                    return Err(self.error(inline_c(t.span)));
                }
                TokKind::Eoi => {
                    return Err(self.err_at("End of input while in compound statement", t.span));
                }
                TokKind::Id => stmts.push(self.statement()?),
                _ => {
                    return Err(self.err_at("Expected an action, 'if', '{' or '}'", t.span));
                }
            }
        }
    }

    fn statement(&mut self) -> PResult<Stmt> {
        let t0 = self.tok();
        // vcc finds actions in its symbol table, which ignores case.
        let kw = self.text(t0).to_ascii_lowercase();
        let kw = kw.as_str();
        let kind = match kw {
            "if" => return self.if_stmt(),
            "set" => {
                self.advance();
                let target = self.var_target()?;
                let t = self.tok();
                let op = match t.kind {
                    TokKind::Punct(Punct::Assign) => AssignOp::Assign,
                    TokKind::Punct(Punct::Incr) => AssignOp::Add,
                    TokKind::Punct(Punct::Decr) => AssignOp::Sub,
                    TokKind::Punct(Punct::MulAssign) => AssignOp::Mul,
                    TokKind::Punct(Punct::DivAssign) => AssignOp::Div,
                    _ => return Err(self.expected(TokKind::Punct(Punct::Assign))),
                };
                self.advance();
                let hint = self.set_type.and_then(|f| f(&target.dotted()));
                let value = match hint {
                    Some(h) => self.expr_typed(h)?,
                    None => self.expr()?,
                };
                StmtKind::Set {
                    target,
                    op,
                    op_span: t.span,
                    value,
                }
            }
            "unset" => {
                self.advance();
                StmtKind::Unset {
                    target: self.var_target()?,
                }
            }
            "call" => {
                self.advance();
                if self.tok().kind != TokKind::Id {
                    return Err(self.expected(TokKind::Id));
                }
                StmtKind::Call {
                    target: self.postfix()?,
                }
            }
            "return" => {
                self.advance();
                if self.at(Punct::Semi) && !self.in_method {
                    StmtKind::Return(None)
                } else {
                    StmtKind::Return(Some(self.return_action()?))
                }
            }
            "synthetic" | "ban" | "hash_data" => {
                self.advance();
                self.skip(Punct::LParen)?;
                let e = self.expr_typed("STRING")?;
                self.skip(Punct::RParen)?;
                match kw {
                    "synthetic" => StmtKind::Synthetic(e),
                    "ban" => StmtKind::Ban(e),
                    _ => StmtKind::HashData(e),
                }
            }
            "new" => {
                self.advance();
                let name = self.expect_vid("VCL object")?;
                self.check_decl_name(&name)?;
                self.skip(Punct::Assign)?;
                if self.tok().kind != TokKind::Id {
                    return Err(self.expected(TokKind::Id));
                }
                let callee = self.path()?;
                let class = self.callee_name(&callee);
                if let Some(c) = &class {
                    self.objects.insert(name.name.clone(), c.clone());
                }
                let constructor = if self.at(Punct::LParen) {
                    let (args, args_span) = self.call_args(class.as_deref())?;
                    let span = callee.span.to(args_span);
                    Expr {
                        kind: ExprKind::Call {
                            callee,
                            args,
                            args_span,
                        },
                        span,
                    }
                } else {
                    let span = callee.span;
                    Expr {
                        kind: ExprKind::Path(callee),
                        span,
                    }
                };
                StmtKind::New { name, constructor }
            }
            _ => {
                // vcc looks the statement's first symbol up before anything
                // else: a variable has no action, whatever follows it
                // (`req.url = "x";`, `obj.http.x("y");`, `beresp.ttl (…) {`).
                let first = self.peek_dotted();
                if self.set_type.is_some_and(|f| f(&first).is_some())
                    || RESERVED_SYMBOLS.contains(&first.to_ascii_lowercase().as_str())
                {
                    return Err(self.err_at("Symbol cannot be used here.", t0.span));
                }
                let e = self.postfix()?;
                if let ExprKind::Path(p) = &e.kind
                    && RESERVED_SYMBOLS.contains(&p.segments[0].name.as_str())
                {
                    // vcc knows these words as symbols without an action;
                    // reporting here (not in semantic analysis) matters when
                    // the rest of the input no longer parses, e.g. the
                    // built-in VCL's `vcl 4.0;` after an unclosed block.
                    return Err(self.err_at("Symbol cannot be used here.", p.segments[0].span));
                }
                if let ExprKind::Path(_) = e.kind {
                    // Not a call: vcc rejects it by symbol ("Symbol not
                    // found" / "Symbol cannot be used here"), which semantic
                    // analysis reports. Skip the rest of the statement.
                    let mut end = e.span;
                    while !self.at(Punct::Semi)
                        && !self.at(Punct::RBrace)
                        && !self.at(Punct::LBrace)
                        && self.tok().kind != TokKind::Eoi
                    {
                        end = self.advance().span;
                    }
                    if self.at(Punct::Semi) {
                        end = self.advance().span;
                    }
                    let span = t0.span.to(end);
                    return Ok(Stmt {
                        kind: StmtKind::Expr(e),
                        span,
                    });
                }
                StmtKind::Expr(e)
            }
        };
        let semi = self.skip(Punct::Semi)?;
        Ok(Stmt {
            kind,
            span: t0.span.to(semi.span),
        })
    }

    fn return_action(&mut self) -> PResult<ReturnAction> {
        let open = self.skip(Punct::LParen)?;
        let name = self.expect_id()?;
        // The actions are those of `subs::Action` (vcc's table: no `miss`).
        if crate::subs::Action::from_name(&name.name).is_none() {
            return Err(self.err_at("Expected return action name.", name.span));
        }
        let mut args = Vec::new();
        let needs_arg = matches!(name.name.as_str(), "synth" | "vcl");
        if self.at(Punct::LParen) {
            match name.name.as_str() {
                "synth" | "error" => {
                    self.advance();
                    args.push(self.expr_typed("INT")?);
                    if self.at(Punct::Comma) {
                        self.advance();
                        args.push(self.expr_typed("STRING")?);
                    }
                    self.skip(Punct::RParen)?;
                }
                "vcl" => {
                    self.advance();
                    if self.tok().kind != TokKind::Id {
                        return Err(self.expected(TokKind::Id));
                    }
                    let p = self.path()?;
                    let span = p.span;
                    args.push(Expr {
                        kind: ExprKind::Path(p),
                        span,
                    });
                    self.skip(Punct::RParen)?;
                }
                "pass" | "fail" => {
                    self.advance();
                    let hint = if name.name == "pass" {
                        "DURATION"
                    } else {
                        "STRING"
                    };
                    args.push(self.expr_typed(hint)?);
                    self.skip(Punct::RParen)?;
                }
                _ => {
                    let t = self.tok();
                    return Err(self.err_at("Arguments not allowed.", t.span));
                }
            }
        } else if needs_arg {
            let t = self.tok();
            return Err(self.err_at("Missing argument.", t.span));
        }
        let close = self.skip(Punct::RParen)?;
        Ok(ReturnAction {
            name,
            args,
            span: open.span.to(close.span),
        })
    }

    fn if_stmt(&mut self) -> PResult<Stmt> {
        let t0 = self.advance();
        let mut arms = Vec::new();
        let cond = self.condition()?;
        let body = self.block()?;
        arms.push(IfArm {
            span: t0.span.to(body.span),
            cond,
            body,
        });
        let mut otherwise = None;
        let mut end = arms[0].span;
        while self.tok().kind == TokKind::Id {
            let kw = self.tok();
            match self.text(kw) {
                "else" => {
                    self.advance();
                    if self.at(Punct::LBrace) {
                        let b = self.block()?;
                        end = b.span;
                        otherwise = Some(b);
                        break;
                    }
                    if !self.at_id("if") {
                        let t = self.tok();
                        return Err(self.err_at("'else' must be followed by 'if' or '{'", t.span));
                    }
                    self.advance();
                }
                "elseif" | "elsif" | "elif" => {
                    self.advance();
                }
                _ => break,
            }
            let cond = self.condition()?;
            let body = self.block()?;
            end = body.span;
            arms.push(IfArm {
                span: kw.span.to(body.span),
                cond,
                body,
            });
        }
        Ok(Stmt {
            kind: StmtKind::If { arms, otherwise },
            span: t0.span.to(end),
        })
    }

    fn condition(&mut self) -> PResult<Expr> {
        self.skip(Punct::LParen)?;
        let e = self.expr_typed("BOOL")?;
        self.skip(Punct::RParen)?;
        Ok(e)
    }

    /// The variable a `set` or `unset` names. A header collection alone
    /// (`req.http`, or `req.http.` with nothing after the dot) is the
    /// wildcard symbol of kind none in vcc, refused as not a variable.
    fn var_target(&mut self) -> PResult<Path> {
        let target = self.path()?;
        if target.segments.len() == 2
            && !target.segments[1].quoted
            && target.segments[1].name == "http"
            && HEADER_ROOTS.contains(&target.segments[0].name.as_str())
            && !(self.at(Punct::Dot) && self.peek(1).kind == TokKind::Id)
        {
            let mut span = target.span;
            if self.at(Punct::Dot) {
                span = span.to(self.advance().span);
            }
            return Err(self.error(
                Diagnostic::error(
                    format!(
                        "Symbol '{}' has wrong type (none), expected var:\nAt: ",
                        target.dotted()
                    ),
                    span,
                )
                .ranged()
                .with_note("Symbol was builtin", None),
            ));
        }
        Ok(target)
    }

    /// A dotted name: `ID ('.' ID)* ['.' CSTR]`.
    fn path(&mut self) -> PResult<Path> {
        let first = self.expect_id()?;
        let mut span = first.span;
        let mut segments = vec![PathSegment {
            name: first.name,
            quoted: false,
            span: first.span,
        }];
        while self.at(Punct::Dot) {
            let next = self.peek(1);
            match next.kind {
                TokKind::Id => {
                    self.advance();
                    self.advance();
                    segments.push(PathSegment {
                        name: self.text(next).to_string(),
                        quoted: false,
                        span: next.span,
                    });
                }
                TokKind::CStr(d) => {
                    if self.syntax == Some(VclVersion::V40) {
                        return Err(self.err_at(
                            "Quoted headers are available for VCL >= 4.1.\nAt:",
                            next.span,
                        ));
                    }
                    self.advance();
                    self.advance();
                    let s = self.str_lit(next, d);
                    segments.push(PathSegment {
                        name: s.value,
                        quoted: true,
                        span: next.span,
                    });
                    // A quoted segment (a header name) ends the name.
                    span = span.to(next.span);
                    break;
                }
                _ => break,
            }
            span = span.to(next.span);
        }
        Ok(Path { segments, span })
    }

    // ----------------------------------------------------------------
    // Expressions (vcc_expr.c precedence)

    fn expr(&mut self) -> PResult<Expr> {
        let span = self.tok().span;
        self.enter(span)?;
        let r = self.expr_or();
        self.leave();
        r
    }

    fn binary(lhs: Expr, op: BinaryOp, op_span: Span, rhs: Expr) -> Expr {
        let span = lhs.span.to(rhs.span);
        Expr {
            kind: ExprKind::Binary {
                op,
                op_span,
                lhs: Box::new(lhs),
                rhs: Box::new(rhs),
            },
            span,
        }
    }

    /// The type vcc looks for at the expression that starts here: the
    /// operands after `&&` and `||` are read with the same one (vcc passes
    /// its `fmt` down to them and checks the types afterwards).
    fn outer_hint(&self) -> Option<&'static str> {
        match self.hint {
            Some((h, p)) if p == self.pos => Some(h),
            _ => None,
        }
    }

    fn expr_or(&mut self) -> PResult<Expr> {
        let outer = self.outer_hint();
        let mut e = self.expr_and()?;
        while self.at(Punct::COr) {
            let op = self.advance();
            let rhs = self.hinted(outer, Self::expr_and)?;
            e = Self::binary(e, BinaryOp::Or, op.span, rhs);
        }
        Ok(e)
    }

    fn expr_and(&mut self) -> PResult<Expr> {
        let outer = self.outer_hint();
        let mut e = self.expr_not()?;
        while self.at(Punct::CAnd) {
            let op = self.advance();
            let rhs = self.hinted(outer, Self::expr_not)?;
            e = Self::binary(e, BinaryOp::And, op.span, rhs);
        }
        Ok(e)
    }

    /// Runs `f` with `hint` as the type vcc looks for at the current token
    /// (for its "Unknown token 'x' when looking for TYPE" message).
    fn hinted<T>(
        &mut self,
        hint: Option<&'static str>,
        f: impl FnOnce(&mut Self) -> PResult<T>,
    ) -> PResult<T> {
        let saved = self.hint;
        if let Some(h) = hint {
            self.hint = Some((h, self.pos));
        }
        let r = f(self);
        self.hint = saved;
        r
    }

    /// The type vcc gives an operand, where the parser can tell: a
    /// variable's, a string's or a plain number's.
    fn operand_type(&self, e: &Expr) -> Option<&'static str> {
        match &e.kind {
            ExprKind::Path(p) => self.set_type.and_then(|f| f(&p.dotted())),
            ExprKind::Str(_) => Some("STRING"),
            ExprKind::Num { lit, unit: None } => Some(if lit.is_int { "INT" } else { "REAL" }),
            ExprKind::Num { unit: Some(u), .. }
                if matches!(u.name.as_str(), "ms" | "s" | "m" | "h" | "d" | "w" | "y") =>
            {
                Some("DURATION")
            }
            _ => None,
        }
    }

    fn expr_not(&mut self) -> PResult<Expr> {
        if self.at(Punct::Bang) {
            let t = self.advance();
            let operand = self.hinted(Some("BOOL"), Self::expr_cmp)?;
            let span = t.span.to(operand.span);
            return Ok(Expr {
                kind: ExprKind::Unary {
                    op: UnaryOp::Not,
                    operand: Box::new(operand),
                },
                span,
            });
        }
        self.expr_cmp()
    }

    fn expr_cmp(&mut self) -> PResult<Expr> {
        let e = self.expr_add()?;
        let t = self.tok();
        let op = match t.kind {
            TokKind::Punct(Punct::Eq) => BinaryOp::Eq,
            TokKind::Punct(Punct::Neq) => BinaryOp::Ne,
            TokKind::Punct(Punct::Lt) => BinaryOp::Lt,
            TokKind::Punct(Punct::Leq) => BinaryOp::Le,
            TokKind::Punct(Punct::Gt) => BinaryOp::Gt,
            TokKind::Punct(Punct::Geq) => BinaryOp::Ge,
            TokKind::Punct(Punct::Tilde) => BinaryOp::Match,
            TokKind::Punct(Punct::NoMatch) => BinaryOp::NotMatch,
            _ => return Ok(e),
        };
        self.advance();
        self.check_bytes_unit(&e)?;
        // vcc reads the right side of a comparison as the left's type.
        let hint = match op {
            BinaryOp::Match | BinaryOp::NotMatch => None,
            _ => self.operand_type(&e),
        };
        let rhs = self.hinted(hint, Self::expr_add)?;
        Ok(Self::binary(e, op, t.span, rhs))
    }

    /// vcc types the right of a comparison with a BYTES variable as BYTES,
    /// so a number there needs a unit token right after it; without one,
    /// vcc_ByteVal reports the token that follows instead of a syntax
    /// error further on.
    fn check_bytes_unit(&mut self, lhs: &Expr) -> PResult<()> {
        let ExprKind::Path(p) = &lhs.kind else {
            return Ok(());
        };
        if !matches!(self.tok().kind, TokKind::CNum | TokKind::FNum)
            || self.peek(1).kind == TokKind::Id
            || self.set_type.and_then(|f| f(&p.dotted())) != Some("BYTES")
        {
            return Ok(());
        }
        let next = self.peek(1);
        let msg = format!(
            "Expected BYTES unit (B, KB, MB...) got {}",
            self.describe(next)
        );
        Err(self.err_at(msg, next.span))
    }

    fn expr_add(&mut self) -> PResult<Expr> {
        let mut e = self.expr_mul()?;
        loop {
            let op = if self.at(Punct::Plus) {
                BinaryOp::Add
            } else if self.at(Punct::Minus) {
                BinaryOp::Sub
            } else {
                return Ok(e);
            };
            let t = self.advance();
            // vcc reads the right of `+`/`-` as the left's type.
            let hint = self.operand_type(&e);
            let rhs = self.hinted(hint, Self::expr_mul)?;
            e = Self::binary(e, op, t.span, rhs);
        }
    }

    fn expr_mul(&mut self) -> PResult<Expr> {
        let mut e = self.postfix()?;
        loop {
            let op = if self.at(Punct::Star) {
                BinaryOp::Mul
            } else if self.at(Punct::Slash) {
                BinaryOp::Div
            } else if self.at(Punct::Percent) {
                BinaryOp::Rem
            } else {
                return Ok(e);
            };
            let t = self.advance();
            let rhs = self.postfix()?;
            e = Self::binary(e, op, t.span, rhs);
        }
    }

    /// vcc_expr4: a primary followed by `.method` / `.method(args)`.
    fn postfix(&mut self) -> PResult<Expr> {
        let mut e = self.primary()?;
        while self.at(Punct::Dot) {
            self.advance();
            let name = self.expect_id()?;
            let args = if self.at(Punct::LParen) {
                let callee = match &e.kind {
                    ExprKind::Path(p) if p.segments.len() == 1 => self
                        .objects
                        .get(&p.segments[0].name)
                        .map(|c| format!("{c}.{}", name.name)),
                    _ => None,
                };
                Some(self.call_args(callee.as_deref())?)
            } else {
                None
            };
            let end = args.as_ref().map(|a| a.1).unwrap_or(name.span);
            let span = e.span.to(end);
            e = Expr {
                kind: ExprKind::Method {
                    recv: Box::new(e),
                    name,
                    args,
                },
                span,
            };
        }
        Ok(e)
    }

    /// `regsub`'s three arguments as vcc reads them: subject, a comma,
    /// the regex, a comma, the replacement and the closing parenthesis,
    /// each in turn expected (no names, no fourth argument).
    fn regsub_args(&mut self) -> PResult<(Vec<Arg>, Span)> {
        let open = self.skip(Punct::LParen)?;
        let mut args = Vec::new();
        for (i, hint) in ["STRING", "REGEX", "STRING"].into_iter().enumerate() {
            if i > 0 {
                self.skip(Punct::Comma)?;
            }
            let value = self.expr_typed(hint)?;
            let span = value.span;
            args.push(Arg {
                name: None,
                value,
                span,
            });
        }
        let close = self.skip(Punct::RParen)?;
        Ok((args, open.span.to(close.span)))
    }

    /// What [`ArgTypeFn`] calls a callee written as `path`: a vmod's
    /// function or class through its import name, an object's method
    /// through the class the object was made from.
    fn callee_name(&self, path: &Path) -> Option<String> {
        let first = &path.segments.first()?.name;
        let rest: Vec<&str> = path.segments[1..].iter().map(|s| s.name.as_str()).collect();
        if rest.is_empty() {
            return None;
        }
        let base = self
            .objects
            .get(first)
            .or_else(|| self.modules.get(first))?;
        Some(format!("{base}.{}", rest.join(".")))
    }

    /// A call's arguments; `callee` (see [`Self::callee_name`]) gives each
    /// one the type vcc looks for there.
    fn call_args(&mut self, callee: Option<&str>) -> PResult<(Vec<Arg>, Span)> {
        let open = self.skip(Punct::LParen)?;
        let mut args = Vec::new();
        if !self.at(Punct::RParen) {
            loop {
                let t = self.tok();
                let name = if t.kind == TokKind::Id && self.peek(1).is(Punct::Assign) {
                    self.advance();
                    self.advance();
                    Some(Ident {
                        name: self.text(t).to_string(),
                        span: t.span,
                    })
                } else {
                    None
                };
                let hint = match (self.arg_type, callee) {
                    (Some(f), Some(c)) => {
                        f(c, args.len(), name.as_ref().map(|n| n.name.as_str())).flatten()
                    }
                    _ => None,
                };
                let saved = self.bare_words;
                // Without the argument's type it may be an ENUM as well.
                self.bare_words =
                    callee.is_none() || self.arg_type.is_none() || hint == Some("ENUM");
                let hint = hint.filter(|h| *h != "ENUM");
                let value = self.hinted(hint, Self::expr);
                self.bare_words = saved;
                let value = value?;
                let span = name
                    .as_ref()
                    .map(|n| n.span)
                    .unwrap_or(value.span)
                    .to(value.span);
                args.push(Arg { name, value, span });
                if self.at(Punct::RParen) {
                    break;
                }
                // vcc expects a comma after any argument not followed by ')'.
                self.skip(Punct::Comma)?;
                // ... and takes one comma before the ')' (`f(a, )`).
                if self.at(Punct::RParen) {
                    break;
                }
                if self.at(Punct::Comma) {
                    self.skip(Punct::RParen)?;
                }
            }
        }
        let close = self.skip(Punct::RParen)?;
        Ok((args, open.span.to(close.span)))
    }

    fn number(&mut self) -> PResult<Expr> {
        let lit = self.number_lit(TokKind::CNum)?;
        let mut span = lit.span;
        let unit = if self.tok().kind == TokKind::Id {
            let t = self.advance();
            span = span.to(t.span);
            Some(Ident {
                name: self.text(t).to_string(),
                span: t.span,
            })
        } else {
            None
        };
        Ok(Expr {
            kind: ExprKind::Num { lit, unit },
            span,
        })
    }

    fn primary(&mut self) -> PResult<Expr> {
        let t = self.tok();
        match t.kind {
            TokKind::Punct(Punct::LParen) => {
                // vcc looks for the same type inside the parentheses.
                let hint = match self.hint {
                    Some((h, p)) if p == self.pos => Some(h),
                    _ => None,
                };
                self.advance();
                let inner = self.hinted(hint, Self::expr)?;
                let close = self.skip(Punct::RParen)?;
                Ok(Expr {
                    kind: ExprKind::Paren(Box::new(inner)),
                    span: t.span.to(close.span),
                })
            }
            TokKind::Id => {
                let path = self.path()?;
                // vcc finds actions and reserved words in its symbol table
                // (whatever their case) and refuses them as operands.
                if let [seg] = path.segments.as_slice()
                    && !self.bare_words
                {
                    let kind = builtin_symbol_kind(&seg.name)
                        .filter(|k| matches!(*k, "action" | "reserved"));
                    if let Some(kind) = kind {
                        let msg = format!(
                            "Symbol '{}' type ({kind}) can not be used in expression.",
                            seg.name
                        );
                        return Err(self.err_at(msg, seg.span));
                    }
                }
                // vcc knows by the symbol what may follow it: a vmod
                // function or method wants its '(' (`std.random;` →
                // "Expected '(' got ';'"), a variable is a value, so a '('
                // after it is the next token's problem.
                let dotted = path.dotted();
                if let (Some(f), Some(c)) = (self.arg_type, self.callee_name(&path))
                    && !self.at(Punct::LParen)
                    && f(&c, 0, None).is_some()
                    && !self.objects.contains_key(&dotted)
                {
                    return Err(self.expected(TokKind::Punct(Punct::LParen)));
                }
                if self.at(Punct::LParen) && self.set_type.and_then(|f| f(&dotted)).is_some() {
                    let span = path.span;
                    return Ok(Expr {
                        kind: ExprKind::Path(path),
                        span,
                    });
                }
                let regsub = path.segments.len() == 1
                    && matches!(
                        path.segments[0].name.to_ascii_lowercase().as_str(),
                        "regsub" | "regsuball"
                    );
                if regsub && !self.at(Punct::LParen) {
                    return Err(self.expected(TokKind::Punct(Punct::LParen)));
                }
                if self.at(Punct::LParen) {
                    let (args, args_span) = if regsub {
                        self.regsub_args()?
                    } else {
                        let callee = self.callee_name(&path);
                        self.call_args(callee.as_deref())?
                    };
                    let span = path.span.to(args_span);
                    return Ok(Expr {
                        kind: ExprKind::Call {
                            callee: path,
                            args,
                            args_span,
                        },
                        span,
                    });
                }
                let span = path.span;
                Ok(Expr {
                    kind: ExprKind::Path(path),
                    span,
                })
            }
            TokKind::CStr(d) => {
                self.advance();
                Ok(Expr {
                    kind: ExprKind::Str(self.str_lit(t, d)),
                    span: t.span,
                })
            }
            TokKind::CNum | TokKind::FNum => self.number(),
            TokKind::CBlob(i) => {
                self.advance();
                Ok(Expr {
                    kind: ExprKind::Blob(BlobLit {
                        bytes: self.stream.blobs[i as usize].clone(),
                        span: t.span,
                    }),
                    span: t.span,
                })
            }
            TokKind::Punct(Punct::Minus) => {
                self.advance();
                self.enter(t.span)?;
                let operand = if matches!(self.tok().kind, TokKind::CNum | TokKind::FNum) {
                    self.number()
                } else {
                    // vcc negates the whole following expression.
                    self.expr_or()
                };
                self.leave();
                let operand = operand?;
                let span = t.span.to(operand.span);
                Ok(Expr {
                    kind: ExprKind::Unary {
                        op: UnaryOp::Neg,
                        operand: Box::new(operand),
                    },
                    span,
                })
            }
            _ => {
                let what = match self.hint {
                    Some((h, p)) if p == self.pos => h,
                    _ => "an expression",
                };
                let msg = format!("Unknown token {} when looking for {what}", self.describe(t));
                Err(self.err_at(msg, t.span))
            }
        }
    }
}

/// The kind of vcc's built-in symbol called `name` (vcc looks symbols up
/// whatever their case), as its messages name it: a declaration of
/// another kind with that name is an error (checked against varnishd 7.1).
pub fn builtin_symbol_kind(name: &str) -> Option<&'static str> {
    const KINDS: &[(&str, &[&str])] = &[
        (
            "action",
            &[
                "ban",
                "call",
                "hash_data",
                "if",
                "new",
                "return",
                "set",
                "synthetic",
                "unset",
            ],
        ),
        ("func", &["default", "false", "regsub", "regsuball", "true"]),
        ("var", &["bereq", "beresp", "now", "req", "resp"]),
        (
            "reserved",
            &["acl", "backend", "import", "probe", "sub", "vcl"],
        ),
        ("sub", METHODS),
    ];
    KINDS
        .iter()
        .find(|(_, names)| names.iter().any(|n| n.eq_ignore_ascii_case(name)))
        .map(|(kind, _)| *kind)
}

/// The objects whose `.http` is a header collection (vcc's `X.http*`).
const HEADER_ROOTS: &[&str] = &["req", "bereq", "beresp", "resp", "obj", "req_top"];

/// Top-level keywords vcc enters in its symbol table as reserved words: as
/// a statement they are "Symbol cannot be used here." (checked against
/// varnishd 7.1).
const RESERVED_SYMBOLS: &[&str] = &["acl", "backend", "default", "import", "probe", "sub", "vcl"];

/// The `vcl_*` subroutines of Varnish 7.1's built-in VCL that are not
/// methods; user VCL may define them too (used when no built-in file is
/// given to the parser).
pub const BUILTIN_SUBS: &[&str] = &[
    "vcl_builtin_recv",
    "vcl_req_host",
    "vcl_req_method",
    "vcl_req_authorization",
    "vcl_req_cookie",
    "vcl_builtin_pipe",
    "vcl_builtin_pass",
    "vcl_builtin_hash",
    "vcl_builtin_purge",
    "vcl_builtin_hit",
    "vcl_builtin_miss",
    "vcl_builtin_deliver",
    "vcl_builtin_synth",
    "vcl_builtin_backend_fetch",
    "vcl_builtin_backend_response",
    "vcl_beresp_stale",
    "vcl_beresp_cookie",
    "vcl_beresp_control",
    "vcl_beresp_vary",
    "vcl_beresp_hitmiss",
    "vcl_builtin_backend_error",
];

const BACKEND_FIELDS: &[&str] = &[
    "host",
    "port",
    "path",
    "host_header",
    "connect_timeout",
    "first_byte_timeout",
    "between_bytes_timeout",
    "probe",
    "max_connections",
    "proxy_header",
    "preamble",
    // TLS to the backend: Varnish Enterprise's names, Varnish 9's
    // `.ssl_nosni`/`.ssl_noverify`, and Lacquer's `.ssl_ca`.
    "ssl",
    "ssl_sni",
    "ssl_verify_peer",
    "ssl_verify_host",
    "ssl_nosni",
    "ssl_noverify",
    "ssl_ca",
    "certificate",
];

const PROBE_FIELDS: &[&str] = &[
    "url",
    "request",
    "expected_response",
    "timeout",
    "interval",
    "window",
    "threshold",
    "initial",
];

/// Seconds per duration unit (VNUM_duration_unit).
pub fn duration_unit(u: &str) -> Option<f64> {
    Some(match u {
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        "w" => 7.0 * 86400.0,
        "y" => 365.0 * 86400.0,
        _ => return None,
    })
}

/// vcc_Has_vcl_prefix: case-insensitive `vcl_`.
pub fn has_vcl_prefix(name: &str) -> bool {
    name.len() >= 4 && name.as_bytes()[..4].eq_ignore_ascii_case(b"vcl_")
}

fn inline_c(span: Span) -> Diagnostic {
    Diagnostic {
        severity: crate::diag::Severity::Error,
        message: "Inline-C not allowed".into(),
        span: Some(span),
        range_form: false,
        inline_where: false,
        notes: vec![Note {
            message: "(Lacquer does not compile VCL to C, so inline C cannot be supported; \
                      use a VMOD or VCL instead.)"
                .into(),
            span: None,
        }],
    }
}

/// vcc_acl_try_netnotation: up to four dot-separated decimal components
/// each at most 255. Returns the bytes and the index of the last component.
fn net_notation(s: &str) -> Option<([u8; 4], usize)> {
    let mut b = [0u8; 4];
    let mut rest = s;
    let mut i = 0;
    while i < 4 {
        let digits = rest.bytes().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let v: u32 = rest[..digits].parse().ok().filter(|v| *v <= 255)?;
        b[i] = v as u8;
        rest = &rest[digits..];
        if rest.is_empty() {
            break;
        }
        rest = rest.strip_prefix('.')?;
        i += 1;
    }
    Some((b, i))
}

/// Clears the host bits beyond `bits`.
fn mask_ip(ip: IpAddr, bits: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let m = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits as u32)
            };
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits as u32)
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::FileKind;

    fn parse_src(src: &str) -> (Vcl, Diagnostics, SourceMap) {
        let mut sm = SourceMap::new();
        let f = sm.add("<vcl.inline>", src, FileKind::Main);
        let (v, d) = parse(&mut sm, f);
        (v, d, sm)
    }

    fn ok(src: &str) -> Vcl {
        let (v, d, sm) = parse_src(src);
        assert!(!d.has_errors(), "unexpected errors:\n{}", d.render(&sm));
        v
    }

    fn errs(src: &str) -> Vec<String> {
        let (_, d, _) = parse_src(src);
        assert!(d.has_errors(), "expected an error for {src:?}");
        d.iter().map(|d| d.message.clone()).collect()
    }

    fn first_err(src: &str) -> String {
        errs(src).remove(0)
    }

    fn sub_body(v: &Vcl, name: &str) -> Vec<StmtKind> {
        for it in &v.items {
            if let Item::Sub(s) = it
                && s.name.name == name
            {
                return s.body.stmts.iter().map(|s| s.kind.clone()).collect();
            }
        }
        panic!("no sub {name}");
    }

    /// Renders an expression as a fully parenthesised string.
    fn show(e: &Expr) -> String {
        match &e.kind {
            ExprKind::Str(s) => format!("{:?}", s.value),
            ExprKind::Num { lit, unit } => match unit {
                Some(u) => format!("{}{}", lit.text, u.name),
                None => lit.text.clone(),
            },
            ExprKind::Blob(b) => format!("blob{:?}", b.bytes),
            ExprKind::Path(p) => p.dotted(),
            ExprKind::Call { callee, args, .. } => {
                let a: Vec<String> = args
                    .iter()
                    .map(|a| match &a.name {
                        Some(n) => format!("{}={}", n.name, show(&a.value)),
                        None => show(&a.value),
                    })
                    .collect();
                format!("{}({})", callee.dotted(), a.join(", "))
            }
            ExprKind::Method { recv, name, args } => {
                let a = args
                    .as_ref()
                    .map(|(a, _)| {
                        format!(
                            "({})",
                            a.iter()
                                .map(|a| show(&a.value))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })
                    .unwrap_or_default();
                format!("{}.{}{}", show(recv), name.name, a)
            }
            ExprKind::Paren(e) => format!("[{}]", show(e)),
            ExprKind::Unary { op, operand } => {
                let o = match op {
                    UnaryOp::Not => "!",
                    UnaryOp::Neg => "-",
                };
                format!("{o}{}", show(operand))
            }
            ExprKind::Binary { op, lhs, rhs, .. } => {
                format!("({} {} {})", show(lhs), op.as_str(), show(rhs))
            }
        }
    }

    fn cond(src_expr: &str) -> String {
        let v = ok(&format!("vcl 4.1; sub f {{ if ({src_expr}) {{ }} }}"));
        match &sub_body(&v, "f")[0] {
            StmtKind::If { arms, .. } => show(&arms[0].cond),
            other => panic!("not an if: {other:?}"),
        }
    }

    fn set_value(src_expr: &str) -> String {
        let v = ok(&format!(
            "vcl 4.1; sub f {{ set req.http.x = {src_expr}; }}"
        ));
        match &sub_body(&v, "f")[0] {
            StmtKind::Set { value, .. } => show(value),
            other => panic!("not a set: {other:?}"),
        }
    }

    #[test]
    fn full_program() {
        let v = ok(r#"vcl 4.1;
import std;
import directors as d from "/usr/lib/vmod.so";
probe p { .url = "/health"; .window = 5; .threshold = 3; .interval = 2s; .timeout = 1.5s; }
backend default {
    .host = "127.0.0.1"; .port = "8080";
    .connect_timeout = 500ms; .probe = p; .max_connections = 10;
}
backend b2 { .host = "a"; .probe = { .request = "GET / HTTP/1.1" "Host: x"; } }
backend b3 none;
acl local +log -pedantic { "localhost"; !"10.0.0.0"/8; ("example.invalid"); "::1"/128; }
sub vcl_recv {
    set req.http.X-Forwarded-For = client.ip;
    unset req.http.Cookie;
    call my_sub;
    if (req.url ~ "^/a") { return (pass); } elsif (req.method == "PURGE") { return (purge); }
    else if (req.http.x) { return (synth(404, "Not here")); } else { return (hash); }
    std.log("x");
    hash_data(req.url);
    { ban("obj.status == 200"); }
}
sub my_sub { return; }
sub vcl_init { new rr = d.round_robin(); rr.add_backend(default); }
sub vcl_backend_response { set beresp.ttl = 1h; return (pass(10s)); }
"#);
        assert_eq!(v.version.as_ref().unwrap().version, VclVersion::V41);
        assert_eq!(v.items.len(), 11);
        let Item::Import(i) = &v.items[1] else {
            panic!()
        };
        assert_eq!(i.alias.as_ref().unwrap().name, "d");
        assert_eq!(i.from.as_ref().unwrap().value, "/usr/lib/vmod.so");
        let Item::Probe(p) = &v.items[2] else {
            panic!()
        };
        assert_eq!(p.spec.uint("window"), Some(5));
        assert_eq!(p.spec.duration("timeout"), Some(1.5));
        let Item::Backend(b) = &v.items[3] else {
            panic!()
        };
        let BackendBody::Def(fl) = &b.body else {
            panic!()
        };
        assert_eq!(fl.string("host").unwrap().value, "127.0.0.1");
        assert_eq!(fl.duration("connect_timeout"), Some(0.5));
        assert!(matches!(
            fl.get("probe").unwrap().value,
            FieldValue::ProbeRef(_)
        ));
        let Item::Backend(b2) = &v.items[4] else {
            panic!()
        };
        let BackendBody::Def(fl2) = &b2.body else {
            panic!()
        };
        let FieldValue::ProbeInline(inl) = &fl2.get("probe").unwrap().value else {
            panic!()
        };
        assert!(
            matches!(&inl.get("request").unwrap().value, FieldValue::Strings(v) if v.len() == 2)
        );
        assert!(matches!(
            v.items[5],
            Item::Backend(Backend {
                body: BackendBody::None(_),
                ..
            })
        ));
        let Item::Acl(a) = &v.items[6] else { panic!() };
        assert_eq!(a.flag("log"), Some(true));
        assert_eq!(a.flag("pedantic"), Some(false));
        assert_eq!(a.entries.len(), 4);
        assert!(a.entries[0].net.is_none());
        assert!(a.entries[1].negated);
        assert_eq!(
            a.entries[1].net,
            Some(AclNet {
                addr: "10.0.0.0".parse().unwrap(),
                mask: 8,
                fixed: false,
            })
        );
        assert!(a.entries[2].optional);
        assert_eq!(a.entries[3].net.unwrap().mask, 128);
        let body = sub_body(&v, "vcl_recv");
        assert_eq!(body.len(), 7);
        let StmtKind::If { arms, otherwise } = &body[3] else {
            panic!()
        };
        assert_eq!(arms.len(), 3);
        assert!(otherwise.is_some());
        assert!(matches!(body[6], StmtKind::Block(_)));
        assert!(matches!(sub_body(&v, "my_sub")[0], StmtKind::Return(None)));
        let init = sub_body(&v, "vcl_init");
        assert!(matches!(&init[0], StmtKind::New { name, .. } if name.name == "rr"));
        assert!(matches!(&init[1], StmtKind::Expr(e) if show(e) == "rr.add_backend(default)"));
        let StmtKind::Return(Some(r)) = &sub_body(&v, "vcl_backend_response")[1] else {
            panic!()
        };
        assert_eq!(r.name.name, "pass");
        assert_eq!(show(&r.args[0]), "10s");
    }

    #[test]
    fn precedence() {
        assert_eq!(cond("a || b && !c == d"), "(a || (b && !(c == d)))");
        assert_eq!(cond("a + b * c - d"), "((a + (b * c)) - d)");
        assert_eq!(cond("a * b % c / d"), "(((a * b) % c) / d)");
        assert_eq!(cond("!req.http.x ~ \"y\""), "!(req.http.x ~ \"y\")");
        assert_eq!(cond("client.ip !~ local"), "(client.ip !~ local)");
        assert_eq!(cond("(a || b) && c"), "([(a || b)] && c)");
        assert_eq!(cond("x >= 1.5 && y <= 10s"), "((x >= 1.5) && (y <= 10s))");
    }

    #[test]
    fn expressions() {
        assert_eq!(
            set_value("\"a\" + req.url + {\"b\"}"),
            "((\"a\" + req.url) + \"b\")"
        );
        assert_eq!(set_value("-1"), "-1");
        assert_eq!(set_value("-5m"), "-5m");
        assert_eq!(set_value("- a + b"), "-(a + b)");
        assert_eq!(set_value("100KB"), "100KB");
        assert_eq!(
            set_value("regsub(req.url, \"a\", \"b\")"),
            "regsub(req.url, \"a\", \"b\")"
        );
        assert_eq!(
            set_value("std.integer(s=\"1\", fallback=0)"),
            "std.integer(s=\"1\", fallback=0)"
        );
        assert_eq!(set_value("req.http.host.lower()"), "req.http.host.lower()");
        assert_eq!(set_value("f(x).upper()"), "f(x).upper()");
        assert_eq!(set_value("(\"x\").lower()"), "[\"x\"].lower()");
        assert_eq!(set_value(":AAEC:  "), "blob[0, 1, 2]");
        assert_eq!(set_value("true"), "true");
    }

    #[test]
    fn quoted_header_segments() {
        let v = ok("vcl 4.1; sub f { set req.http.\"x y\" = \"1\"; }");
        let StmtKind::Set { target, .. } = &sub_body(&v, "f")[0] else {
            panic!()
        };
        assert_eq!(target.segments.len(), 3);
        assert!(target.segments[2].quoted);
        assert_eq!(target.segments[2].name, "x y");
        assert_eq!(
            first_err("vcl 4.0; sub f { set req.http.\"x\" = \"1\"; }"),
            "Quoted headers are available for VCL >= 4.1.\nAt:"
        );
        assert_eq!(
            first_err("vcl 4.1; sub f { set req.\"http\".wrong-quote = \"1\"; }"),
            "Expected '=' got '.'"
        );
    }

    #[test]
    fn version_declarations() {
        assert!(first_err("backend b none;").starts_with("VCL version declaration missing\n"));
        assert!(first_err("").starts_with("VCL version declaration missing\n"));
        assert_eq!(first_err("vcl 4.2;"), "VCL version 4.2 not supported.");
        assert_eq!(first_err("vcl 4;"), "Expected FNUM got '4'");
        assert_eq!(
            first_err("vcl 4.10;"),
            "Don't play silly buggers with VCL version numbers"
        );
        assert_eq!(
            first_err("vcl 04.1;"),
            "Don't play silly buggers with VCL version numbers"
        );
        assert_eq!(
            first_err("vcl 4.1 backend"),
            "Expected 'vcl N.N;' found no semi-colon"
        );
        assert_eq!(
            first_err("vcl 4.0; vcl 4.1;"),
            "VCL version 4.1 higher than the top level version 4.0"
        );
        let v = ok("vcl 4.1; vcl 4.0;");
        assert!(matches!(v.items[0], Item::Version(_)));
    }

    #[test]
    fn statement_errors() {
        assert_eq!(
            first_err("vcl 4.1; sub f { set req.url = 1 }"),
            "Expected ';' got '}'"
        );
        assert_eq!(
            first_err("vcl 4.1; sub f { \"x\"; }"),
            "Expected an action, 'if', '{' or '}'"
        );
        assert_eq!(
            first_err("vcl 4.1; sub f { if (a) { } else foo; }"),
            "'else' must be followed by 'if' or '{'"
        );
        assert_eq!(
            first_err("vcl 4.1; sub vcl_recv { return; }"),
            "Expected '(' got ';'"
        );
        assert_eq!(
            first_err("vcl 4.1; sub vcl_recv { return (foo); }"),
            "Expected return action name."
        );
        assert_eq!(
            first_err("vcl 4.1; sub vcl_recv { return (hash(1)); }"),
            "Arguments not allowed."
        );
        assert_eq!(
            first_err("vcl 4.1; sub vcl_recv { return (synth); }"),
            "Missing argument."
        );
        assert_eq!(
            first_err("vcl 4.1; sub vcl_recv { ban(<<); }"),
            "Unknown token '<<' when looking for STRING"
        );
        assert_eq!(
            first_err("vcl 4.1; sub vcl_recv { if (]) {} }"),
            "Syntax error at"
        );
        assert_eq!(
            first_err("vcl 4.1; sub vcl_recv { if (;) {} }"),
            "Unknown token ';' when looking for BOOL"
        );
        assert_eq!(
            first_err("vcl 4.1; sub vcl_recv {"),
            "End of input while in compound statement"
        );
        assert_eq!(
            first_err("vcl 4.1; sub vcl_recv { C{ x }C }"),
            "Inline-C not allowed"
        );
        assert_eq!(first_err("vcl 4.1; C{ x }C"), "Inline-C not allowed");
        assert_eq!(
            first_err("vcl 4.1; foo"),
            "Expected one of\n\t'acl', 'sub', 'backend', 'probe', 'import',  or 'vcl'\nFound: 'foo' at"
        );
        assert_eq!(
            first_err("vcl 4.1; sub vcl_foo { }"),
            "The names 'vcl_*' are reserved for subroutines."
        );
        assert_eq!(
            first_err("vcl 4.1; sub a.b { }"),
            "Name of subroutine, 'a.b', contains illegal character '.'"
        );
        ok("vcl 4.1; sub vcl_req_cookie { return; }");
    }

    #[test]
    fn call_arguments_need_commas() {
        assert_eq!(
            first_err("vcl 4.1; sub f { std.log(\"a\" \"b\"); }"),
            "Expected ',' got '\"b\"'"
        );
        assert_eq!(
            first_err("vcl 4.1; sub f { set req.http.x = regsub(\"a\" ; }"),
            "Expected ',' got ';'"
        );
        ok("vcl 4.1; sub f { std.log(\"a\"); x.y(); x.z(a, b = 2); }");
    }

    #[test]
    fn set_type_hint_from_semantic_analysis() {
        let lookup = |name: &str| (name == "resp.status").then_some("INT");
        let opts = ParseOptions {
            set_type: Some(&lookup),
            ..ParseOptions::default()
        };
        let mut sm = SourceMap::new();
        let f = sm.add(
            "<x>",
            "vcl 4.1; sub vcl_synth { set resp.status = --200; }",
            FileKind::Main,
        );
        let (_, d) = parse_with(&mut sm, f, &opts);
        assert_eq!(
            d.iter().next().unwrap().message,
            "Unknown token '--' when looking for INT"
        );
    }

    #[test]
    fn bytes_comparison_needs_a_unit_after_the_number() {
        let lookup = |name: &str| (name == "storage.s0.free_space").then_some("BYTES");
        let opts = ParseOptions {
            set_type: Some(&lookup),
            ..ParseOptions::default()
        };
        let mut sm = SourceMap::new();
        let f = sm.add(
            "<x>",
            "vcl 4.1; sub f { if (storage.s0.free_space > 4 \"X\") {} \
             if (storage.s0.free_space > 4 KB) {} }",
            FileKind::Main,
        );
        let (_, d) = parse_with(&mut sm, f, &opts);
        let msgs: Vec<&str> = d.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(msgs, ["Expected BYTES unit (B, KB, MB...) got '\"X\"'"]);
        // Other variables keep the plain syntax error.
        assert_eq!(
            first_err("vcl 4.1; sub f { if (req.restarts > 4 \"X\") {} }"),
            "Expected ')' got '\"X\"'"
        );
    }

    #[test]
    fn reserved_words_are_not_statements() {
        for w in ["vcl", "sub", "backend", "acl", "probe", "import", "default"] {
            assert_eq!(
                first_err(&format!("vcl 4.1; sub f {{ {w}; }}")),
                "Symbol cannot be used here.",
                "{w}"
            );
        }
        // An unclosed block runs into the next declaration's keyword.
        assert_eq!(
            first_err("vcl 4.1; sub f { { } { sub g { }"),
            "Symbol cannot be used here."
        );
    }

    #[test]
    fn unknown_identifier_statements_are_left_to_sema() {
        let v = ok("vcl 4.1; sub f { req.url = \"x\"; foo; }");
        let body = sub_body(&v, "f");
        assert_eq!(body.len(), 2);
        assert!(
            matches!(&body[0], StmtKind::Expr(Expr { kind: ExprKind::Path(p), .. }) if p.dotted() == "req.url")
        );
    }

    #[test]
    fn backend_errors() {
        assert_eq!(
            first_err("vcl 4.1; backend b { }"),
            "Expected .host or .path."
        );
        assert_eq!(
            first_err("vcl 4.1; backend b { .foo = 1; }"),
            "Unknown field: 'foo' at"
        );
        assert_eq!(
            first_err("vcl 4.1; backend b { .port = \"1\"; .port = \"2\"; }"),
            "Field 'port' redefined at:"
        );
        assert_eq!(
            first_err("vcl 4.1; backend b { .host = \"a\"; .path = \"/b\"; }"),
            "Address redefinition at:"
        );
        assert_eq!(
            first_err("vcl 4.1; backend b { .host = \"a\"; .proxy_header = 3; }"),
            ".proxy_header must be 1 or 2"
        );
        assert_eq!(
            first_err("vcl 4.0; backend b { .path = \"/x\"; }"),
            "Unix socket backends only supported in VCL4.1 and higher.\n'\"/x\"' at "
        );
        assert_eq!(
            first_err("vcl 4.1; backend b { .host = \"a\"; .connect_timeout = 1 k; }"),
            "Unknown duration unit 'k'\nLegal duration units are 'ms', 's', 'm', 'h', 'd', 'w' and 'y'"
        );
        assert_eq!(
            first_err("vcl 4.1; backend b { .host = \"a\"; .connect_timeout = 1; }"),
            "Expected ID got ';'"
        );
        assert_eq!(
            first_err("vcl 4.1; backend b { .host = \"a\"; .max_connections = 1.5; }"),
            "Expected CNUM got '1.5'"
        );
        assert_eq!(
            first_err("vcl 4.1; backend b { set .host = \"a\"; }"),
            "NB: Backend Syntax has changed:\nRemove \"set\" and \"backend\" in front of backend fields.\n'set' at "
        );
        assert_eq!(
            first_err("vcl 4.1; backend b { .host = \"a\"; .probe = default; }"),
            "No default probe defined\n';' at"
        );
        ok("vcl 4.1; probe default { } backend b { .host = \"a\"; .probe = default; }");
        assert_eq!(
            first_err("vcl 4.1; backend b { .host = \"a\"; .probe = 1; }"),
            "Expected '{' or name of probe, got '1' at"
        );
        assert_eq!(
            first_err("vcl 4.1; backend vcl_b { .host = \"a\"; }"),
            "Symbols named 'vcl_*' are reserved.\nAt:"
        );
        ok("vcl 4.0; backend vcl_b { .host = \"a\"; .preamble = :AAAA:; }");
    }

    #[test]
    fn probe_errors() {
        let e = |body: &str| first_err(&format!("vcl 4.1; probe p {{ {body} }}"));
        assert_eq!(e(".window = 3;"), "Must specify .threshold with .window");
        assert_eq!(e(".threshold = 65;"), "Threshold must be 64 or less.");
        assert_eq!(
            e(".threshold = 3; .window = 65;"),
            "Window must be 64 or less."
        );
        assert_eq!(
            e(".threshold = 4; .window = 3;"),
            "Threshold can not be greater than window."
        );
        assert_eq!(
            e(".expected_response = 42;"),
            "Must specify .expected_response with exactly three digits (100 <= x <= 999)"
        );
        assert_eq!(
            e(".url = \"/\"; .request = \"x\";"),
            "Probe request redefinition at:"
        );
        ok("vcl 4.1; probe p { .threshold = 64; .initial = 2; .expected_response = 204; }");
    }

    #[test]
    fn acl_checks() {
        let e = |body: &str| first_err(&format!("vcl 4.1; acl a {{ {body} }}"));
        assert_eq!(e("\"1.2.3.4\"/33;"), "Too wide mask (/33) for IPv4 address");
        assert_eq!(e("\"::1\"/129;"), "Too wide mask (/129) for IPv6 address");
        assert_eq!(
            e("\"1.2.3.4\"/24;"),
            "Non-zero bits in masked part, (maybe use 1.2.3.0/24 ?)"
        );
        assert_eq!(e("\"1.2.3.4/x\";"), ".../mask is not numeric.");
        assert_eq!(e("\"1.2.3.4/8\"/8;"), "/mask only allowed once.");
        assert_eq!(e("\"1.2.3.4.5\";"), "Too wide mask (/40) for IPv4 address");
        assert_eq!(first_err("vcl 4.1; acl a +foo { }"), "Unknown ACL flag:");
        assert_eq!(first_err("vcl 4.1; acl a + log { }"), "Expected a flag at:");
        let v = ok("vcl 4.1; acl a -pedantic { \"1.2.3.4\"/24; \"10.1\"; }");
        let Item::Acl(a) = &v.items[0] else { panic!() };
        assert_eq!(
            a.entries[0].net,
            Some(AclNet {
                addr: "1.2.3.0".parse().unwrap(),
                mask: 24,
                fixed: true,
            })
        );
        assert_eq!(
            a.entries[1].net,
            Some(AclNet {
                addr: "10.1.0.0".parse().unwrap(),
                mask: 16,
                fixed: false,
            })
        );
    }

    #[test]
    fn recovery_reports_independent_errors_once_each() {
        let e = errs(
            "vcl 4.1;\nsub a { set x = ; foo(; }\nsub b { return (nope); }\nbackend c { }\nsub d { }\n",
        );
        assert_eq!(
            e,
            vec![
                "Unknown token ';' when looking for an expression".to_string(),
                "Expected return action name.".to_string(),
                "Expected .host or .path.".to_string(),
            ]
        );
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = format!(
            "vcl 4.1; sub f {{ set x = {}1{}; }}",
            "(".repeat(5000),
            ")".repeat(5000)
        );
        assert!(first_err(&deep).starts_with("Nesting too deep"));
        let blocks = format!("vcl 4.1; sub f {}{}", "{".repeat(5000), "}".repeat(5000));
        assert!(first_err(&blocks).starts_with("Nesting too deep"));
        let neg = format!("vcl 4.1; sub f {{ set x = {}a; }}", "- ".repeat(5000));
        assert!(first_err(&neg).starts_with("Nesting too deep"));
        let ok_depth = format!(
            "vcl 4.1; sub f {{ set x = {}1{}; }}",
            "(".repeat(50),
            ")".repeat(50)
        );
        ok(&ok_depth);
    }

    #[test]
    fn builtin_is_parsed_after_main() {
        let mut sm = SourceMap::new();
        let main = sm.add("<vcl.inline>", "vcl 4.1; sub vcl_recv { }", FileKind::Main);
        let b = sm.add(
            "<builtin>",
            "vcl 4.0; sub vcl_recv { call vcl_custom_thing; } sub vcl_custom_thing { }",
            FileKind::Builtin,
        );
        let opts = ParseOptions {
            builtin: Some(b),
            ..ParseOptions::default()
        };
        let (v, d) = parse_with(&mut sm, main, &opts);
        assert!(!d.has_errors(), "{}", d.render(&sm));
        assert_eq!(v.items.len(), 4);
        assert_eq!(v.items[3].span().file, b);
        // An empty main file takes the version of the built-in VCL.
        let empty = sm.add("<vcl.inline>", "", FileKind::Main);
        let (v, d) = parse_with(&mut sm, empty, &opts);
        assert!(!d.has_errors());
        assert_eq!(v.version.as_ref().unwrap().version, VclVersion::V40);
    }

    #[test]
    fn invalid_bytes_never_panic() {
        let mut sm = SourceMap::new();
        for src in [
            "vcl 4.1; sub f { set x = \u{0}",
            "vcl 4.1; sub f { if (a) { } elsif",
            "vcl 4.1; acl a { \"::ffff:1.2.3.4\"/200; }",
            "vcl 4.1; backend b { .host = \"a\"; .probe = { .window = 99999999999999; .threshold = 1; } }",
            "vcl 4.1; sub f { return (synth(1, \"a\", 3)); }",
            "vcl 4.1; sub f { new = ; call ; unset ; }",
            "vcl 4.1; import; import a as; import a from; import a foo;",
            "vcl 9.9;",
            "vcl",
            "vcl 4.1; probe",
            "vcl 4.1; acl",
            "vcl 4.1; acl a { ! ( ! \"x\" ) / 3; }",
        ] {
            let f = sm.add("<x>", src, FileKind::Main);
            let (_, d) = parse(&mut sm, f);
            let _ = d.render(&sm);
            let _ = d.render_compact(&sm);
        }
    }
}
