//! Semantic analysis: resolves every name of a parsed VCL program, type
//! checks it with the rules and messages of Varnish 7.1's `vcc`, checks
//! per-subroutine legality (variables, return actions, vmod `$Restrict`,
//! `new`, `synthetic`, `hash_data`) through the call graph, detects
//! recursion and unused objects, and lowers the program to [`crate::ir`].
//!
//! Like vcc, checking stops at the first error: later errors are usually
//! consequences of the first, and varnishtest's `-errvcl` looks at one
//! message. References to objects that are never defined are reported after
//! the bodies have been checked, as vcc does.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use crate::ast::{self, AssignOp, BinaryOp, ExprKind as AK, StmtKind, UnaryOp};
use crate::diag::{Diagnostic, Diagnostics};
use crate::ir::{self, CallArg, Expr, ExprKind as IK, Value, VarArg, VarRef};
use crate::source::{FileKind, SourceMap, Span};
use crate::subs::{ALL_BUILTIN_SUBS, Action, BuiltinSub, SubMask};
use crate::types::{ArithOp, CmpKind, CmpOp, Type, add_result, has_add_entry};
use crate::vars::{self, VarDef, VarLookup, VclVersion};
use crate::vmod::{ArgType, DefaultValue, FuncDecl, VmodRegistry};

/// Options of one compilation.
#[derive(Debug, Clone)]
pub struct CompileOptions {
    /// Varnish's `vcc_err_unref`: unused subs/ACLs/backends/probes are
    /// errors (default true).
    pub err_unref: bool,
    /// Names of the configured stevedores (`storage.<name>`).
    pub storages: Vec<String>,
    /// Labels of already loaded VCLs, usable in `return (vcl(label))`.
    pub labels: Vec<String>,
}

impl Default for CompileOptions {
    fn default() -> CompileOptions {
        CompileOptions {
            err_unref: true,
            storages: vec!["s0".to_string(), "Transient".to_string()],
            labels: Vec::new(),
        }
    }
}

type R<T> = Result<T, Box<Diagnostic>>;

/// A backend's host, port, socket path and resolved addresses.
type BackendHost = (String, String, Option<String>, Vec<std::net::SocketAddr>);

/// Adds to an error in backend `b`'s definition where the definition
/// starts, as vcc does.
fn in_backend(b: &ast::Backend) -> impl Fn(Box<Diagnostic>) -> Box<Diagnostic> + '_ {
    move |d| {
        let kw = Span::new(
            b.span.file,
            b.span.start,
            b.span.start + "backend".len() as u32,
        );
        Box::new(d.with_note("\nIn backend specification starting at:", Some(kw)))
    }
}

/// vcc's "Symbol not found" error: the location follows `At: ` in the
/// range form, whatever the length of the name.
/// The methods values of a type have (`.upper()`, `.resolve()`).
fn type_method_of(ty: Type, name: &str) -> Option<ir::TypeMethod> {
    match (ty, name) {
        (Type::String | Type::Strands | Type::Header, "upper") => Some(ir::TypeMethod::Upper),
        (Type::String | Type::Strands | Type::Header, "lower") => Some(ir::TypeMethod::Lower),
        (Type::Backend, "resolve") => Some(ir::TypeMethod::Resolve),
        _ => None,
    }
}

/// The type vcc names in "Unknown property" messages: a STRING is looked
/// at as STRINGS (the form its methods take).
fn property_type_name(ty: Type) -> &'static str {
    match ty {
        Type::String | Type::Header => "STRINGS",
        t => t.name(),
    }
}

fn not_found<T>(msg: String, span: Span) -> R<T> {
    Err(Box::new(Diagnostic::error(msg, span).ranged()))
}

fn err<T>(msg: impl Into<String>, span: Span) -> R<T> {
    Err(Box::new(Diagnostic::error(msg, span)))
}

/// What a global name refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sym {
    Sub(usize),
    Acl(usize),
    Backend(usize),
    Probe(usize),
    Vmod(usize),
    Instance(usize),
}

impl Sym {
    /// The kind as vcc names it in "has wrong type" messages.
    fn kind_name(self) -> &'static str {
        match self {
            Sym::Sub(_) => "sub",
            Sym::Acl(_) => "acl",
            Sym::Backend(_) => "backend",
            Sym::Probe(_) => "probe",
            Sym::Vmod(_) => "vmod",
            Sym::Instance(_) => "instance",
        }
    }
}

/// Something done in a subroutine whose legality depends on the built-in
/// method(s) the subroutine is reached from.
#[derive(Debug)]
struct Use {
    span: Span,
    allowed: SubMask,
    what: UseKind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum UseKind {
    Read,
    Set,
    /// `set` of a variable that is never writable (allowed = readable).
    ReadOnly,
    Unset,
    Action,
    Return(Action),
}

struct SubInfo {
    name: String,
    def: Span,
    /// Indexes (into the item list) of the `sub` items making up the body.
    bodies: Vec<usize>,
    method: Option<BuiltinSub>,
    /// Calls made: callee and call-site span.
    calls: Vec<(usize, Span)>,
    uses: Vec<Use>,
    referenced: bool,
    from_builtin: bool,
}

/// vcc's built-in symbols that are not values (actions such as `set` or
/// `ban`, reserved words such as `acl`): naming one in an expression is
/// "Symbol 'x' type (kind) can not be used in expression.".
fn unusable_symbol(name: &str) -> Option<String> {
    crate::parser::builtin_symbol_kind(name)
        .filter(|k| matches!(*k, "action" | "reserved"))
        .map(|k| format!("Symbol '{name}' type ({k}) can not be used in expression."))
}

/// The global names (subroutines, ACLs, backends, probes, vmods, objects)
/// looked up as vcc's symbol table does: without regard to ASCII case
/// (`sub A` is what `call a` calls, `backend B` clashes with `backend b`).
/// Each name keeps the spelling of its declaration for messages and logs.
struct SymTab<V>(HashMap<String, V>);

impl<V> Default for SymTab<V> {
    fn default() -> Self {
        SymTab(HashMap::new())
    }
}

impl<V> SymTab<V> {
    fn get(&self, name: &str) -> Option<&V> {
        self.0.get(&name.to_ascii_lowercase())
    }

    fn contains_key(&self, name: &str) -> bool {
        self.0.contains_key(&name.to_ascii_lowercase())
    }

    fn insert(&mut self, name: String, v: V) {
        self.0.insert(name.to_ascii_lowercase(), v);
    }
}

struct Checker<'a> {
    /// First spelling of each header variable (see `ast::Vcl`).
    header_spellings: &'a HashMap<(String, String), String>,
    /// Backend addresses resolved at declaration (see `backend_host`).
    backend_addrs: HashMap<usize, BackendHost>,
    sm: &'a SourceMap,
    opts: &'a CompileOptions,
    registry: &'a VmodRegistry,
    version: VclVersion,
    syms: SymTab<(Sym, Span)>,
    subs: Vec<SubInfo>,
    acls: Vec<(ir::AclDef, Span, bool)>,
    backends: Vec<(ir::BackendDef, Span, bool)>,
    probes: Vec<(ir::ProbeDef, Span, bool)>,
    vmods: Vec<ir::ImportedVmod>,
    instances: Vec<ir::InstanceDef>,
    labels: Vec<String>,
    /// Every regex of the program, for [`ir::Program::prepare_regexes`].
    regexes: Vec<Arc<ir::VclRegex>>,
    /// Warnings of a successful compilation.
    warnings: Vec<Diagnostic>,
    default_backend: Option<usize>,
    /// Deferred "Undefined ..." errors (first reference per name).
    undefined: Vec<Diagnostic>,
    cur: usize,
    /// Position (item index) of the declaration of each global name, and
    /// of the item whose body is being checked: vcc reads the source once,
    /// so a name used before its declaration resolves differently (see
    /// [`Checker::declared_later`]).
    sym_item: SymTab<usize>,
    declaring_item: usize,
    cur_item: usize,
    /// Names of the subroutines the built-in VCL defines (user VCL may
    /// define them too, even with the reserved `vcl_` prefix).
    builtin_subs: Vec<String>,
}

/// Checks a parsed program (the user's VCL followed by the built-in VCL,
/// whose items are recognised by their file kind) and lowers it to an
/// [`ir::Program`].
pub fn check(
    main: &ast::Vcl,
    sm: &SourceMap,
    opts: &CompileOptions,
    registry: &VmodRegistry,
) -> Result<ir::Program, Diagnostics> {
    let version = main
        .version
        .as_ref()
        .map(|v| v.version)
        .unwrap_or(VclVersion::V41);
    let mut c = Checker {
        header_spellings: &main.header_spellings,
        backend_addrs: HashMap::new(),
        sm,
        opts,
        registry,
        version,
        syms: SymTab::default(),
        subs: Vec::new(),
        acls: Vec::new(),
        backends: Vec::new(),
        probes: Vec::new(),
        vmods: Vec::new(),
        instances: Vec::new(),
        labels: Vec::new(),
        regexes: Vec::new(),
        warnings: Vec::new(),
        default_backend: None,
        undefined: Vec::new(),
        cur: 0,
        sym_item: SymTab::default(),
        declaring_item: 0,
        cur_item: usize::MAX,
        builtin_subs: Vec::new(),
    };
    c.run(main).map_err(|d| {
        let mut ds = Diagnostics::new();
        ds.push(*d);
        ds
    })
}

impl<'a> Checker<'a> {
    fn run(&mut self, main: &ast::Vcl) -> R<ir::Program> {
        let sm = self.sm;
        let items: Vec<(&ast::Item, bool)> = main
            .items
            .iter()
            .map(|i| {
                let f = i.span().file;
                let builtin = (f.0 as usize) < sm.len() && sm.file(f).kind() == FileKind::Builtin;
                (i, builtin)
            })
            .collect();
        self.builtin_subs = items
            .iter()
            .filter_map(|(i, b)| match i {
                ast::Item::Sub(s) if *b => Some(s.name.name.clone()),
                _ => None,
            })
            .collect();
        // Pass 1: declarations.
        for (idx, (item, from_builtin)) in items.iter().enumerate() {
            self.declare(item, idx, *from_builtin)?;
        }
        let saved = self.cur_item;
        for (idx, (item, _)) in items.iter().enumerate() {
            if let ast::Item::Sub(s) = item {
                // `new` resolves its class where it stands in the file.
                self.cur_item = idx;
                self.declare_news(&s.body)?;
            }
        }
        self.cur_item = saved;
        if let Some(default) = self
            .backends
            .iter()
            .position(|b| b.0.name == "default")
            .or((!self.backends.is_empty()).then_some(0))
        {
            self.default_backend = Some(default);
            self.backends[default].2 = true;
        }
        // Backend fields referring to probes.
        for (item, _) in &items {
            if let ast::Item::Backend(b) = item {
                self.lower_backend(b)?;
            }
        }
        // Pass 2: bodies.
        let mut bodies: Vec<Vec<ir::Stmt>> = Vec::with_capacity(self.subs.len());
        for i in 0..self.subs.len() {
            self.cur = i;
            let blocks = self.subs[i].bodies.clone();
            let mut out = Vec::new();
            for b in blocks {
                if let ast::Item::Sub(s) = items[b].0 {
                    self.cur_item = b;
                    self.stmts(&s.body.stmts, &mut out)?;
                }
            }
            self.cur_item = usize::MAX;
            bodies.push(out);
        }
        if self.backends.is_empty() {
            return Err(Box::new(Diagnostic::error_nowhere(
                "No backends or directors found in VCL program, at least one is necessary.",
            )));
        }
        if let Some(d) = self.undefined.first() {
            return Err(Box::new(d.clone()));
        }
        self.check_recursion()?;
        self.check_unused()?;
        self.check_uses(true)?;
        self.check_uses(false)?;
        let mut okmasks = self.okmasks()?;

        let mut methods = [0usize; 14];
        for m in ALL_BUILTIN_SUBS {
            match self.subs.iter().position(|s| s.method == Some(m)) {
                Some(i) => methods[m.index()] = i,
                None => {
                    // Without the built-in VCL a method may be missing:
                    // give it an empty body returning nothing.
                    self.subs.push(SubInfo {
                        name: m.name().to_string(),
                        def: Span::new(crate::source::FileId(0), 0, 0),
                        bodies: Vec::new(),
                        method: Some(m),
                        calls: Vec::new(),
                        uses: Vec::new(),
                        referenced: true,
                        from_builtin: true,
                    });
                    bodies.push(Vec::new());
                    okmasks.push(SubMask::of(&[m]));
                    methods[m.index()] = self.subs.len() - 1;
                }
            }
        }
        let subs = self
            .subs
            .iter()
            .zip(bodies)
            .zip(okmasks)
            .map(|((s, body), callable_from)| ir::SubDef {
                name: s.name.clone(),
                body,
                method: s.method,
                callable_from,
            })
            .collect();
        let default_probe = self.probes.iter().rposition(|p| p.0.name == "default");
        Ok(ir::Program {
            version: self.version,
            subs,
            methods,
            backends: self.backends.iter().map(|b| b.0.clone()).collect(),
            default_backend: self.default_backend,
            probes: self.probes.iter().map(|p| p.0.clone()).collect(),
            default_probe,
            acls: self.acls.iter().map(|a| a.0.clone()).collect(),
            vmods: self.vmods.clone(),
            instances: self.instances.clone(),
            labels: self.labels.clone(),
            regexes: std::mem::take(&mut self.regexes),
            warnings: std::mem::take(&mut self.warnings),
        })
    }

    fn text(&self, span: Span) -> &str {
        if (span.file.0 as usize) < self.sm.len() {
            self.sm.slice(span)
        } else {
            ""
        }
    }

    /// The first token of the text at `span`, as vcc would print it.
    fn first_token(&self, span: Span) -> String {
        let t = self.text(span).trim_start();
        let mut chars = t.char_indices();
        let Some((_, c0)) = chars.next() else {
            return "EOI".into();
        };
        if c0.is_ascii_digit() {
            // A number: digits, and a fraction (`1.0`); a unit is a token
            // of its own.
            let int = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
            let end = match t[int..].strip_prefix('.') {
                Some(f) => int + 1 + f.find(|c: char| !c.is_ascii_digit()).unwrap_or(f.len()),
                None => int,
            };
            return t[..end].to_string();
        }
        if c0.is_ascii_alphanumeric() || c0 == '_' {
            let end = t
                .char_indices()
                .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
                .map(|(i, _)| i)
                .unwrap_or(t.len());
            return t[..end].to_string();
        }
        if c0 == '"'
            && let Some(e) = t[1..].find('"')
        {
            return t[..e + 2].to_string();
        }
        for op in [
            "==", "!=", "<=", ">=", "&&", "||", "!~", "+=", "-=", "*=", "/=", "<<", ">>", "++",
            "--",
        ] {
            if t.starts_with(op) {
                return op.to_string();
            }
        }
        c0.to_string()
    }

    /// The token right after `span` (for "Expected X got 'Y'" messages).
    fn after_token(&self, span: Span) -> String {
        if (span.file.0 as usize) >= self.sm.len() {
            return "EOI".into();
        }
        let f = self.sm.file(span.file);
        let rest = &f.text()[span.end as usize..];
        let skip = rest.len() - rest.trim_start().len();
        let at = Span::new(span.file, span.end + skip as u32, f.text().len() as u32);
        self.first_token(at)
    }

    // ------------------------------------------------------------------
    // Pass 1: declarations

    fn define(&mut self, name: &str, sym: Sym, span: Span) -> R<()> {
        // `default` backends and probes live outside the symbol table:
        // `default` is resolved by the expected type.
        if name == "default" {
            match sym {
                Sym::Backend(_) => {
                    if let Some(b) = self.backends.iter().find(|b| b.0.name == "default") {
                        return Err(Box::new(
                            Diagnostic::error("Only one default director possible.", span)
                                .with_note("First definition:", Some(b.1)),
                        ));
                    }
                    return Ok(());
                }
                // vcc keeps the last `probe default` it reads: a second
                // one replaces the first without complaint.
                Sym::Probe(_) => return Ok(()),
                _ => {}
            }
        }
        if let Some((old, old_span)) = self.syms.get(name).copied() {
            let msg = match (old, sym) {
                (Sym::Backend(_), Sym::Backend(_)) if name == "default" => {
                    "Only one default director possible.".to_string()
                }
                (Sym::Backend(_), Sym::Backend(_)) => format!("Backend '{name}' redefined."),
                (Sym::Probe(_), Sym::Probe(_)) => format!("Probe '{name}' redefined."),
                (Sym::Acl(_), Sym::Acl(_)) => format!("Acl '{name}' redefined."),
                // vcc names the subroutine as first declared (the names
                // may differ in case).
                (Sym::Sub(_), Sym::Sub(_)) => {
                    format!("Subroutine '{}' redefined", self.sm.slice(old_span))
                }
                (Sym::Instance(_), Sym::Instance(_)) => format!("Instance '{name}' redefined."),
                // vcc looks a subroutine or an import name up as that kind
                // and finds another one.
                (_, Sym::Sub(_) | Sym::Vmod(_)) => format!(
                    "Symbol '{name}' has wrong type ({}), expected {}:",
                    old.kind_name(),
                    sym.kind_name()
                ),
                _ => format!("Name '{name}' already defined."),
            };
            let note = if matches!(sym, Sym::Sub(_)) {
                "Previously defined here:"
            } else {
                "First definition:"
            };
            return Err(Box::new(
                Diagnostic::error(msg, span).with_note(note, Some(old_span)),
            ));
        }
        self.syms.insert(name.to_string(), (sym, span));
        self.sym_item.insert(name.to_string(), self.declaring_item);
        Ok(())
    }

    /// Whether global `name` (an ACL, backend, probe or subroutine) is
    /// declared after the subroutine body being checked. vcc compiles in
    /// one pass: a use in a typed context (`call x`, a BACKEND, an ACL)
    /// makes a symbol of that kind which the later declaration must
    /// match, and a use anywhere else does not find the name.
    fn declared_later(&self, name: &str) -> bool {
        matches!(
            self.syms.get(name),
            Some((
                Sym::Acl(_) | Sym::Backend(_) | Sym::Probe(_) | Sym::Sub(_),
                _
            ))
        ) && self.sym_item.get(name).is_some_and(|i| *i > self.cur_item)
    }

    /// The symbol `name` as vcc sees it while reading the current body: an
    /// import further down the file is not known yet (`std.log` before
    /// `import std;` is "Symbol not found").
    fn sym_now(&self, name: &str) -> Option<(Sym, Span)> {
        match self.syms.get(name).copied() {
            Some((Sym::Vmod(_), _))
                if self.sym_item.get(name).is_some_and(|i| *i > self.cur_item) =>
            {
                None
            }
            other => other,
        }
    }

    /// The error vcc gives at the declaration of `name` as `def` when a
    /// use before it made the name a `want` (acl, backend, probe, sub).
    fn forward_kind_error(name: &str, def: Sym, def_span: Span, want: &str) -> Box<Diagnostic> {
        let msg = if matches!(def, Sym::Sub(_)) {
            format!("Symbol '{name}' has wrong type ({want}), expected sub:")
        } else {
            format!("Name {name} must have type '{want}'.")
        };
        Box::new(Diagnostic::error(msg, def_span))
    }

    fn check_plain_name(&self, what: &str, id: &ast::Ident) -> R<()> {
        if let Some(c) = id
            .name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
        {
            return err(
                format!(
                    "Name of {what}, '{}', contains illegal character '{c}'",
                    id.name
                ),
                id.span,
            );
        }
        if what != "subroutine" && id.name.starts_with("vcl_") {
            return err("The names 'vcl_*' are reserved for subroutines.", id.span);
        }
        Ok(())
    }

    fn declare(&mut self, item: &ast::Item, idx: usize, from_builtin: bool) -> R<()> {
        self.declaring_item = idx;
        match item {
            ast::Item::Version(_) => Ok(()),
            ast::Item::Import(imp) => self.declare_import(imp),
            ast::Item::Backend(b) => {
                self.check_plain_name("backend", &b.name)?;
                let idx = self.backends.len();
                self.define(&b.name.name, Sym::Backend(idx), b.name.span)?;
                self.backends.push((
                    ir::BackendDef {
                        name: b.name.name.clone(),
                        none: matches!(b.body, ast::BackendBody::None(_)),
                        host: String::new(),
                        port: "80".into(),
                        addrs: Vec::new(),
                        path: None,
                        host_header: None,
                        connect_timeout: None,
                        first_byte_timeout: None,
                        between_bytes_timeout: None,
                        max_connections: None,
                        proxy_header: None,
                        probe: None,
                        preamble: None,
                        tls: None,
                    },
                    b.name.span,
                    false,
                ));
                if let ast::BackendBody::Def(fields) = &b.body {
                    let h = self
                        .backend_host(fields, b.name.span)
                        .map_err(in_backend(b))?;
                    self.backend_addrs.insert(idx, h);
                }
                Ok(())
            }
            ast::Item::Probe(p) => {
                self.check_plain_name("probe", &p.name)?;
                let idx = self.probes.len();
                self.define(&p.name.name, Sym::Probe(idx), p.name.span)?;
                let def = lower_probe(&p.name.name, &p.spec);
                self.probes.push((def, p.name.span, false));
                Ok(())
            }
            ast::Item::Acl(a) => {
                self.check_plain_name("ACL", &a.name)?;
                let idx = self.acls.len();
                self.define(&a.name.name, Sym::Acl(idx), a.name.span)?;
                let def = self.lower_acl(a)?;
                self.acls.push((def, a.name.span, false));
                Ok(())
            }
            ast::Item::Sub(s) => self.declare_sub(s, idx, from_builtin),
        }
    }

    fn declare_import(&mut self, imp: &ast::Import) -> R<()> {
        let Some(decl) = self.registry.get(&imp.name.name) else {
            return err(
                format!("Could not find VMOD {}", imp.name.name),
                imp.name.span,
            );
        };
        let alias = imp.alias.as_ref().unwrap_or(&imp.name);
        if let Some((old, _)) = self.syms.get(&alias.name).copied()
            && let Sym::Vmod(i) = old
        {
            if self.vmods[i].name == imp.name.name {
                // Importing the same module twice is harmless.
                return Ok(());
            }
            return err(
                format!("Another module already imported as {}.", alias.name),
                imp.span,
            );
        }
        let idx = self.vmods.len();
        self.define(&alias.name, Sym::Vmod(idx), alias.span)?;
        self.vmods.push(ir::ImportedVmod {
            name: imp.name.name.clone(),
            alias: alias.name.clone(),
            decl: decl.clone(),
        });
        Ok(())
    }

    fn declare_sub(&mut self, s: &ast::Sub, item: usize, from_builtin: bool) -> R<()> {
        self.check_plain_name("subroutine", &s.name)?;
        let name = &s.name.name;
        // vcc's symbol table ignores case: `sub VCL_RECV` is vcl_recv.
        let lname = name.to_ascii_lowercase();
        let method = BuiltinSub::from_name(&lname);
        if let Some((Sym::Sub(i), _)) = self.syms.get(name).copied() {
            let info = &self.subs[i];
            // Methods, and subs the built-in VCL also defines, concatenate.
            if method.is_some() || from_builtin || info.from_builtin {
                self.subs[i].bodies.push(item);
                return Ok(());
            }
        }
        if method.is_none()
            && lname.starts_with("vcl_")
            && !from_builtin
            && !self.builtin_subs.contains(&lname)
        {
            return Err(Box::new(
                Diagnostic::error(
                    "The names 'vcl_*' are reserved for subroutines.",
                    s.name.span,
                )
                .with_note("Valid vcl_* subroutines are:", None),
            ));
        }
        let idx = self.subs.len();
        self.define(name, Sym::Sub(idx), s.name.span)?;
        self.subs.push(SubInfo {
            name: method.map_or_else(|| name.clone(), |m| m.name().to_string()),
            def: s.name.span,
            bodies: vec![item],
            method,
            calls: Vec::new(),
            uses: Vec::new(),
            referenced: method.is_some() || from_builtin,
            from_builtin,
        });
        Ok(())
    }

    fn declare_news(&mut self, b: &ast::Block) -> R<()> {
        for st in &b.stmts {
            match &st.kind {
                StmtKind::New { name, constructor } => {
                    if name.name.starts_with("vcl_") {
                        return err("Symbols named 'vcl_*' are reserved.", name.span);
                    }
                    let callee = match &constructor.kind {
                        AK::Call { callee, .. } => callee,
                        AK::Path(p) => {
                            let (_, _) = self.resolve_class(p)?;
                            return err(
                                format!(
                                    "Expected '(' got '{}'",
                                    self.after_token(constructor.span)
                                ),
                                constructor.span,
                            );
                        }
                        _ => {
                            return err(
                                format!("Expected ID got '{}'", self.first_token(constructor.span)),
                                constructor.span,
                            );
                        }
                    };
                    let (vmod, class) = self.resolve_class(callee)?;
                    let idx = self.instances.len();
                    self.define(&name.name, Sym::Instance(idx), name.span)?;
                    self.instances.push(ir::InstanceDef {
                        name: name.name.clone(),
                        vmod,
                        class,
                    });
                }
                StmtKind::Block(inner) => self.declare_news(inner)?,
                StmtKind::If { arms, otherwise } => {
                    for a in arms {
                        self.declare_news(&a.body)?;
                    }
                    if let Some(o) = otherwise {
                        self.declare_news(o)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn resolve_class(&self, callee: &ast::Path) -> R<(usize, usize)> {
        let segs = &callee.segments;
        if segs.len() == 2
            && let Some((Sym::Vmod(v), _)) = self.sym_now(&segs[0].name)
            && let Some((ci, _)) = self.vmods[v].decl.object(&segs[1].name)
        {
            return Ok((v, ci));
        }
        // A function of the vmod where an object class is wanted.
        if segs.len() == 2
            && let Some((Sym::Vmod(v), _)) = self.sym_now(&segs[0].name)
            && self.vmods[v].decl.function(&segs[1].name).is_some()
        {
            return err(
                format!(
                    "Symbol '{}' has wrong type (func), expected object:",
                    callee.dotted()
                ),
                callee.span,
            );
        }
        not_found(
            format!("Symbol not found: '{}'\nAt: ", callee.dotted()),
            callee.span,
        )
    }

    /// A backend's host, port, socket path and addresses: resolved when
    /// the backend is declared, in source order with the ACLs' host names,
    /// as vcc resolves them while parsing.
    fn backend_host(&mut self, fields: &ast::FieldList, name_span: Span) -> R<BackendHost> {
        let host_field = fields
            .string("host")
            .map(|s| s.value.clone())
            .unwrap_or_default();
        let (host, host_port) = split_host_port(&host_field);
        let host = host.to_string();
        // vcc: an explicit empty `.port` is port 0.
        let port_given = fields.string("port").is_some();
        let port = fields
            .string("port")
            .map(|s| {
                if s.value.is_empty() {
                    "0".to_string()
                } else {
                    s.value.clone()
                }
            })
            .or(host_port.map(str::to_string))
            // A TLS backend (`.ssl = 1`) defaults to 443.
            .unwrap_or_else(|| {
                if fields.uint("ssl") == Some(1) {
                    "443"
                } else {
                    "80"
                }
                .into()
            });
        let path = fields.string("path").map(|s| s.value.clone());
        if let (Some(p), Some(lit)) = (&path, fields.string("path")) {
            if self.version == VclVersion::V40 {
                return err(
                    "Unix socket backends only supported in VCL4.1 and higher.",
                    lit.span,
                );
            }
            let span = lit.span;
            if let Some(w) = check_uds_path(p).map_err(|m| Box::new(Diagnostic::error(m, span)))? {
                self.warnings.push(Diagnostic::warning(w, span));
            }
        }
        if let Some(lit) = fields.string("host") {
            check_ipv6_brackets(&lit.value)
                .map_err(|m| Box::new(Diagnostic::error(m, lit.span)))?;
        }
        let mut addrs = Vec::new();
        if path.is_none() && fields.string("host").is_some() {
            let span = fields.string("host").map(|s| s.span).unwrap_or(name_span);
            // vcc resolves an empty host with an explicit `.port` as a
            // passive lookup: the wildcard addresses of both families
            // (varnishtest declares a server that does not listen yet as
            // `.host = ""; .port = ""`). Without `.port` it is an error.
            let resolved = if host.is_empty() && port_given {
                service_port(&port).map(|p| {
                    vec![
                        SocketAddr::new(IpAddr::from([0u8, 0, 0, 0]), p),
                        SocketAddr::new(IpAddr::from([0u16; 8]), p),
                    ]
                })
            } else {
                resolve_host(&host, &port)
            };
            addrs = resolved.map_err(|e| {
                Box::new(Diagnostic::error(
                    format!("Backend host '\"{host_field}\"' could not be resolved to an IP address:\n\t{e}\n(Sorry if that error message is gibberish.)"),
                    span,
                ))
            })?;
            let v4 = addrs.iter().filter(|a| a.is_ipv4()).count();
            let v6 = addrs.len() - v4;
            if v4 > 1 || v6 > 1 {
                return err(
                    format!(
                        "Backend host \"{host}\": resolves to too many addresses.\nOnly one IPv4 and one IPv6 are allowed.\nPlease specify which exact address you want to use, we found all of these:"
                    ),
                    span,
                );
            }
        }
        Ok((host, port, path, addrs))
    }

    fn lower_backend(&mut self, b: &ast::Backend) -> R<()> {
        // As vcc: any error in a backend's definition is followed by
        // where the definition starts.
        self.lower_backend_def(b).map_err(in_backend(b))
    }

    fn lower_backend_def(&mut self, b: &ast::Backend) -> R<()> {
        let Some(idx) = self.backends.iter().position(|x| x.0.name == b.name.name) else {
            return Ok(());
        };
        let ast::BackendBody::Def(fields) = &b.body else {
            return Ok(());
        };
        let mut probe = None;
        if let Some(f) = fields.get("probe") {
            match &f.value {
                ast::FieldValue::ProbeRef(id) if id.name == "default" => {
                    match self.probes.iter().rposition(|p| p.0.name == "default") {
                        Some(p) => {
                            self.probes[p].2 = true;
                            probe = Some(p);
                        }
                        None => return err("No default probe defined", id.span),
                    }
                }
                ast::FieldValue::ProbeRef(id) => match self.syms.get(&id.name).copied() {
                    Some((Sym::Probe(p), _)) => {
                        self.probes[p].2 = true;
                        probe = Some(p);
                    }
                    _ if id.name == "default" => {
                        return err("No default probe defined", id.span);
                    }
                    Some((other, _)) => {
                        return err(
                            format!(
                                "Symbol '{}' has wrong type ({}), expected probe:",
                                id.name,
                                other.kind_name()
                            ),
                            id.span,
                        );
                    }
                    None => {
                        return not_found(
                            format!("Symbol not found: '{}'\nAt: ", id.name),
                            id.span,
                        );
                    }
                },
                ast::FieldValue::ProbeInline(spec) => {
                    let name = format!("vgc_probe_{}", b.name.name);
                    self.probes
                        .push((lower_probe(&name, spec), b.name.span, true));
                    probe = Some(self.probes.len() - 1);
                }
                _ => {}
            }
        }
        if probe.is_none()
            && let Some(p) = self.probes.iter().rposition(|p| p.0.name == "default")
        {
            self.probes[p].2 = true;
            probe = Some(p);
        }
        let tls = backend_tls(fields)?;
        let (host, port, path, addrs) = match self.backend_addrs.remove(&idx) {
            Some(a) => a,
            None => self.backend_host(fields, b.name.span)?,
        };
        let def = &mut self.backends[idx].0;
        def.host = host;
        def.port = port;
        def.addrs = addrs;
        def.path = path;
        def.host_header = fields.string("host_header").map(|s| s.value.clone());
        def.connect_timeout = fields.duration("connect_timeout");
        def.first_byte_timeout = fields.duration("first_byte_timeout");
        def.between_bytes_timeout = fields.duration("between_bytes_timeout");
        def.max_connections = fields.uint("max_connections");
        def.proxy_header = fields.uint("proxy_header");
        def.probe = probe;
        def.preamble = match fields.get("preamble").map(|f| &f.value) {
            Some(ast::FieldValue::Blob(b)) => Some(Arc::from(b.bytes.as_slice())),
            _ => None,
        };
        def.tls = tls;
        Ok(())
    }

    fn lower_acl(&self, a: &ast::Acl) -> R<ir::AclDef> {
        let mut entries: Vec<(ir::AclEntry, Span)> = Vec::new();
        for e in &a.entries {
            // IP literals were parsed (and masked) by the parser; host names
            // are resolved here, each address masked like a literal.
            let nets: Vec<(IpAddr, u8)> = match e.net {
                Some(net) => vec![(net.addr, net.mask)],
                None => {
                    let host = e.addr.value.split('/').next().unwrap_or_default();
                    match (host, 0u16).to_socket_addrs() {
                        Ok(it) => {
                            let mut v: Vec<(IpAddr, u8)> = Vec::new();
                            for sa in it {
                                let ip = sa.ip();
                                let max = if ip.is_ipv4() { 32 } else { 128 };
                                let bits = e
                                    .mask
                                    .as_ref()
                                    .map_or(max, |m| m.value.min(max as u64) as u8);
                                let masked = mask_ip(ip, bits);
                                if masked != ip {
                                    return err(
                                        format!(
                                            "Non-zero bits in masked part, (maybe use {masked}/{bits} ?)"
                                        ),
                                        e.addr.span,
                                    );
                                }
                                let n = (masked, bits);
                                if !v.contains(&n) {
                                    v.push(n);
                                }
                            }
                            v
                        }
                        Err(_) if e.optional => Vec::new(),
                        Err(er) => {
                            return err(
                                format!("DNS lookup({}): {}", host, dns_error_text(&er)),
                                e.addr.span,
                            );
                        }
                    }
                }
            };
            let written = e.addr.value.split('/').next().unwrap_or_default();
            let sep_mask = e.mask.as_ref().filter(|m| m.span != e.addr.span);
            let mut log_text = format!("\"{written}\"");
            if let Some(m) = sep_mask {
                log_text.push_str(&format!("/{}", m.value));
            }
            if let Some(net) = e.net.filter(|n| n.fixed) {
                log_text.push_str(&format!(" fixed: {}/{}", net.addr, net.mask));
            }
            for (addr, prefix) in nets {
                let entry = ir::AclEntry {
                    negated: e.negated,
                    addr,
                    prefix,
                    log_text: log_text.as_str().into(),
                };
                if let Some((old, old_span)) = entries
                    .iter()
                    .find(|(o, _)| o.addr == entry.addr && o.prefix == entry.prefix)
                {
                    if old.negated != entry.negated {
                        return Err(Box::new(
                            Diagnostic::error("Conflicting ACL entries:", e.span)
                                .with_note("vs:", Some(*old_span)),
                        ));
                    }
                    continue;
                }
                entries.push((entry, e.span));
            }
        }
        let mut entries: Vec<ir::AclEntry> = entries.into_iter().map(|(e, _)| e).collect();
        // Most specific first; IPv4 before IPv6 at equal length.
        entries.sort_by_key(|e| std::cmp::Reverse(e.prefix));
        Ok(ir::AclDef {
            name: a.name.name.clone(),
            entries,
            log: a.flag("log").unwrap_or(false),
        })
    }

    // ------------------------------------------------------------------
    // Pass 2: statements

    /// Records a context-dependent use, checked per reaching method once
    /// the whole program is parsed (as vcc does, after all type errors).
    fn add_use(&mut self, span: Span, allowed: SubMask, what: UseKind) {
        self.subs[self.cur].uses.push(Use {
            span,
            allowed,
            what,
        });
    }

    fn stmts(&mut self, stmts: &[ast::Stmt], out: &mut Vec<ir::Stmt>) -> R<()> {
        for st in stmts {
            self.stmt(st, out)?;
        }
        Ok(())
    }

    fn block(&mut self, b: &ast::Block) -> R<Vec<ir::Stmt>> {
        let mut out = Vec::new();
        self.stmts(&b.stmts, &mut out)?;
        Ok(out)
    }

    fn stmt(&mut self, st: &ast::Stmt, out: &mut Vec<ir::Stmt>) -> R<()> {
        match &st.kind {
            StmtKind::Block(b) => self.stmts(&b.stmts, out)?,
            StmtKind::If { arms, otherwise } => {
                let mut ir_arms = Vec::with_capacity(arms.len());
                for arm in arms {
                    let cond = self.expr0(&arm.cond, Type::Bool)?;
                    let body = self.block(&arm.body)?;
                    ir_arms.push((cond, body));
                }
                let otherwise = match otherwise {
                    Some(b) => self.block(b)?,
                    None => Vec::new(),
                };
                out.push(ir::Stmt::If {
                    arms: ir_arms,
                    otherwise,
                });
            }
            StmtKind::Set {
                target,
                op,
                op_span,
                value,
            } => out.push(self.set(target, *op, *op_span, value)?),
            StmtKind::Unset { target } => {
                let (def, var) = self.lvalue(target)?;
                if def.unset.is_empty() {
                    return err("Variable cannot be unset.", target.span);
                }
                self.add_use(target.span, def.unset, UseKind::Unset);
                out.push(ir::Stmt::Unset(var));
            }
            StmtKind::Call { target } => match &target.kind {
                AK::Path(p) if p.is_simple() => {
                    let id = ast::Ident {
                        name: p.dotted(),
                        span: p.span,
                    };
                    if let Some(i) = self.sub_ref(&id)? {
                        self.subs[self.cur].calls.push((i, target.span));
                        out.push(ir::Stmt::Call(i));
                    }
                }
                AK::Call {
                    callee, args_span, ..
                } if callee.is_simple()
                    && matches!(self.syms.get(&callee.dotted()), Some((Sym::Sub(_), _))) =>
                {
                    // vcc's `call` takes the sub's name and then wants the
                    // semicolon: a sub is not called with parentheses.
                    let paren = Span::new(args_span.file, args_span.start, args_span.start + 1);
                    return err("Expected ';' got '('", paren);
                }
                _ => {
                    // A SUB-valued expression (e.g. a vmod method): which
                    // sub runs is only known at run time.
                    let x = self.expr0(target, Type::Sub)?;
                    match x.kind {
                        IK::Sub(i) if i != usize::MAX => {
                            self.subs[self.cur].calls.push((i, target.span));
                            out.push(ir::Stmt::Call(i));
                        }
                        _ => out.push(ir::Stmt::CallDynamic(x)),
                    }
                }
            },
            StmtKind::Return(None) => out.push(ir::Stmt::Return(ir::Return::FromSub)),
            StmtKind::Return(Some(ra)) => out.push(ir::Stmt::Return(self.ret(ra)?)),
            StmtKind::Synthetic(e) => {
                self.add_use(
                    st.span,
                    SubMask::of(&[BuiltinSub::Synth, BuiltinSub::BackendError]),
                    UseKind::Action,
                );
                out.push(ir::Stmt::Synthetic(self.expr0(e, Type::String)?));
            }
            StmtKind::Ban(e) => out.push(ir::Stmt::Ban(self.expr0(e, Type::String)?)),
            StmtKind::HashData(e) => {
                self.add_use(st.span, SubMask::of(&[BuiltinSub::Hash]), UseKind::Action);
                out.push(ir::Stmt::HashData(self.expr0(e, Type::String)?));
            }
            StmtKind::New { name, constructor } => {
                self.add_use(st.span, SubMask::of(&[BuiltinSub::Init]), UseKind::Action);
                let Some((Sym::Instance(inst), _)) = self.syms.get(&name.name).copied() else {
                    return not_found(
                        format!("Symbol not found: '{}'\nAt: ", name.name),
                        name.span,
                    );
                };
                let AK::Call {
                    args, args_span, ..
                } = &constructor.kind
                else {
                    return err("Expected '('", constructor.span);
                };
                let ctor = {
                    let i = &self.instances[inst];
                    self.vmods[i.vmod].decl.objects[i.class].ctor.clone()
                };
                let args = self.call_args(&ctor, args, *args_span)?;
                out.push(ir::Stmt::New {
                    instance: inst,
                    args,
                });
            }
            StmtKind::Expr(e) => {
                let ex = match &e.kind {
                    // vcc's built-in functions have no action: only vmod
                    // functions may stand as statements.
                    AK::Call { callee, .. }
                        if callee.is_simple() && is_builtin_func(&callee.dotted()) =>
                    {
                        return err("Symbol cannot be used here.", callee.span);
                    }
                    AK::Call { .. } => self.call(e, true)?,
                    AK::Method { .. } => self.expr(e, Type::Void)?,
                    AK::Path(p) => return Err(self.bare_symbol_stmt(p)),
                    _ => return err("Expected an action, 'if', '{' or '}'", e.span),
                };
                out.push(ir::Stmt::Eval(ex));
            }
        }
        Ok(())
    }

    /// The error for a statement that is just a name (`foo;`).
    fn bare_symbol_stmt(&self, p: &ast::Path) -> Box<Diagnostic> {
        let name = p.dotted();
        let first = &p.segments[0].name;
        match self.syms.get(first).copied() {
            Some(_) if self.declared_later(first) => Box::new(
                Diagnostic::error(format!("Symbol not found: '{name}'\nAt: "), p.span).ranged(),
            ),
            Some((Sym::Instance(_), _)) if p.segments.len() == 1 => Box::new(Diagnostic::error(
                format!("Expected '.' got '{}'", self.after_token(p.span)),
                p.span,
            )),
            // A method named without its parentheses (`d.backend;`).
            Some((Sym::Instance(i), _))
                if p.segments.len() == 2 && {
                    let inst = &self.instances[i];
                    self.vmods[inst.vmod].decl.objects[inst.class]
                        .method(&p.segments[1].name)
                        .is_some()
                } =>
            {
                Box::new(Diagnostic::error(
                    format!("Expected '(' got '{}'", self.after_token(p.span)),
                    p.span,
                ))
            }
            Some((Sym::Vmod(v), _))
                if p.segments.len() == 2
                    && self.vmods[v].decl.function(&p.segments[1].name).is_some() =>
            {
                Box::new(Diagnostic::error(
                    format!("Expected '(' got '{}'", self.after_token(p.span)),
                    p.span,
                ))
            }
            Some(_) => Box::new(Diagnostic::error("Symbol cannot be used here.", p.span)),
            None if p.is_simple() && is_builtin_func(&name) => {
                Box::new(Diagnostic::error("Symbol cannot be used here.", p.span))
            }
            None if !matches!(
                vars::lookup(&name, self.version, &self.opts.storages),
                VarLookup::NotFound
            ) =>
            {
                Box::new(Diagnostic::error("Symbol cannot be used here.", p.span))
            }
            None => Box::new(
                Diagnostic::error(format!("Symbol not found: '{name}'\nAt: "), p.span).ranged(),
            ),
        }
    }

    /// Resolves a `set`/`unset` target to a variable.
    /// `req.http."X-Foo"`: a header named by a quoted segment.
    fn quoted_header(&self, p: &ast::Path) -> Option<R<(&'static VarDef, String)>> {
        let (last, init) = p.segments.split_last()?;
        if !last.quoted || init.is_empty() {
            return None;
        }
        let family = format!(
            "{}.",
            init.iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(".")
        );
        let def = vars::VARIABLES
            .iter()
            .find(|d| d.name == family && d.versions.contains(self.version))?;
        if let Some(c) = last
            .name
            .chars()
            .find(|c| !c.is_ascii_graphic() || "()<>@,;:\\\"/[]?={}".contains(*c))
        {
            let shown = match c {
                '\n' => "\\n".to_string(),
                '\t' => "\\t".to_string(),
                '\r' => "\\r".to_string(),
                c => c.to_string(),
            };
            return Some(err(
                format!("Invalid character '{shown}' in header name."),
                last.span,
            ));
        }
        if last.name.is_empty() {
            return Some(err("Empty header name", last.span));
        }
        Some(Ok((def, last.name.clone())))
    }

    /// The header name `h` of variable `p` (`beresp.http.x`) as the
    /// program first spelled it.
    fn spelled(&self, p: &ast::Path, h: &str) -> String {
        let obj = p.segments[0].name.to_ascii_lowercase();
        match self.header_spellings.get(&(obj, h.to_ascii_lowercase())) {
            Some(first) => first.clone(),
            None => h.to_string(),
        }
    }

    fn lvalue(&mut self, target: &ast::Path) -> R<(&'static VarDef, VarRef)> {
        if let Some(r) = self.quoted_header(target) {
            let (d, h) = r?;
            return Ok((
                d,
                VarRef {
                    id: d.id,
                    arg: VarArg::Header(header_checked(&self.spelled(target, &h), target.span)?),
                },
            ));
        }
        let name = target.dotted();
        match vars::lookup(&name, self.version, &self.opts.storages) {
            VarLookup::Plain(d) => Ok((
                d,
                VarRef {
                    id: d.id,
                    arg: VarArg::None,
                },
            )),
            VarLookup::Header(d, h) => Ok((
                d,
                VarRef {
                    id: d.id,
                    arg: VarArg::Header(header_checked(&self.spelled(target, &h), target.span)?),
                },
            )),
            // Storage variables are read-only and, like vcc, not even
            // found as assignment targets.
            VarLookup::Storage(..) => {
                not_found(format!("Symbol not found: '{name}'\nAt: "), target.span)
            }
            VarLookup::WrongVersion(d) => not_found(
                format!(
                    "Symbol not found: '{name}' {}\nAt: ",
                    d.versions.availability()
                ),
                target.span,
            ),
            VarLookup::NotFound => {
                not_found(format!("Symbol not found: '{name}'\nAt: "), target.span)
            }
        }
    }

    fn set(
        &mut self,
        target: &ast::Path,
        op: AssignOp,
        op_span: Span,
        value: &ast::Expr,
    ) -> R<ir::Stmt> {
        let (def, var) = self.lvalue(target)?;
        if def.write.is_empty() {
            if def.read.is_empty() {
                return err("Variable cannot be set.", target.span);
            }
            // Reported per method: "Not available" where it cannot even be
            // read, "Variable is read only." elsewhere.
            self.add_use(target.span, def.read, UseKind::ReadOnly);
        } else {
            self.add_use(target.span, def.write, UseKind::Set);
        }
        let ty = def.ty;
        let (want, arith) = match (ty, op) {
            (_, AssignOp::Assign) => (
                match ty {
                    Type::Header | Type::Body => Type::String,
                    t => t,
                },
                None,
            ),
            (Type::String | Type::Header | Type::Body, AssignOp::Add) => {
                (Type::String, Some(ArithOp::Add))
            }
            (Type::Int, AssignOp::Add) => (Type::Int, Some(ArithOp::Add)),
            (Type::Int, AssignOp::Sub) => (Type::Int, Some(ArithOp::Sub)),
            (Type::Int, AssignOp::Mul) => (Type::Int, Some(ArithOp::Mul)),
            (Type::Int, AssignOp::Div) => (Type::Int, Some(ArithOp::Div)),
            (Type::Time | Type::Duration, AssignOp::Add) => (Type::Duration, Some(ArithOp::Add)),
            (Type::Time | Type::Duration, AssignOp::Sub) => (Type::Duration, Some(ArithOp::Sub)),
            (Type::Time | Type::Duration, AssignOp::Mul) => (Type::Real, Some(ArithOp::Mul)),
            (Type::Time | Type::Duration, AssignOp::Div) => (Type::Real, Some(ArithOp::Div)),
            _ => {
                return err(format!("Expected '=' got '{}'", op.as_str()), op_span);
            }
        };
        let value = if ty == Type::Body {
            // vcc evaluates a body in BODY context: no implicit string
            // concatenation (`INT + STRING not possible.`), but the result
            // is converted to a string.
            let x = self.expr(value, Type::Body)?;
            self.to_string(x, value.span)?
        } else {
            self.expr0(value, want)?
        };
        Ok(ir::Stmt::Set {
            var,
            op: arith,
            value,
        })
    }

    fn ret(&mut self, ra: &ast::ReturnAction) -> R<ir::Return> {
        let Some(action) = Action::from_name(&ra.name.name) else {
            return err(format!("Unknown action '{}'", ra.name.name), ra.name.span);
        };
        self.add_use(ra.name.span, SubMask::NONE, UseKind::Return(action));
        if action == Action::Vcl {
            let Some(label) = ra.args.first() else {
                return err("Expected '(' got ')'", ra.span);
            };
            let AK::Path(p) = &label.kind else {
                return err(
                    format!("Expected ID got '{}'", self.first_token(label.span)),
                    label.span,
                );
            };
            let name = p.dotted();
            if self.version == VclVersion::V40 {
                return not_found(format!("Symbol not found: '{name}'\nAt: "), p.span);
            }
            if !self.opts.labels.contains(&name) {
                if let Some((sym, def)) = self.syms.get(&name).copied() {
                    return Err(Box::new(
                        Diagnostic::error(
                            format!(
                                "Symbol '{name}' has wrong type ({}), expected vcl:",
                                sym.kind_name()
                            ),
                            p.span,
                        )
                        .with_note("Symbol was defined here:", Some(def)),
                    ));
                }
                return not_found(format!("Symbol not found: '{name}'\nAt: "), p.span);
            }
            let idx = match self.labels.iter().position(|l| *l == name) {
                Some(i) => i,
                None => {
                    self.labels.push(name);
                    self.labels.len() - 1
                }
            };
            return Ok(ir::Return::Vcl(idx));
        }
        let types: &[Type] = match action {
            Action::Synth | Action::Error => &[Type::Int, Type::String],
            Action::Pass => &[Type::Duration],
            Action::Fail => &[Type::String],
            _ => &[],
        };
        if ra.args.len() > types.len() {
            let extra = &ra.args[types.len()];
            return err(
                format!("Expected ')' got '{}'", self.first_token(extra.span)),
                extra.span,
            );
        }
        if action == Action::Synth && ra.args.is_empty() {
            return err("Missing argument.", ra.span);
        }
        let mut args = Vec::with_capacity(ra.args.len());
        for (a, t) in ra.args.iter().zip(types) {
            args.push(self.expr0(a, *t)?);
        }
        Ok(ir::Return::Action { action, args })
    }

    /// Resolves a reference to a subroutine (`call x`, SUB arguments).
    /// Undefined subs are recorded for later reporting.
    fn sub_ref(&mut self, id: &ast::Ident) -> R<Option<usize>> {
        if let Some(msg) = unusable_symbol(&id.name) {
            return err(msg, id.span);
        }
        match self.syms.get(&id.name).copied() {
            Some((Sym::Sub(i), _)) => {
                self.subs[i].referenced = true;
                Ok(Some(i))
            }
            Some((other, def)) if self.declared_later(&id.name) => {
                Err(Self::forward_kind_error(&id.name, other, def, "sub"))
            }
            Some((other, _)) => err(
                format!(
                    "Expression has type {}, expected SUB",
                    self.sym_type_name(other)
                ),
                id.span,
            ),
            None => {
                if id.name.starts_with("vcl_") {
                    return err("Symbols named 'vcl_*' are reserved.", id.span);
                }
                self.undefined_ref("sub", &id.name, id.span);
                Ok(None)
            }
        }
    }

    fn undefined_ref(&mut self, kind: &str, name: &str, span: Span) {
        let msg = format!("Undefined {kind} {name}, first reference:");
        if !self.undefined.iter().any(|d| d.message == msg) {
            self.undefined.push(Diagnostic::error(msg, span));
        }
    }

    fn sym_type_name(&self, s: Sym) -> String {
        match s {
            Sym::Sub(_) => "SUB".into(),
            Sym::Acl(_) => "ACL".into(),
            Sym::Backend(_) => "BACKEND".into(),
            Sym::Probe(_) => "PROBE".into(),
            Sym::Vmod(_) => "VMOD".into(),
            Sym::Instance(i) => {
                let inst = &self.instances[i];
                let v = &self.vmods[inst.vmod];
                format!("{}.{}", v.name, v.decl.objects[inst.class].name)
            }
        }
    }

    // ------------------------------------------------------------------
    // Expressions

    /// vcc_expr0: an expression of exactly type `fmt` (with the implicit
    /// string and boolean conversions Varnish applies).
    fn expr0(&mut self, e: &ast::Expr, fmt: Type) -> R<Expr> {
        let want = if fmt.is_stringish() {
            Type::String
        } else {
            fmt
        };
        let mut x = self.expr(e, want)?;
        if x.ty == fmt || (fmt.is_stringish() && x.ty.is_stringish()) {
            return Ok(x);
        }
        if fmt.is_stringish() {
            x = self.to_string(x, e.span)?;
            return Ok(x);
        }
        if fmt == Type::Bool {
            x = to_bool(x);
        }
        if x.ty != fmt {
            return err(
                format!(
                    "Expression has type {}, expected {}",
                    self.type_desc(&x),
                    fmt.user_name()
                ),
                e.span,
            );
        }
        Ok(x)
    }

    /// The type as vcc names it: object instances by their class
    /// (`directors.round_robin`), everything else by type name.
    fn type_desc(&self, x: &Expr) -> String {
        match x.kind {
            IK::Instance(i) => self.sym_type_name(Sym::Instance(i)),
            _ => x.ty.user_name().to_string(),
        }
    }

    fn to_string(&self, x: Expr, span: Span) -> R<Expr> {
        if x.ty.is_stringish() {
            return Ok(x);
        }
        if !x.ty.to_string_ok() {
            if x.ty == Type::Instance {
                return err(
                    format!("Cannot convert {} to STRING.", self.type_desc(&x)),
                    span,
                );
            }
            return err(x.ty.to_string_error(), span);
        }
        // Fold constant conversions where the text is unambiguous.
        if let IK::Const(v) = &x.kind {
            let folded = match v {
                Value::Int(i) => Some(i.to_string()),
                Value::Bool(b) => Some(b.to_string()),
                Value::Real(r) | Value::Duration(r) => Some(format!("{r:.3}")),
                Value::Bytes(b) => Some(format!("{}", *b as i64)),
                _ => None,
            };
            if let Some(s) = folded {
                return Ok(str_const(&s));
            }
        }
        Ok(Expr {
            ty: Type::String,
            kind: IK::ToString(Box::new(x)),
        })
    }

    /// Type-directed expression evaluation (vcc's expression levels).
    fn expr(&mut self, e: &ast::Expr, fmt: Type) -> R<Expr> {
        match &e.kind {
            AK::Paren(inner) => self.expr(inner, fmt),
            AK::Binary {
                op: op @ (BinaryOp::Or | BinaryOp::And),
                lhs,
                rhs,
                ..
            } => {
                let tok = op.as_str();
                let l = to_bool(self.expr(lhs, fmt)?);
                if l.ty != Type::Bool {
                    return err(
                        format!(
                            "'{tok}' must be preceeded by BOOL, found {}.",
                            l.ty.user_name()
                        ),
                        lhs.span,
                    );
                }
                let r = to_bool(self.expr(rhs, fmt)?);
                if r.ty != Type::Bool {
                    return err(
                        format!(
                            "'{tok}' must be followed by BOOL, found {}.",
                            r.ty.user_name()
                        ),
                        rhs.span,
                    );
                }
                let mut parts = Vec::new();
                let is_or = *op == BinaryOp::Or;
                for x in [l, r] {
                    match x.kind {
                        IK::Or(v) if is_or => parts.extend(v),
                        IK::And(v) if !is_or => parts.extend(v),
                        k => parts.push(Expr {
                            ty: Type::Bool,
                            kind: k,
                        }),
                    }
                }
                Ok(Expr {
                    ty: Type::Bool,
                    kind: if is_or { IK::Or(parts) } else { IK::And(parts) },
                })
            }
            AK::Unary {
                op: UnaryOp::Not,
                operand,
            } => {
                let x = to_bool(self.expr(operand, fmt)?);
                if x.ty != Type::Bool {
                    return err(
                        format!("'!' must be followed by BOOL, found {}.", x.ty.user_name()),
                        e.span,
                    );
                }
                if let IK::Const(Value::Bool(b)) = x.kind {
                    return Ok(bool_const(!b));
                }
                Ok(Expr {
                    ty: Type::Bool,
                    kind: IK::Not(Box::new(x)),
                })
            }
            AK::Binary {
                op,
                op_span,
                lhs,
                rhs,
            } => {
                if let Some(cop) = cmp_op(*op) {
                    self.comparison(cop, *op_span, lhs, rhs, fmt)
                } else {
                    self.arith(*op, *op_span, lhs, rhs, fmt)
                }
            }
            AK::Unary {
                op: UnaryOp::Neg,
                operand,
            } => {
                let sym = "-";
                if !matches!(fmt, Type::Int | Type::Real | Type::Duration | Type::String) {
                    return err(
                        format!("Unknown token '{sym}' when looking for {}", fmt.user_name()),
                        e.span,
                    );
                }
                let x = self.expr(operand, fmt)?;
                match x.kind {
                    IK::Const(Value::Int(i)) => Ok(Expr {
                        ty: x.ty,
                        kind: IK::Const(Value::Int(-i)),
                    }),
                    IK::Const(Value::Real(r)) => Ok(real_const(-r)),
                    IK::Const(Value::Duration(d)) => Ok(Expr {
                        ty: Type::Duration,
                        kind: IK::Const(Value::Duration(-d)),
                    }),
                    kind => {
                        let ty = x.ty;
                        if !matches!(ty, Type::Int | Type::Real | Type::Duration) {
                            return err(
                                format!("Operator - not possible on {}", ty.user_name()),
                                e.span,
                            );
                        }
                        Ok(Expr {
                            ty,
                            kind: IK::Neg(Box::new(Expr { ty, kind })),
                        })
                    }
                }
            }
            AK::Str(s) => self.string_lit(s, fmt),
            AK::Num { lit, unit } => self.number(lit, unit.as_ref(), fmt),
            AK::Blob(b) => Ok(Expr {
                ty: Type::Blob,
                kind: IK::Const(Value::Blob(Arc::from(b.bytes.as_slice()))),
            }),
            AK::Path(p) => self.path_expr(p, fmt),
            AK::Call { .. } => self.call(e, false),
            AK::Method { recv, name, args } => {
                let base = self.expr(recv, Type::Void)?;
                if let Some((a, _)) = args
                    && let Some(first) = a.first()
                {
                    return err(
                        format!("Expected ')' got '{}'", self.first_token(first.span)),
                        first.span,
                    );
                }
                self.type_method(base, name, args.is_some())
            }
        }
    }

    fn string_lit(&mut self, s: &ast::StrLit, fmt: Type) -> R<Expr> {
        match fmt {
            Type::Ip => {
                if s.value.starts_with('/') {
                    return err(
                        format!("Cannot convert to an IP address: '\"{}\"'", s.value),
                        s.span,
                    );
                }
                let addr = resolve_ip_constant(&s.value)
                    .map_err(|m| Box::new(Diagnostic::error(m, s.span)))?;
                Ok(Expr {
                    ty: Type::Ip,
                    kind: IK::Const(Value::Ip(addr)),
                })
            }
            Type::Regex => Err(Box::new(Diagnostic::error(
                "internal: regex literal outside a match",
                s.span,
            ))),
            _ => Ok(str_const(&s.value)),
        }
    }

    fn regex(&mut self, e: &ast::Expr) -> R<Arc<ir::VclRegex>> {
        // A regex is a string literal (or literals joined by `+`); any
        // other expression has the wrong type.
        if !Self::is_regex_literal(e) {
            let x = self.expr(e, Type::Regex)?;
            return err(
                format!("Expression has type {}, expected REGEX", x.ty.user_name()),
                e.span,
            );
        }
        let mut pattern = String::new();
        self.regex_text(e, &mut pattern)?;
        let re = ir::VclRegex::new(&pattern).map(Arc::new).map_err(|m| {
            Box::new(Diagnostic::error(
                format!("Regexp compilation error:\n\n{m}\n"),
                e.span,
            ))
        })?;
        self.regexes.push(re.clone());
        Ok(re)
    }

    /// Whether `e` is a regex written in place: a string literal, or
    /// literals joined by `+` (compiled with the VCL).
    fn is_regex_literal(e: &ast::Expr) -> bool {
        fn leftmost(e: &ast::Expr) -> &ast::Expr {
            match &e.kind {
                AK::Paren(inner) => leftmost(inner),
                AK::Binary { lhs, .. } => leftmost(lhs),
                _ => e,
            }
        }
        matches!(leftmost(e).kind, AK::Str(_))
    }

    /// A REGEX operand: a literal compiled now, or an expression of type
    /// REGEX (a vmod function returning one).
    fn regex_expr(&mut self, e: &ast::Expr) -> R<Expr> {
        if Self::is_regex_literal(e) {
            let re = self.regex(e)?;
            return Ok(Expr {
                ty: Type::Regex,
                kind: IK::Regex(re),
            });
        }
        self.expr_of_type(e, Type::Regex)
    }

    /// An expression that must have type `ty` exactly (a REGEX or ACL
    /// given as a value, e.g. a vmod function returning one).
    fn expr_of_type(&mut self, e: &ast::Expr, ty: Type) -> R<Expr> {
        let x = self.expr(e, ty)?;
        if x.ty != ty {
            return err(
                format!(
                    "Expression has type {}, expected {}",
                    x.ty.user_name(),
                    ty.user_name()
                ),
                e.span,
            );
        }
        Ok(x)
    }

    /// A regex must be a constant string, possibly `"a" + "b"`.
    fn regex_text(&self, e: &ast::Expr, out: &mut String) -> R<()> {
        match &e.kind {
            AK::Paren(inner) => self.regex_text(inner, out),
            AK::Str(s) => {
                out.push_str(&s.value);
                Ok(())
            }
            AK::Binary {
                op: BinaryOp::Add,
                lhs,
                rhs,
                ..
            } => {
                self.regex_text(lhs, out)?;
                self.regex_text(rhs, out)
            }
            AK::Binary {
                op, op_span, lhs, ..
            } if matches!(&lhs.kind, AK::Str(_)) => {
                err(format!("Expected ')' got '{}'", op.as_str()), *op_span)
            }
            _ => err(
                format!("Expected CSTR got '{}'", self.first_token(e.span)),
                e.span,
            ),
        }
    }

    fn number(&mut self, lit: &ast::NumLit, unit: Option<&ast::Ident>, fmt: Type) -> R<Expr> {
        if fmt == Type::Bytes {
            let Some(u) = unit else {
                // vcc reads the number, then wants a unit token after it.
                return err(
                    format!(
                        "Expected BYTES unit (B, KB, MB...) got '{}'",
                        self.after_token(lit.span)
                    ),
                    lit.span,
                );
            };
            // VNUM_bytes_unit: b, k, m, g, t, p (any case), optionally
            // followed by "b".
            let un = u.name.to_ascii_lowercase();
            let un = if un.len() == 2 {
                un.strip_suffix('b').unwrap_or("?")
            } else {
                &un
            };
            let mult: f64 = match un {
                "b" => 1.0,
                "k" => 1024.0,
                "m" => 1024.0 * 1024.0,
                "g" => 1024.0 * 1024.0 * 1024.0,
                "t" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
                "p" => 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
                _ => {
                    return err(
                        format!("Unknown BYTES unit of measurement ([KMGTP][B])'{}'", u.name),
                        u.span,
                    );
                }
            };
            return Ok(Expr {
                ty: Type::Bytes,
                kind: IK::Const(Value::Bytes(lit.value * mult)),
            });
        }
        if let Some(u) = unit {
            let mult = match u.name.as_str() {
                "ms" => 1e-3,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                "d" => 86400.0,
                "w" => 604800.0,
                "y" => 31536000.0,
                _ => {
                    return err(
                        format!(
                            "Unknown duration unit '{}'\nLegal are 'ms', 's', 'm', 'h', 'd', 'w' and 'y'",
                            u.name
                        ),
                        u.span,
                    );
                }
            };
            return Ok(Expr {
                ty: Type::Duration,
                kind: IK::Const(Value::Duration(lit.value * mult)),
            });
        }
        if fmt == Type::Real || !lit.is_int {
            return Ok(real_const(lit.value));
        }
        let Ok(i) = lit.text.parse::<i64>() else {
            return err("Too many digits for integer.", lit.span);
        };
        Ok(Expr {
            ty: Type::Int,
            kind: IK::Const(Value::Int(i)),
        })
    }

    fn comparison(
        &mut self,
        op: CmpOp,
        op_span: Span,
        lhs: &ast::Expr,
        rhs: &ast::Expr,
        fmt: Type,
    ) -> R<Expr> {
        let l = self.expr(lhs, fmt)?;
        // vcc types an object by its class, which has no comparison.
        if let IK::Instance(i) = l.kind {
            let inst = &self.instances[i];
            let vmod = &self.vmods[inst.vmod];
            return err(
                format!(
                    "Operator {} not possible on {}.{}",
                    op.symbol(),
                    vmod.name,
                    vmod.decl.objects[inst.class].name
                ),
                op_span,
            );
        }
        let Some(kind) = l.ty.comparison(op) else {
            return err(
                format!(
                    "Operator {} not possible on {}",
                    op.symbol(),
                    l.ty.user_name()
                ),
                op_span,
            );
        };
        match kind {
            CmpKind::Simple => {
                let r = self.expr(rhs, l.ty)?;
                if r.ty != l.ty {
                    return err(
                        format!(
                            "Comparison of different types: {} '{}' {}",
                            l.ty.user_name(),
                            op.symbol(),
                            r.ty.user_name()
                        ),
                        op_span,
                    );
                }
                Ok(Expr {
                    ty: Type::Bool,
                    kind: IK::Cmp {
                        op,
                        lhs: Box::new(l),
                        rhs: Box::new(r),
                    },
                })
            }
            CmpKind::String => {
                let r = self.expr(rhs, Type::String)?;
                if !r.ty.is_stringish() {
                    return err(
                        format!(
                            "Comparison of different types: {} '{}' {}",
                            l.ty.user_name(),
                            op.symbol(),
                            r.ty.user_name()
                        ),
                        op_span,
                    );
                }
                if let (IK::Const(Value::Str(a)), IK::Const(Value::Str(b))) = (&l.kind, &r.kind) {
                    let ord = a.as_bytes().cmp(b.as_bytes());
                    return Ok(bool_const(cmp_holds(op, ord)));
                }
                Ok(Expr {
                    ty: Type::Bool,
                    kind: IK::Cmp {
                        op,
                        lhs: Box::new(l),
                        rhs: Box::new(r),
                    },
                })
            }
            CmpKind::Regex if !Self::is_regex_literal(rhs) => {
                let regex = self.regex_expr(rhs)?;
                Ok(Expr {
                    ty: Type::Bool,
                    kind: IK::RegexMatchDyn {
                        subject: Box::new(l),
                        regex: Box::new(regex),
                        negate: op == CmpOp::NoMatch,
                    },
                })
            }
            CmpKind::Regex => {
                let regex = self.regex(rhs)?;
                Ok(Expr {
                    ty: Type::Bool,
                    kind: IK::RegexMatch {
                        subject: Box::new(l),
                        regex,
                        negate: op == CmpOp::NoMatch,
                    },
                })
            }
            CmpKind::Acl if !matches!(rhs.kind, AK::Path(_)) => {
                let acl = self.acl_expr(rhs)?;
                Ok(Expr {
                    ty: Type::Bool,
                    kind: IK::AclMatchDyn {
                        ip: Box::new(l),
                        acl: Box::new(acl),
                        negate: op == CmpOp::NoMatch,
                    },
                })
            }
            CmpKind::Acl => {
                let acl = self.acl_ref(rhs)?;
                Ok(Expr {
                    ty: Type::Bool,
                    kind: IK::AclMatch {
                        ip: Box::new(l),
                        acl: acl.unwrap_or(usize::MAX),
                        negate: op == CmpOp::NoMatch,
                    },
                })
            }
        }
    }

    /// An ACL given as an expression rather than by name: it must have
    /// type ACL (a vmod function or method returning one).
    fn acl_expr(&mut self, e: &ast::Expr) -> R<Expr> {
        self.expr_of_type(e, Type::Acl)
    }

    /// The ACL named on the right of `ip ~ acl`.
    fn acl_ref(&mut self, rhs: &ast::Expr) -> R<Option<usize>> {
        let AK::Path(p) = &rhs.kind else {
            let x = self.expr(rhs, Type::Acl)?;
            return err(
                format!("Expression has type {}, expected ACL", x.ty.user_name()),
                rhs.span,
            );
        };
        let name = p.dotted();
        match name.as_str() {
            "default" => return err("Symbol 'default' is a reserved word.", p.span),
            n if let Some(msg) = unusable_symbol(n) => return err(msg, p.span),
            "true" | "false" => {
                return err("Expression has type BOOL, expected ACL", p.span);
            }
            _ => {}
        }
        match self.syms.get(&name).copied() {
            Some((Sym::Acl(i), _)) => {
                self.acls[i].2 = true;
                Ok(Some(i))
            }
            Some((s @ Sym::Instance(_), _)) => err(
                format!(
                    "Expression has type {}, expected ACL",
                    self.sym_type_name(s)
                ),
                p.span,
            ),
            // vcc creates the ACL symbol at this reference; a later
            // definition of another kind then conflicts with it.
            Some((s, def)) if self.declared_later(&name) => {
                Err(Self::forward_kind_error(&name, s, def, "acl"))
            }
            Some((Sym::Sub(_), _)) => err(
                format!("Symbol '{name}' can only be used as a SUB expression"),
                p.span,
            ),
            Some((s, _)) => err(
                format!(
                    "Expression has type {}, expected ACL",
                    self.sym_type_name(s)
                ),
                p.span,
            ),
            None => {
                if name.starts_with("vcl_") {
                    return err("Symbols named 'vcl_*' are reserved.", p.span);
                }
                if !matches!(
                    vars::lookup(&name, self.version, &self.opts.storages),
                    VarLookup::NotFound
                ) {
                    let x = self.path_expr(p, Type::Acl)?;
                    return err(
                        format!("Expression has type {}, expected ACL", x.ty.user_name()),
                        p.span,
                    );
                }
                self.undefined_ref("acl", &name, p.span);
                Ok(None)
            }
        }
    }

    fn arith(
        &mut self,
        op: BinaryOp,
        op_span: Span,
        lhs: &ast::Expr,
        rhs: &ast::Expr,
        fmt: Type,
    ) -> R<Expr> {
        let aop = match op {
            BinaryOp::Add => ArithOp::Add,
            BinaryOp::Sub => ArithOp::Sub,
            BinaryOp::Mul => ArithOp::Mul,
            BinaryOp::Div => ArithOp::Div,
            _ => ArithOp::Mod,
        };
        let l = self.expr(lhs, fmt)?;
        match aop {
            ArithOp::Mul | ArithOp::Div => {
                let Some(f2) = l.ty.mul_type() else {
                    return err(
                        format!(
                            "Operator {} not possible on type {}.",
                            aop.symbol(),
                            l.ty.user_name()
                        ),
                        op_span,
                    );
                };
                let r = self.expr(rhs, f2)?;
                if r.ty != Type::Int && r.ty != f2 {
                    return err(
                        format!(
                            "{} {} {} not possible.",
                            l.ty.user_name(),
                            aop.symbol(),
                            r.ty.user_name()
                        ),
                        op_span,
                    );
                }
                Ok(fold_arith(aop, l.ty, l, r))
            }
            ArithOp::Mod => {
                if l.ty != Type::Int {
                    return err("Operator % only possible on INT.", op_span);
                }
                let r = self.expr(rhs, Type::Int)?;
                if r.ty != Type::Int {
                    return err(format!("INT % {} not possible.", r.ty.user_name()), op_span);
                }
                Ok(fold_arith(aop, Type::Int, l, r))
            }
            ArithOp::Add | ArithOp::Sub => {
                let rfmt = if !has_add_entry(aop, l.ty) && fmt == Type::String {
                    Type::String
                } else {
                    l.ty
                };
                let r = self.expr(rhs, rfmt)?;
                if let Some(t) = add_result(aop, l.ty, r.ty) {
                    return Ok(fold_arith(aop, t, l, r));
                }
                if aop == ArithOp::Add && (l.ty.is_stringish() || fmt == Type::String) {
                    let l = self.to_string(l, lhs.span)?;
                    let r = self.to_string(r, rhs.span)?;
                    return Ok(concat(l, r));
                }
                err(
                    format!(
                        "{} {} {} not possible.",
                        l.ty.user_name(),
                        aop.symbol(),
                        r.ty.user_name()
                    ),
                    op_span,
                )
            }
        }
    }

    /// A name in expression context.
    fn path_expr(&mut self, p: &ast::Path, fmt: Type) -> R<Expr> {
        let name = p.dotted();
        if p.is_simple() {
            match name.to_ascii_lowercase().as_str() {
                "true" => return Ok(bool_const(true)),
                "false" => return Ok(bool_const(false)),
                "default" => {
                    return match fmt {
                        Type::Backend => Ok(Expr {
                            ty: Type::Backend,
                            kind: IK::DefaultBackend,
                        }),
                        Type::Probe => {
                            match self.probes.iter().rposition(|p| p.0.name == "default") {
                                Some(i) => Ok(Expr {
                                    ty: Type::Probe,
                                    kind: IK::Probe(i),
                                }),
                                None => err("Symbol 'default' is a reserved word.", p.span),
                            }
                        }
                        _ => err("Symbol 'default' is a reserved word.", p.span),
                    };
                }
                _ => {}
            }
            if let Some((sym, def)) = self.syms.get(&name).copied() {
                if self.declared_later(&name) {
                    let want = match fmt {
                        Type::Acl => "acl",
                        Type::Backend => "backend",
                        Type::Probe => "probe",
                        Type::Sub => "sub",
                        _ => {
                            return not_found(format!("Symbol not found: '{name}'\nAt: "), p.span);
                        }
                    };
                    if self.sym_type_name(sym).eq_ignore_ascii_case(want) {
                        return self.sym_expr(sym, p, fmt);
                    }
                    return Err(Self::forward_kind_error(&name, sym, def, want));
                }
                return self.sym_expr(sym, p, fmt);
            }
            if let Some(msg) = unusable_symbol(&name) {
                return err(msg, p.span);
            }
        }
        if let Some(r) = self.quoted_header(p) {
            let (d, h) = r?;
            return Ok(self.var_read(
                d,
                VarArg::Header(header_checked(&self.spelled(p, &h), p.span)?),
                p.segments[0].span,
                fmt,
            ));
        }
        // Variables, possibly followed by a property (`req.foo`).
        match vars::lookup(&name, self.version, &self.opts.storages) {
            VarLookup::Plain(d) => {
                return Ok(self.var_read(d, VarArg::None, p.segments[0].span, fmt));
            }
            VarLookup::Header(d, h) => {
                return Ok(self.var_read(
                    d,
                    VarArg::Header(header_checked(&self.spelled(p, &h), p.span)?),
                    p.segments[0].span,
                    fmt,
                ));
            }
            VarLookup::Storage(d, s) => {
                return Ok(self.var_read(
                    d,
                    VarArg::Storage(Arc::from(s.as_str())),
                    p.segments[0].span,
                    fmt,
                ));
            }
            VarLookup::WrongVersion(d) => {
                // A shorter variable that exists in this version wins:
                // `beresp.backend.ip` in 4.1 is a property of BACKEND.
                let prefix = (1..p.segments.len()).rev().find_map(|cut| {
                    let pre: Vec<&str> =
                        p.segments[..cut].iter().map(|s| s.name.as_str()).collect();
                    match vars::lookup(&pre.join("."), self.version, &self.opts.storages) {
                        VarLookup::Plain(pd) => Some((cut, pd)),
                        _ => None,
                    }
                });
                if let Some((cut, pd)) = prefix {
                    let prop = &p.segments[cut];
                    return err(
                        format!("Unknown property '{}' for type {}", prop.name, pd.ty.name()),
                        prop.span,
                    );
                } else {
                    return not_found(
                        format!(
                            "Symbol not found: '{name}' {}\nAt: ",
                            d.versions.availability()
                        ),
                        p.span,
                    );
                }
            }
            VarLookup::NotFound => {}
        }
        if let Some(st) = name.strip_prefix("storage.") {
            if self.opts.storages.iter().any(|s| s == st) {
                return Ok(Expr {
                    ty: Type::Stevedore,
                    kind: IK::Stevedore(Arc::from(st)),
                });
            }
            // `storage.<known>.<nope>`: a property the STEVEDORE lacks.
            if p.segments.len() > 2 && self.opts.storages.iter().any(|s| *s == p.segments[1].name) {
                let prop = &p.segments[2];
                return err(
                    format!("Unknown property '{}' for type STEVEDORE", prop.name),
                    prop.span,
                );
            }
            return not_found(format!("Symbol not found: '{name}'\nAt: "), p.span);
        }
        // Longest known prefix, then properties.
        for cut in (1..p.segments.len()).rev() {
            let prefix = ast::Path {
                segments: p.segments[..cut].to_vec(),
                span: p.segments[0].span.to(p.segments[cut - 1].span),
            };
            let pname = prefix.dotted();
            let known =
                matches!(
                    vars::lookup(&pname, self.version, &self.opts.storages),
                    // `req.http.x.y`: header `x`, then a property of it.
                    VarLookup::Plain(_) | VarLookup::Header(..)
                ) || (cut == 1 && self.syms.contains_key(&pname) && !self.declared_later(&pname));
            if known {
                if let Some((Sym::Vmod(_), _)) = self.sym_now(&pname) {
                    return not_found(format!("Symbol not found: '{name}'\nAt: "), p.span);
                }
                let base = self.path_expr(&prefix, Type::Void)?;
                let prop = &p.segments[cut];
                // A method named without its parentheses (`req.url.lower`).
                if cut + 1 == p.segments.len() && type_method_of(base.ty, &prop.name).is_some() {
                    return err(
                        format!("Expected '(' got '{}'", self.after_token(p.span)),
                        prop.span,
                    );
                }
                return err(
                    format!(
                        "Unknown property '{}' for type {}",
                        prop.name,
                        property_type_name(base.ty)
                    ),
                    prop.span,
                );
            }
        }
        if p.is_simple() && fmt == Type::Backend {
            self.undefined_ref("backend", &name, p.span);
            return Ok(Expr {
                ty: Type::Backend,
                kind: IK::DefaultBackend,
            });
        }
        not_found(format!("Symbol not found: '{name}'\nAt: "), p.span)
    }

    fn sym_expr(&mut self, sym: Sym, p: &ast::Path, fmt: Type) -> R<Expr> {
        // Objects without a string form read as their name in string
        // context (vcc_Eval_Handle).
        if fmt == Type::String {
            match sym {
                Sym::Acl(i) => {
                    self.acls[i].2 = true;
                    return Ok(str_const(&p.dotted()));
                }
                Sym::Probe(i) => {
                    self.probes[i].2 = true;
                    return Ok(str_const(&p.dotted()));
                }
                _ => {}
            }
        }
        Ok(match sym {
            Sym::Backend(i) => {
                self.backends[i].2 = true;
                Expr {
                    ty: Type::Backend,
                    kind: IK::Backend(i),
                }
            }
            Sym::Probe(i) => {
                self.probes[i].2 = true;
                Expr {
                    ty: Type::Probe,
                    kind: IK::Probe(i),
                }
            }
            Sym::Acl(i) => {
                self.acls[i].2 = true;
                Expr {
                    ty: Type::Acl,
                    kind: IK::Acl(i),
                }
            }
            Sym::Sub(i) => {
                if fmt != Type::Sub {
                    return err(
                        format!(
                            "Symbol '{}' can only be used as a SUB expression",
                            p.dotted()
                        ),
                        p.span,
                    );
                }
                self.subs[i].referenced = true;
                Expr {
                    ty: Type::Sub,
                    kind: IK::Sub(i),
                }
            }
            Sym::Instance(i) => Expr {
                ty: Type::Instance,
                kind: IK::Instance(i),
            },
            Sym::Vmod(_) => {
                return err(
                    format!(
                        "Symbol '{}' type (vmod) can not be used in expression.",
                        p.dotted()
                    ),
                    p.span,
                );
            }
        })
    }

    fn var_read(&mut self, d: &'static VarDef, arg: VarArg, span: Span, fmt: Type) -> Expr {
        self.add_use(span, d.read, UseKind::Read);
        let ty = match d.ty {
            Type::Header if fmt != Type::Header => Type::String,
            t => t,
        };
        Expr {
            ty,
            kind: IK::Var(VarRef { id: d.id, arg }),
        }
    }

    /// A call: regsub, vmod function, object method or type method.
    fn call(&mut self, e: &ast::Expr, as_stmt: bool) -> R<Expr> {
        let AK::Call {
            callee,
            args,
            args_span,
        } = &e.kind
        else {
            unreachable!("call() on a non-call expression");
        };
        let segs = &callee.segments;
        let name = callee.dotted().to_ascii_lowercase();
        if callee.is_simple() && (name == "regsub" || name == "regsuball") {
            if args.len() != 3 || args.iter().any(|a| a.name.is_some()) {
                return err(
                    format!("Expected 3 arguments to {name}(STRING, REGEX, STRING)"),
                    *args_span,
                );
            }
            let subject = self.expr0(&args[0].value, Type::String)?;
            if !Self::is_regex_literal(&args[1].value) {
                let regex = self.regex_expr(&args[1].value)?;
                let replacement = self.expr0(&args[2].value, Type::String)?;
                return Ok(Expr {
                    ty: Type::String,
                    kind: IK::RegsubDyn {
                        all: name == "regsuball",
                        subject: Box::new(subject),
                        regex: Box::new(regex),
                        replacement: Box::new(replacement),
                    },
                });
            }
            let regex = self.regex(&args[1].value)?;
            let replacement = self.expr0(&args[2].value, Type::String)?;
            let template = match &replacement.kind {
                IK::Const(Value::Str(s)) => Some(ir::SubstTemplate::parse(s)),
                _ => None,
            };
            return Ok(Expr {
                ty: Type::String,
                kind: IK::Regsub {
                    all: name == "regsuball",
                    subject: Box::new(subject),
                    regex,
                    template,
                    replacement: Box::new(replacement),
                },
            });
        }
        if segs.len() == 2 {
            match self.sym_now(&segs[0].name) {
                Some((Sym::Vmod(v), _)) => {
                    let decl = self.vmods[v].decl.clone();
                    let Some((fi, f)) = decl.function(&segs[1].name) else {
                        return not_found(format!("Symbol not found: '{name}'\nAt: "), callee.span);
                    };
                    if f.ret == Type::Void && !as_stmt {
                        return err("Function returns VOID:", callee.span);
                    }
                    if let Some(mask) = f.restrict {
                        self.add_use(callee.span, mask, UseKind::Read);
                    }
                    let args = self.call_args(f, args, *args_span)?;
                    return Ok(Expr {
                        ty: ret_type(f.ret),
                        kind: IK::VmodCall {
                            vmod: v,
                            func: fi,
                            args,
                        },
                    });
                }
                Some((Sym::Instance(i), _)) => {
                    let inst = self.instances[i].clone();
                    let decl = self.vmods[inst.vmod].decl.clone();
                    let class = &decl.objects[inst.class];
                    let Some((mi, m)) = class.method(&segs[1].name) else {
                        return err(
                            format!(
                                "Unknown property '{}' for type {}.{}",
                                segs[1].name, self.vmods[inst.vmod].name, class.name
                            ),
                            segs[1].span,
                        );
                    };
                    if m.ret == Type::Void && !as_stmt {
                        return err("Function returns VOID:", callee.span);
                    }
                    if let Some(mask) = m.restrict {
                        self.add_use(callee.span, mask, UseKind::Read);
                    }
                    let args = self.call_args(m, args, *args_span)?;
                    return Ok(Expr {
                        ty: ret_type(m.ret),
                        kind: IK::MethodCall {
                            instance: i,
                            method: mi,
                            args,
                        },
                    });
                }
                _ => {}
            }
        }
        if segs.len() >= 3
            && let Some((Sym::Vmod(v), _)) = self.sym_now(&segs[0].name)
            && self.vmods[v].decl.object(&segs[1].name).is_some()
        {
            return err("Syntax error.", callee.span);
        }
        if segs.len() >= 2 {
            // Type method on a value: `req.http.host.lower()`.
            let prefix = ast::Path {
                segments: segs[..segs.len() - 1].to_vec(),
                span: segs[0].span.to(segs[segs.len() - 2].span),
            };
            let base_known = !matches!(
                vars::lookup(&prefix.dotted(), self.version, &self.opts.storages),
                VarLookup::NotFound
            ) || self.sym_now(&prefix.dotted()).is_some();
            if base_known {
                let base = self.path_expr(&prefix, Type::Void)?;
                let mname = &segs[segs.len() - 1];
                if let Some(a) = args.first() {
                    return err(
                        format!("Expected ')' got '{}'", self.first_token(a.span)),
                        a.span,
                    );
                }
                let id = ast::Ident {
                    name: mname.name.clone(),
                    span: mname.span,
                };
                return self.type_method(base, &id, true);
            }
        }
        if callee.is_simple()
            && let Some((sym, _)) = self.syms.get(&name).copied()
        {
            return err(
                format!(
                    "Symbol '{name}' type ({}) can not be used in expression.",
                    sym.kind_name()
                ),
                callee.span,
            );
        }
        not_found(format!("Symbol not found: '{name}'\nAt: "), callee.span)
    }

    /// `.upper()`, `.lower()` on strings, `.resolve()` on backends.
    fn type_method(&mut self, base: Expr, name: &ast::Ident, called: bool) -> R<Expr> {
        let Some(method) = type_method_of(base.ty, &name.name) else {
            return err(
                format!(
                    "Unknown property '{}' for type {}",
                    name.name,
                    property_type_name(base.ty)
                ),
                name.span,
            );
        };
        if !called {
            return err("Expected '(' got '.'", name.span);
        }
        let ty = if method == ir::TypeMethod::Resolve {
            Type::Backend
        } else {
            Type::String
        };
        Ok(Expr {
            ty,
            kind: IK::TypeMethod {
                method,
                operand: Box::new(base),
            },
        })
    }

    /// Matches call arguments to a declaration (vcc_func).
    fn call_args(&mut self, f: &FuncDecl, args: &[ast::Arg], args_span: Span) -> R<Vec<CallArg>> {
        let mut slots: Vec<Option<CallArg>> = f
            .args
            .iter()
            .map(|a| match a.ty {
                ArgType::Priv(k) => Some(CallArg::Priv(k)),
                _ => None,
            })
            .collect();
        let mut next = 0usize;
        let mut seen_named = false;
        for a in args {
            let idx = match &a.name {
                None => {
                    while next < slots.len() && slots[next].is_some() {
                        next += 1;
                    }
                    if seen_named || next >= slots.len() {
                        // vcc reads the arguments left as `name = value`:
                        // a name there must be a declared argument.
                        if let AK::Path(p) = &a.value.kind {
                            let n = p.dotted();
                            let known = f.args.iter().any(|d| {
                                d.name.as_deref() == Some(n.as_str())
                                    && !matches!(d.ty, ArgType::Priv(_))
                            });
                            if !known {
                                return err(format!("Unknown argument '{n}'"), p.span);
                            }
                            return err(
                                format!("Expected '=' got '{}'", self.after_token(p.span)),
                                p.span,
                            );
                        }
                        return err(
                            format!("Expected ')' got '{}'", self.first_token(a.span)),
                            a.span,
                        );
                    }
                    next
                }
                Some(n) => {
                    seen_named = true;
                    let Some(i) = f.args.iter().position(|d| {
                        d.name.as_deref() == Some(n.name.as_str())
                            && !matches!(d.ty, ArgType::Priv(_))
                    }) else {
                        return err(format!("Unknown argument '{}'", n.name), n.span);
                    };
                    if slots[i].is_some() {
                        return err(format!("Argument '{}' already used", n.name), n.span);
                    }
                    i
                }
            };
            let decl = &f.args[idx];
            let value = match &decl.ty {
                ArgType::Enum(values) => {
                    // vcc reads one ID token (dotted names are one token)
                    // and compares it with the values, whatever follows.
                    let first = self.first_token(a.value.span);
                    let v = match &a.value.kind {
                        AK::Path(p) if p.is_simple() => p.dotted(),
                        _ if first.starts_with(|c: char| c.is_ascii_alphabetic())
                            && !values.contains(&first) =>
                        {
                            first
                        }
                        _ => {
                            return err(format!("Expected ID got '{first}'"), a.value.span);
                        }
                    };
                    if !values.contains(&v) {
                        let mut msg = String::from("Wrong enum value.  Expected one of:\n");
                        for x in values {
                            msg.push('\t');
                            msg.push_str(x);
                            msg.push('\n');
                        }
                        return err(msg.trim_end().to_string(), a.value.span);
                    }
                    CallArg::Enum(Arc::from(v.as_str()))
                }
                ArgType::Value(t) => {
                    let mut x = self.arg_value(&a.value, *t)?;
                    // A concatenation given for STRANDS keeps its parts.
                    if *t == Type::Strands && matches!(x.kind, IK::Concat(_)) {
                        x.ty = Type::Strands;
                    }
                    CallArg::Value(x)
                }
                ArgType::Priv(_) => unreachable!("priv slots are pre-filled"),
            };
            slots[idx] = Some(value);
        }
        let mut out = Vec::with_capacity(slots.len());
        for (i, (slot, decl)) in slots.into_iter().zip(&f.args).enumerate() {
            out.push(match slot {
                Some(v) => v,
                None => match (&decl.default, &decl.ty) {
                    (Some(DefaultValue::Enum(v)), _) => CallArg::Enum(Arc::from(v.as_str())),
                    (Some(d), ArgType::Value(t)) => CallArg::Value(default_expr(d, *t)),
                    _ if decl.optional => CallArg::Absent,
                    _ => {
                        let msg = match &decl.name {
                            Some(n) => format!("Argument '{n}' missing"),
                            None => format!("Argument {} missing", i + 1),
                        };
                        return err(msg, args_span);
                    }
                },
            });
        }
        Ok(out)
    }

    fn arg_value(&mut self, e: &ast::Expr, t: Type) -> R<Expr> {
        match t {
            Type::Sub => {
                let AK::Path(p) = &e.kind else {
                    let x = self.expr(e, Type::Sub)?;
                    return err(
                        format!("Expression has type {}, expected SUB", x.ty.user_name()),
                        e.span,
                    );
                };
                if p.is_simple() {
                    let id = ast::Ident {
                        name: p.dotted(),
                        span: p.span,
                    };
                    return Ok(match self.sub_ref(&id)? {
                        Some(i) => Expr {
                            ty: Type::Sub,
                            kind: IK::Sub(i),
                        },
                        None => Expr {
                            ty: Type::Sub,
                            kind: IK::Sub(usize::MAX),
                        },
                    });
                }
                self.expr0(e, Type::Sub)
            }
            Type::Acl if !matches!(e.kind, AK::Path(_)) => self.acl_expr(e),
            Type::Acl => {
                let acl = self.acl_ref(e)?;
                Ok(Expr {
                    ty: Type::Acl,
                    kind: IK::Acl(acl.unwrap_or(usize::MAX)),
                })
            }
            Type::Header => {
                let x = self.expr(e, Type::Header)?;
                if x.ty != Type::Header {
                    return err(
                        format!("Expression has type {}, expected HEADER", x.ty.user_name()),
                        e.span,
                    );
                }
                Ok(x)
            }
            Type::Instance => self.expr(e, Type::Instance),
            Type::Regex => self.regex_expr(e),
            t => self.expr0(e, t),
        }
    }

    // ------------------------------------------------------------------
    // Whole-program checks

    fn check_recursion(&self) -> R<()> {
        // 0 = unvisited, 1 = on stack, 2 = done.
        let mut state = vec![0u8; self.subs.len()];
        let mut stack: Vec<(usize, Span)> = Vec::new();
        for start in 0..self.subs.len() {
            if state[start] == 0 {
                self.recurse(start, &mut state, &mut stack)?;
            }
        }
        Ok(())
    }

    fn recurse(&self, s: usize, state: &mut [u8], stack: &mut Vec<(usize, Span)>) -> R<()> {
        state[s] = 1;
        for &(callee, site) in &self.subs[s].calls {
            if state[callee] == 1 {
                let mut d = Diagnostic::error("Subroutine recurses on", self.subs[callee].def);
                let from = stack
                    .iter()
                    .position(|(x, _)| *x == callee)
                    .unwrap_or(stack.len());
                let mut chain: Vec<(usize, Span)> = stack[from..].to_vec();
                chain.push((s, site));
                for (caller, call_site) in chain.into_iter().rev() {
                    d = d.with_note(
                        format!("\n...called from \"{}\"", self.subs[caller].name),
                        Some(call_site),
                    );
                }
                return Err(Box::new(d));
            }
            if state[callee] == 0 {
                stack.push((s, site));
                self.recurse(callee, state, stack)?;
                stack.pop();
            }
        }
        state[s] = 2;
        Ok(())
    }

    /// Unused objects are errors, or warnings (`self.warnings`) when
    /// `err_unref` is off.
    fn check_unused(&mut self) -> R<()> {
        if !self.opts.err_unref {
            // Unused subs are kept, but must be usable from some method.
            for s in self.subs.iter().filter(|s| !s.referenced) {
                let mut mask = SubMask::ALL;
                for u in &s.uses {
                    if matches!(
                        u.what,
                        UseKind::Read | UseKind::Set | UseKind::Unset | UseKind::Action
                    ) {
                        mask = mask.intersect(u.allowed);
                        if mask.is_empty() {
                            return Err(Box::new(
                                Diagnostic::error("Impossible Subroutine", s.def).where_inline(),
                            ));
                        }
                    }
                }
            }
        }
        // Like vcc, report the unused object whose name sorts first.
        let mut unused: Vec<(&str, &str, Span)> = Vec::new();
        unused.extend(
            self.subs
                .iter()
                .filter(|s| !s.referenced)
                .map(|s| (s.name.as_str(), "sub", s.def)),
        );
        unused.extend(
            self.acls
                .iter()
                .filter(|x| !x.2)
                .map(|x| (x.0.name.as_str(), "acl", x.1)),
        );
        unused.extend(
            self.backends
                .iter()
                .filter(|x| !x.2)
                .map(|x| (x.0.name.as_str(), "backend", x.1)),
        );
        unused.extend(
            self.probes
                .iter()
                // vcc counts a `probe default` as referenced where it is
                // defined: never unused, even when replaced by a later one.
                .filter(|x| !x.2 && x.0.name != "default")
                .map(|x| (x.0.name.as_str(), "probe", x.1)),
        );
        unused.sort_by_key(|u| u.0);
        let diags: Vec<Diagnostic> = unused
            .into_iter()
            .map(|(name, what, span)| {
                let msg = format!("Unused {what} {name}, defined:");
                if self.opts.err_unref {
                    Diagnostic::error(msg, span)
                } else {
                    Diagnostic::warning(msg, span)
                }
            })
            .collect();
        if self.opts.err_unref {
            if let Some(first) = diags.into_iter().next() {
                return Err(Box::new(first));
            }
        } else {
            self.warnings = diags;
        }
        Ok(())
    }

    /// The built-in methods each subroutine may run in (vcc's `okmask`):
    /// where everything it and the subroutines it calls use is available.
    /// A dynamic call (`VRT_call`) is refused from anywhere else. A
    /// subroutine that fits nowhere is an error, as in vcc (the ones
    /// reached from a method were reported more precisely already).
    fn okmasks(&self) -> R<Vec<SubMask>> {
        fn mask_of(subs: &[SubInfo], s: usize, memo: &mut [Option<SubMask>]) -> SubMask {
            if let Some(m) = memo[s] {
                return m;
            }
            // `check_recursion` ran first: the call graph has no cycles.
            let mut mask = SubMask::ALL;
            for u in &subs[s].uses {
                if matches!(
                    u.what,
                    UseKind::Read | UseKind::Set | UseKind::Unset | UseKind::Action
                ) {
                    mask = mask.intersect(u.allowed);
                }
            }
            for &(callee, _) in &subs[s].calls {
                mask = mask.intersect(mask_of(subs, callee, memo));
            }
            memo[s] = Some(mask);
            mask
        }
        let mut memo = vec![None; self.subs.len()];
        let masks: Vec<SubMask> = (0..self.subs.len())
            .map(|s| mask_of(&self.subs, s, &mut memo))
            .collect();
        if let Some(s) = masks.iter().position(|m| m.is_empty()) {
            return Err(Box::new(
                Diagnostic::error("Impossible Subroutine", self.subs[s].def).where_inline(),
            ));
        }
        Ok(masks)
    }

    /// Checks returns (`returns == true`) or other uses against every
    /// built-in method each subroutine is reachable from.
    fn check_uses(&self, returns: bool) -> R<()> {
        // vcc walks its symbol table, which is sorted by name: the first
        // error reported is the one of the alphabetically first method.
        let mut methods = ALL_BUILTIN_SUBS;
        methods.sort_by_key(|m| m.name());
        for m in methods {
            let Some(entry) = self.subs.iter().position(|s| s.method == Some(m)) else {
                continue;
            };
            let mut visited = vec![false; self.subs.len()];
            let mut path: Vec<(usize, Span)> = Vec::new();
            self.walk_uses(m, entry, &mut visited, &mut path, returns)?;
        }
        Ok(())
    }

    fn walk_uses(
        &self,
        m: BuiltinSub,
        s: usize,
        visited: &mut [bool],
        path: &mut Vec<(usize, Span)>,
        returns: bool,
    ) -> R<()> {
        if visited[s] {
            return Ok(());
        }
        visited[s] = true;
        for u in &self.subs[s].uses {
            let bad = match u.what {
                UseKind::Return(a) => returns && !m.actions().contains(a),
                UseKind::ReadOnly => !returns,
                _ => !returns && !u.allowed.contains(m),
            };
            if !bad {
                continue;
            }
            let direct = path.is_empty();
            let inf = if direct { "in" } else { "from" };
            let msg = match u.what {
                UseKind::Return(a) => format!("Invalid return \"{}\"", a.name()),
                UseKind::Read => format!("Not available {inf} subroutine '{}'.", m.name()),
                UseKind::ReadOnly if u.allowed.contains(m) => "Variable is read only.".to_string(),
                UseKind::ReadOnly => format!("Not available {inf} subroutine '{}'.", m.name()),
                UseKind::Set => format!("Cannot be set {inf} subroutine '{}'.", m.name()),
                UseKind::Unset => format!("Cannot be unset {inf} subroutine '{}'.", m.name()),
                UseKind::Action => format!("Not a valid action {inf} subroutine '{}'.", m.name()),
            };
            let mut d = if let UseKind::Return(_) = u.what {
                Diagnostic::error(msg, u.span).with_note(
                    format!("\n...in subroutine \"{}\"", self.subs[s].name),
                    Some(self.subs[s].def),
                )
            } else if direct {
                // vcc prints the location before the message here; an
                // empty message with the text as first note renders so.
                Diagnostic::error("", u.span).ranged().with_note(msg, None)
            } else {
                Diagnostic::error("", u.span).ranged().with_note(
                    format!("{msg}\n\n...in subroutine \"{}\"", self.subs[s].name),
                    Some(self.subs[s].def),
                )
            };
            if !direct || matches!(u.what, UseKind::Return(_)) {
                for (caller, site) in path.iter().rev() {
                    d = d.with_note(
                        format!("\n...called from \"{}\"", self.subs[*caller].name),
                        Some(*site),
                    );
                }
                d = d.with_note(
                    format!("\n...which is the \"{}\" subroutine", m.name()),
                    None,
                );
            }
            if let UseKind::Return(_) = u.what {
                let legal: Vec<String> = m
                    .actions()
                    .iter()
                    .map(|a| format!("\"{}\"", a.name()))
                    .collect();
                d = d.with_note(format!("Legal returns are: {}", legal.join(" ")), None);
            }
            return Err(Box::new(d));
        }
        for &(callee, site) in &self.subs[s].calls {
            path.push((s, site));
            self.walk_uses(m, callee, visited, path, returns)?;
            path.pop();
        }
        Ok(())
    }
}

// ----------------------------------------------------------------------
// Helpers

fn cmp_op(op: BinaryOp) -> Option<CmpOp> {
    Some(match op {
        BinaryOp::Eq => CmpOp::Eq,
        BinaryOp::Ne => CmpOp::Ne,
        BinaryOp::Lt => CmpOp::Lt,
        BinaryOp::Le => CmpOp::Le,
        BinaryOp::Gt => CmpOp::Gt,
        BinaryOp::Ge => CmpOp::Ge,
        BinaryOp::Match => CmpOp::Match,
        BinaryOp::NotMatch => CmpOp::NoMatch,
        _ => return None,
    })
}

fn cmp_holds(op: CmpOp, ord: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering::*;
    match op {
        CmpOp::Eq => ord == Equal,
        CmpOp::Ne => ord != Equal,
        CmpOp::Lt => ord == Less,
        CmpOp::Le => ord != Greater,
        CmpOp::Gt => ord == Greater,
        CmpOp::Ge => ord != Less,
        CmpOp::Match | CmpOp::NoMatch => false,
    }
}

fn str_const(s: &str) -> Expr {
    Expr {
        ty: Type::String,
        kind: IK::Const(Value::Str(Arc::from(s))),
    }
}

fn bool_const(b: bool) -> Expr {
    Expr {
        ty: Type::Bool,
        kind: IK::Const(Value::Bool(b)),
    }
}

fn real_const(r: f64) -> Expr {
    Expr {
        ty: Type::Real,
        kind: IK::Const(Value::Real(r)),
    }
}

fn ret_type(t: Type) -> Type {
    if t == Type::Strands { Type::String } else { t }
}

fn to_bool(x: Expr) -> Expr {
    if x.ty.to_bool_ok() && x.ty != Type::Bool {
        if let IK::Const(v) = &x.kind {
            match v {
                Value::Int(i) => return bool_const(*i != 0),
                Value::Duration(d) => return bool_const(*d > 0.0),
                _ => {}
            }
        }
        return Expr {
            ty: Type::Bool,
            kind: IK::ToBool(Box::new(x)),
        };
    }
    x
}

fn concat(l: Expr, r: Expr) -> Expr {
    let mut parts = Vec::new();
    for x in [l, r] {
        match x.kind {
            IK::Concat(v) => parts.extend(v),
            k => parts.push(Expr {
                ty: Type::String,
                kind: k,
            }),
        }
    }
    // Merge adjacent constants.
    let mut merged: Vec<Expr> = Vec::with_capacity(parts.len());
    for p in parts {
        if let (
            Some(Expr {
                kind: IK::Const(Value::Str(a)),
                ..
            }),
            IK::Const(Value::Str(b)),
        ) = (merged.last(), &p.kind)
        {
            let s = format!("{a}{b}");
            merged.pop();
            merged.push(str_const(&s));
            continue;
        }
        merged.push(p);
    }
    if merged.len() == 1 {
        return merged.pop().expect("one element");
    }
    Expr {
        ty: Type::String,
        kind: IK::Concat(merged),
    }
}

fn fold_arith(op: ArithOp, ty: Type, l: Expr, r: Expr) -> Expr {
    let num = |v: &Value| match v {
        Value::Int(i) => Some(*i as f64),
        Value::Real(x) | Value::Duration(x) | Value::Bytes(x) => Some(*x),
        _ => None,
    };
    if let (IK::Const(a), IK::Const(b)) = (&l.kind, &r.kind) {
        if let (Value::Int(x), Value::Int(y), Type::Int) = (a, b, ty) {
            let v = match op {
                ArithOp::Add => x.checked_add(*y),
                ArithOp::Sub => x.checked_sub(*y),
                ArithOp::Mul => x.checked_mul(*y),
                ArithOp::Div => x.checked_div(*y),
                ArithOp::Mod => x.checked_rem(*y),
            };
            if let Some(v) = v {
                return Expr {
                    ty,
                    kind: IK::Const(Value::Int(v)),
                };
            }
        } else if let (Some(x), Some(y)) = (num(a), num(b)) {
            let v = match op {
                ArithOp::Add => Some(x + y),
                ArithOp::Sub => Some(x - y),
                ArithOp::Mul => Some(x * y),
                ArithOp::Div if y != 0.0 => Some(x / y),
                _ => None,
            };
            let value = v.and_then(|v| match ty {
                Type::Real => Some(Value::Real(v)),
                Type::Duration => Some(Value::Duration(v)),
                Type::Bytes => Some(Value::Bytes(v)),
                _ => None,
            });
            if let Some(value) = value {
                return Expr {
                    ty,
                    kind: IK::Const(value),
                };
            }
        }
    }
    Expr {
        ty,
        kind: IK::Arith {
            op,
            lhs: Box::new(l),
            rhs: Box::new(r),
        },
    }
}

fn default_expr(d: &DefaultValue, t: Type) -> Expr {
    let v = match (d, t) {
        (DefaultValue::Bool(b), _) => Value::Bool(*b),
        (DefaultValue::Int(i), Type::Real) => Value::Real(*i as f64),
        (DefaultValue::Int(i), _) => Value::Int(*i),
        (DefaultValue::Real(r), _) => Value::Real(*r),
        (DefaultValue::Number(n), Type::Duration) => Value::Duration(*n),
        (DefaultValue::Number(n), Type::Bytes) => Value::Bytes(*n),
        (DefaultValue::Number(n), _) => Value::Real(*n),
        (DefaultValue::Str(s), _) | (DefaultValue::Enum(s), _) => Value::Str(Arc::from(s.as_str())),
        (DefaultValue::Null, _) => {
            return Expr {
                ty: t,
                kind: IK::Const(Value::Str(Arc::from(""))),
            };
        }
    };
    Expr {
        ty: t,
        kind: IK::Const(v),
    }
}

/// A header name for a variable reference; Varnish stores the length with
/// the colon in one byte, so names are limited to 126 characters.
fn header_checked(h: &str, span: Span) -> R<ir::HeaderName> {
    if h.len() + 1 > 127 {
        let short: String = h.chars().take(20).collect();
        return err(format!("HTTP header ({short}..) is too long."), span);
    }
    Ok(header_name(h))
}

fn header_name(h: &str) -> ir::HeaderName {
    ir::HeaderName {
        name: Arc::from(h),
        lower: Arc::from(h.to_ascii_lowercase().as_str()),
    }
}

fn mask_ip(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - prefix as u32)
            };
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - prefix as u32)
            };
            IpAddr::V6((bits & m).into())
        }
    }
}

fn dns_error_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    if s.contains("failed to lookup address") || s.contains("Name or service not known") {
        "Name or service not known".into()
    } else {
        s
    }
}

/// A backend's port as getaddrinfo reads a service: a decimal number is
/// taken modulo 65536 (as the C library stores it in 16 bits), a name is
/// looked up in /etc/services (TCP).
fn service_port(port: &str) -> Result<u16, String> {
    if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
        let n: u64 = port.parse().unwrap_or(u64::MAX);
        return Ok((n % 65536) as u16);
    }
    let services = std::fs::read_to_string("/etc/services").unwrap_or_default();
    for line in services.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let (Some(name), Some(pp)) = (words.next(), words.next()) else {
            continue;
        };
        let Some((num, "tcp")) = pp.split_once('/') else {
            continue;
        };
        if (name == port || words.any(|alias| alias == port))
            && let Ok(n) = num.parse()
        {
            return Ok(n);
        }
    }
    match port {
        "http" => Ok(80),
        "https" => Ok(443),
        _ => Err("Servname not supported for ai_socktype".into()),
    }
}

fn resolve_host(host: &str, port: &str) -> Result<Vec<SocketAddr>, String> {
    let port_num = service_port(port)?;
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port_num)]);
    }
    if host.is_empty() {
        return Err("Name or service not known".into());
    }
    let mut v: Vec<SocketAddr> = (host, port_num)
        .to_socket_addrs()
        .map_err(|e| dns_error_text(&e))?
        .collect();
    v.dedup();
    if v.is_empty() {
        return Err("no addresses".into());
    }
    Ok(v)
}

/// An IP constant in an expression (`client.ip == "1.2.3.4"`): one
/// address, possibly resolved through DNS.
fn resolve_ip_constant(s: &str) -> Result<SocketAddr, String> {
    let (host, port) = split_host_port(s);
    let addrs = resolve_host(host, port.unwrap_or("80")).map_err(|e| {
        format!("IP constant '\"{s}\"' could not be resolved to an IP address:\n\t{e}")
    })?;
    let v4 = addrs.iter().filter(|a| a.is_ipv4()).count();
    if v4 > 1 || addrs.len() - v4 > 1 {
        return Err(format!(
            "IP constant '\"{s}\"' resolves to too many addresses"
        ));
    }
    Ok(addrs[0])
}

/// vcc's checks of a bracketed IPv6 host (`[::1]:80`).
fn check_ipv6_brackets(host: &str) -> Result<(), String> {
    let Some(rest) = host.strip_prefix('[') else {
        return Ok(());
    };
    let Some((_, after)) = rest.split_once(']') else {
        return Err("IPv6 address lacks ']'".into());
    };
    if !after.is_empty() && !after.starts_with(':') && !after.starts_with(' ') {
        return Err("IPv6 address has wrong port separator".into());
    }
    Ok(())
}

/// A backend `.path` must be absolute and, if it exists, a socket. One
/// that does not exist yet, or that the compiler may not look at, only
/// earns a warning (returned), as in vcc: the socket may appear before the
/// VCL is used, and the worker may see what the compiler's user cannot.
fn check_uds_path(path: &str) -> Result<Option<String>, String> {
    if !path.starts_with('/') {
        return Err(format!("Backend path: Must be an absolute path:\n\t{path}"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        match std::fs::metadata(path) {
            Ok(md) if !md.file_type().is_socket() => {
                return Err(format!("Backend path: Not a socket:\n\t{path}"));
            }
            Ok(_) => {}
            Err(e) => {
                // The OS's text without Rust's " (os error N)", as strerror.
                let text = e.to_string();
                let text = text.split(" (os error").next().unwrap_or(&text);
                let msg = format!("Backend path: Cannot stat: {text}");
                return if stat_failure_only_warns(e.kind()) {
                    Ok(Some(msg))
                } else {
                    Err(msg)
                };
            }
        }
    }
    Ok(None)
}

/// Which failures to stat a backend `.path` are warnings (no such file,
/// permission denied); any other is an error.
fn stat_failure_only_warns(kind: std::io::ErrorKind) -> bool {
    matches!(
        kind,
        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
    )
}

fn split_host_port(s: &str) -> (&str, Option<&str>) {
    if let Some(rest) = s.strip_prefix('[')
        && let Some((h, p)) = rest.split_once(']')
    {
        return (h, p.strip_prefix(':'));
    }
    if s.matches(':').count() == 1
        && let Some((h, p)) = s.split_once(':')
    {
        return (h, Some(p));
    }
    if let Some((h, p)) = s.split_once(' ') {
        return (h, Some(p.trim()));
    }
    (s, None)
}

fn lower_probe(name: &str, spec: &ast::FieldList) -> ir::ProbeDef {
    ir::ProbeDef {
        name: name.to_string(),
        url: spec.string("url").map(|s| s.value.clone()),
        request: match spec.get("request").map(|f| &f.value) {
            Some(ast::FieldValue::Strings(v)) => Some(v.iter().map(|s| s.value.clone()).collect()),
            Some(ast::FieldValue::Str(s)) => Some(vec![s.value.clone()]),
            _ => None,
        },
        timeout: spec.duration("timeout"),
        interval: spec.duration("interval"),
        window: spec.uint("window"),
        threshold: spec.uint("threshold"),
        initial: spec.uint("initial"),
        expected_response: spec.uint("expected_response"),
    }
}

/// A backend's TLS attributes: Varnish Enterprise's (`.ssl`, `.ssl_sni`,
/// `.ssl_verify_peer`, `.ssl_verify_host`, `.certificate`), Varnish 9's
/// negative spellings (`.ssl_nosni`, `.ssl_noverify`) and `.ssl_ca`.
/// `None` for a plain backend; attributes that would have no effect, or
/// that contradict each other, are errors.
fn backend_tls(fields: &ast::FieldList) -> R<Option<ir::BackendTlsDef>> {
    const ATTRS: &[&str] = &[
        "ssl_sni",
        "ssl_verify_peer",
        "ssl_verify_host",
        "ssl_nosni",
        "ssl_noverify",
        "ssl_ca",
        "certificate",
    ];
    let Some(ssl) = fields.get("ssl") else {
        if let Some(f) = ATTRS.iter().find_map(|a| fields.get(a)) {
            return err(
                format!(
                    "'.{}' applies to TLS backends only: add .ssl = 1",
                    f.name.name
                ),
                f.name.span,
            );
        }
        return Ok(None);
    };
    if fields.uint("ssl") != Some(1) {
        return Ok(None);
    }
    if fields.get("path").is_some() {
        return err(
            ".ssl cannot be used with .path: a Unix socket backend is not reached over TLS",
            ssl.name.span,
        );
    }
    for (yes, no) in [
        ("ssl_sni", "ssl_nosni"),
        ("ssl_verify_peer", "ssl_noverify"),
    ] {
        if let (Some(_), Some(n)) = (fields.get(yes), fields.get(no)) {
            return err(
                format!(".{yes} and .{no} conflict: set one of them"),
                n.name.span,
            );
        }
    }
    let flag = |name: &str| fields.uint(name).map(|v| v == 1);
    Ok(Some(ir::BackendTlsDef {
        sni: flag("ssl_sni").unwrap_or(true) && flag("ssl_nosni") != Some(true),
        verify_peer: flag("ssl_verify_peer").unwrap_or(true) && flag("ssl_noverify") != Some(true),
        verify_host: flag("ssl_verify_host").unwrap_or(false),
        ca_file: fields.string("ssl_ca").map(|s| s.value.clone()),
        certificate: fields.string("certificate").map(|s| s.value.clone()),
    }))
}

/// vcc's built-in function symbols (`true`, `false`, `regsub`,
/// `regsuball`), found without regard to case.
fn is_builtin_func(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "true" | "false" | "regsub" | "regsuball"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::compile_str;
    use crate::ir::{Program, Return, Stmt};

    fn prog(body: &str) -> Arc<Program> {
        let text = format!("vcl 4.1;\n{body}\n");
        let (sm, r) = compile_str(
            "t.vcl",
            &text,
            &CompileOptions::default(),
            &VmodRegistry::new(),
        );
        r.unwrap_or_else(|d| panic!("{}", d.render(&sm)))
    }

    #[test]
    fn user_body_runs_before_builtin() {
        let p = prog(r#"backend b { .host = "127.0.0.1"; } sub vcl_recv { set req.url = "/x"; }"#);
        let body = &p.method(BuiltinSub::Recv).body;
        assert!(matches!(&body[0], Stmt::Set { var, .. } if var.id == vars::VarId::ReqUrl));
        // Then the built-in: call vcl_builtin_recv; return (hash);
        assert!(matches!(&body[1], Stmt::Call(i) if Some(*i) == p.sub_by_name("vcl_builtin_recv")));
        assert!(matches!(
            &body[2],
            Stmt::Return(Return::Action {
                action: Action::Hash,
                ..
            })
        ));
    }

    #[test]
    fn headers_constants_and_folding() {
        let p = prog(
            r#"backend b { .host = "127.0.0.1"; }
            sub vcl_recv {
                set req.http.X-Foo = "a" + "b" + 1 + 2.5;
                set req.http.n = 3 * 4 + 1;
                if ("a" == "a" && !false) { set req.url = req.http.X-Foo; }
            }"#,
        );
        let body = &p.method(BuiltinSub::Recv).body;
        let Stmt::Set { var, value, .. } = &body[0] else {
            panic!("{:?}", body[0])
        };
        let VarArg::Header(h) = &var.arg else {
            panic!()
        };
        assert_eq!((&*h.name, &*h.lower), ("X-Foo", "x-foo"));
        assert!(matches!(&value.kind, IK::Const(Value::Str(s)) if &**s == "ab12.500"));
        let Stmt::Set { value, .. } = &body[1] else {
            panic!()
        };
        assert!(matches!(&value.kind, IK::Const(Value::Str(s)) if &**s == "13"));
        let Stmt::If { arms, .. } = &body[2] else {
            panic!()
        };
        assert!(matches!(arms[0].0.kind, IK::And(_)));
    }

    #[test]
    fn default_backend_and_tables() {
        let p = prog(
            r#"probe default { .url = "/"; }
            backend a { .host = "127.0.0.1"; .port = "8080"; }
            backend default { .host = "127.0.0.1 81"; }
            acl x { "10.0.0.0"/8; "10.1.2.3"; }
            sub vcl_recv { set req.backend_hint = a; if (client.ip ~ x) {} }"#,
        );
        assert_eq!(p.default_backend, Some(1));
        assert_eq!(p.backends[1].port, "81");
        assert_eq!(p.backends[0].addrs[0].port(), 8080);
        // Backends without .probe use the default probe.
        assert_eq!(p.backends[0].probe, p.default_probe);
        assert_eq!(p.acls[0].entries[0].prefix, 32);
        assert_eq!(p.acls[0].entries[1].prefix, 8);
    }

    #[test]
    fn uds_path_stat_failures() {
        assert!(stat_failure_only_warns(std::io::ErrorKind::NotFound));
        assert!(stat_failure_only_warns(
            std::io::ErrorKind::PermissionDenied
        ));
        assert!(!stat_failure_only_warns(std::io::ErrorKind::NotADirectory));
        let w = check_uds_path("/nonexistent-lacquer-dir/s.sock").unwrap();
        assert_eq!(
            w.as_deref(),
            Some("Backend path: Cannot stat: No such file or directory")
        );
        // Through a regular file: not a warning.
        let e = check_uds_path("/proc/self/stat/x").unwrap_err();
        assert!(
            e.starts_with("Backend path: Cannot stat: Not a directory"),
            "{e}"
        );
        assert_eq!(
            check_uds_path("rel.sock").unwrap_err(),
            "Backend path: Must be an absolute path:\n\trel.sock"
        );
    }

    #[test]
    fn acl_log_texts_follow_the_source() {
        let p = prog(
            r#"backend b { .host = "127.0.0.1"; }
            acl x -pedantic { "1.2.3.4"/24; "5.6.7.8/24"; "10.1"/16; "10.2"; "::1:2"/120; }
            sub vcl_recv { if (client.ip ~ x) {} }"#,
        );
        let texts: Vec<&str> = p.acls[0].entries.iter().map(|e| &*e.log_text).collect();
        // Sorted most specific first; the mask shows only when written as
        // its own token, and cleared host bits are reported.
        assert_eq!(
            texts,
            [
                "\"::1:2\"/120 fixed: ::1:0/120",
                "\"1.2.3.4\"/24 fixed: 1.2.3.0/24",
                "\"5.6.7.8\" fixed: 5.6.7.0/24",
                "\"10.1\"/16",
                "\"10.2\"",
            ]
        );
    }

    #[test]
    fn set_operators_and_returns() {
        let p = prog(
            r#"backend b { .host = "127.0.0.1"; }
            sub vcl_backend_response {
                set beresp.ttl += 10s;
                set beresp.http.x += "y";
                return (pass(5s));
            }"#,
        );
        let body = &p.method(BuiltinSub::BackendResponse).body;
        assert!(
            matches!(&body[0], Stmt::Set { op: Some(ArithOp::Add), value, .. } if value.ty == Type::Duration)
        );
        assert!(
            matches!(&body[1], Stmt::Set { op: Some(ArithOp::Add), value, .. } if value.ty == Type::String)
        );
        assert!(
            matches!(&body[2], Stmt::Return(Return::Action { action: Action::Pass, args }) if args.len() == 1)
        );
    }

    #[test]
    fn unused_objects_allowed_when_unref_is_off() {
        let text = "vcl 4.1; backend a { .host = \"127.0.0.1\"; } backend c { .host = \"127.0.0.1\"; } sub f { } sub g { }";
        let opts = CompileOptions {
            err_unref: false,
            ..CompileOptions::default()
        };
        let (sm, r) = compile_str("t.vcl", text, &opts, &VmodRegistry::new());
        let p = r.expect("compiles with vcc_err_unref off");
        assert!(p.subs.iter().any(|s| s.name == "f"));
        // Still reported, as warnings, in name order.
        let w: Vec<&str> = p.warnings.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(
            w,
            [
                "Unused backend c, defined:",
                "Unused sub f, defined:",
                "Unused sub g, defined:"
            ]
        );
        assert!(
            p.warnings[0]
                .render(&sm)
                .contains("(That was just a warning)")
        );
        let (sm, r) = compile_str(
            "t.vcl",
            text,
            &CompileOptions::default(),
            &VmodRegistry::new(),
        );
        let e = r.expect_err("unused backend").render(&sm);
        assert!(e.contains("Unused backend c, defined:"), "{e}");
    }

    #[test]
    fn vcl_labels_resolve_from_options() {
        let text =
            "vcl 4.1; backend a { .host = \"127.0.0.1\"; } sub vcl_recv { return (vcl(other)); }";
        let opts = CompileOptions {
            labels: vec!["other".into()],
            ..CompileOptions::default()
        };
        let (_, r) = compile_str("t.vcl", text, &opts, &VmodRegistry::new());
        let p = r.expect("label known");
        assert_eq!(p.labels, ["other"]);
    }

    #[test]
    fn regexes_are_listed_and_prepared() {
        let p = prog(
            r#"backend b { .host = "127.0.0.1"; }
            sub vcl_recv { if (req.url ~ "^/a(b|c)") { set req.url = regsub(req.url, "x(.)", "\1"); } }"#,
        );
        // Two here, plus the built-in VCL's three.
        assert_eq!(p.regexes.len(), 5);
        assert!(p.prepare_regexes().is_empty());
        assert!(p.regexes.iter().any(|r| r.as_str() == "^/a(b|c)"));
    }

    #[test]
    fn program_is_shareable() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Program>();
    }
}
