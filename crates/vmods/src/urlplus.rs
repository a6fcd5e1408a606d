//! `vmod_urlplus` (Varnish Enterprise): reading and rewriting the URL and
//! its query string on a parsed copy that is written back on request.
//!
//! The copy is of `req.url` on the client side and of `bereq.url` in the
//! backend subroutines, parsed at the first call of a task (or by
//! `parse(url)`). Changes (`query_add`, `query_delete[_regex]`,
//! `query_keep[_regex]`) stay in the copy until `write()` stores it in the
//! URL (query parameters sorted unless `sort_query = false`). While the
//! copy holds no change, a URL that VCL set since is parsed afresh.
//!
//! `url_get()` is the URL without its query string (the StorageGRID
//! guide hashes on it so presigned variants share one object);
//! `get_extension()`, `get_filename()` and `get_dirname()` read its last
//! path segment; `query_get(name[, default])` the first value of a
//! parameter; `url_as_string()`/`query_as_string()` what `write()` would
//! store, unsorted. Once any `query_keep*` ran, only kept parameters
//! (and added ones) are written. Empty parameters (`&&`, a trailing `&`)
//! are dropped when the URL is rebuilt, and so is a `?` with nothing after.

use bytes::Bytes;
use lacquer_vcl::exec::{Context, Value};
use lacquer_vcl::subs::BuiltinSub;
use lacquer_vcl::vars::VarId;

use crate::args::{Args, ws_string};
use crate::{Env, FuncImpl, ModuleImpl};

const DECL: &str = r#"
$Module urlplus
$Function VOID parse(STRING url)
$Function VOID reset()
$Function STRING url_get()
$Function STRING get_extension()
$Function STRING get_filename()
$Function STRING get_dirname()
$Function STRING query_get(STRING name, [STRING default_value])
$Function INT query_count()
$Function VOID query_add(STRING name, [STRING value])
$Function VOID query_delete(STRING name)
$Function VOID query_delete_regex(STRING regex)
$Function VOID query_keep(STRING name)
$Function VOID query_keep_regex(STRING regex)
$Function STRING url_as_string()
$Function STRING query_as_string()
$Function VOID write(BOOL sort_query = 1)
"#;

pub(crate) static MODULE: ModuleImpl = ModuleImpl {
    decl: DECL,
    functions: &[
        ("parse", parse as FuncImpl),
        ("reset", reset),
        ("url_get", url_get),
        ("get_extension", get_extension),
        ("get_filename", get_filename),
        ("get_dirname", get_dirname),
        ("query_get", query_get),
        ("query_count", query_count),
        ("query_add", query_add),
        ("query_delete", query_delete),
        ("query_delete_regex", query_delete_regex),
        ("query_keep", query_keep),
        ("query_keep_regex", query_keep_regex),
        ("url_as_string", url_as_string),
        ("query_as_string", query_as_string),
        ("write", write),
    ],
    classes: &[],
    event: None,
    filters: &[],
};

type R = Result<Value, String>;

/// One query parameter: its name, its value (`None`: no `=`), and
/// whether a `query_keep*` kept it.
#[derive(Clone, Debug, PartialEq)]
struct Param {
    name: Bytes,
    value: Option<Bytes>,
    kept: bool,
}

/// The parsed copy of a task's URL.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Parsed {
    /// The URL it was parsed from.
    source: Bytes,
    /// Everything before the `?`.
    path: Bytes,
    params: Vec<Param>,
    /// A `query_keep*` ran: unkept parameters are left out.
    keeping: bool,
    /// The copy differs from its source.
    changed: bool,
    /// Made by `parse(url)`: not replaced when the task's URL differs.
    pinned: bool,
}

impl Parsed {
    fn new(url: Bytes) -> Parsed {
        let (path, query) = match memchr(b'?', &url) {
            Some(i) => (url.slice(..i), Some(url.slice(i + 1..))),
            None => (url.clone(), None),
        };
        let mut params = Vec::new();
        if let Some(q) = query {
            let mut start = 0;
            for end in memchr_all(b'&', &q).chain([q.len()]) {
                let p = q.slice(start..end);
                start = end + 1;
                if p.is_empty() {
                    continue;
                }
                let (name, value) = match memchr(b'=', &p) {
                    Some(i) => (p.slice(..i), Some(p.slice(i + 1..))),
                    None => (p, None),
                };
                params.push(Param {
                    name,
                    value,
                    kept: false,
                });
            }
        }
        Parsed {
            source: url,
            path,
            params,
            keeping: false,
            changed: false,
            pinned: false,
        }
    }

    /// The last path segment (after the last `/`).
    fn filename(&self) -> &[u8] {
        let p = &self.path[..];
        match p.iter().rposition(|&c| c == b'/') {
            Some(i) => &p[i + 1..],
            None => p,
        }
    }

    /// The path up to its last `/` (excluded; `/` for the root).
    fn dirname(&self) -> &[u8] {
        let p = &self.path[..];
        match p.iter().rposition(|&c| c == b'/') {
            Some(0) => b"/",
            Some(i) => &p[..i],
            None => b"",
        }
    }

    /// The filename's extension: after its last `.`, if that is not its
    /// first character (a dotfile has none).
    fn extension(&self) -> &[u8] {
        let f = self.filename();
        match f.iter().rposition(|&c| c == b'.') {
            Some(i) if i > 0 => &f[i + 1..],
            _ => b"",
        }
    }

    fn get(&self, name: &[u8]) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    fn add(&mut self, name: Bytes, value: Option<Bytes>) {
        self.params.push(Param {
            name,
            value,
            kept: true,
        });
        self.changed = true;
    }

    /// Drops the parameters whose name `matches`.
    fn delete(&mut self, matches: impl Fn(&[u8]) -> Result<bool, String>) -> Result<(), String> {
        let hit = self.matching(matches)?;
        let before = self.params.len();
        let mut i = 0;
        self.params.retain(|_| {
            i += 1;
            !hit[i - 1]
        });
        self.changed |= self.params.len() != before;
        Ok(())
    }

    /// Keeps the parameters whose name `matches` (and, from now on, only
    /// kept ones).
    fn keep(&mut self, matches: impl Fn(&[u8]) -> Result<bool, String>) -> Result<(), String> {
        let hit = self.matching(matches)?;
        self.keeping = true;
        self.changed = true;
        for (p, h) in self.params.iter_mut().zip(hit) {
            p.kept |= h;
        }
        Ok(())
    }

    fn matching(
        &self,
        matches: impl Fn(&[u8]) -> Result<bool, String>,
    ) -> Result<Vec<bool>, String> {
        self.params.iter().map(|p| matches(&p.name)).collect()
    }

    /// The parameters that would be written, in order or sorted by name
    /// (then value; ties keep their order).
    fn written(&self, sort: bool) -> Vec<&Param> {
        let mut out: Vec<&Param> = self
            .params
            .iter()
            .filter(|p| !self.keeping || p.kept)
            .collect();
        if sort {
            out.sort_by(|a, b| (&a.name, &a.value).cmp(&(&b.name, &b.value)));
        }
        out
    }

    fn query_string(&self, sort: bool) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, p) in self.written(sort).into_iter().enumerate() {
            if i > 0 {
                out.push(b'&');
            }
            out.extend_from_slice(&p.name);
            if let Some(v) = &p.value {
                out.push(b'=');
                out.extend_from_slice(v);
            }
        }
        out
    }

    fn url(&self, sort: bool) -> Vec<u8> {
        let mut out = self.path.to_vec();
        let q = self.query_string(sort);
        if !q.is_empty() {
            out.push(b'?');
            out.extend_from_slice(&q);
        }
        out
    }
}

fn memchr(c: u8, b: &[u8]) -> Option<usize> {
    b.iter().position(|&x| x == c)
}

fn memchr_all(c: u8, b: &[u8]) -> impl Iterator<Item = usize> + '_ {
    b.iter()
        .enumerate()
        .filter(move |(_, x)| **x == c)
        .map(|(i, _)| i)
}

/// The URL variable of the task: `bereq.url` in the backend subroutines,
/// `req.url` elsewhere.
fn url_var(ctx: &dyn Context) -> VarId {
    match ctx.sub() {
        BuiltinSub::BackendFetch | BuiltinSub::BackendResponse | BuiltinSub::BackendError => {
            VarId::BereqUrl
        }
        _ => VarId::ReqUrl,
    }
}

/// The task's parsed copy, made (or made again, when the URL changed under
/// an unchanged copy) from the task's URL.
fn state(ctx: &mut dyn Context) -> Result<&mut Parsed, String> {
    let url = Bytes::copy_from_slice(ctx.get_str(url_var(ctx))?.unwrap_or_default());
    let p = ctx.privs().get_or_insert_with(0, Parsed::default);
    if !p.pinned && !p.changed && p.source != url {
        *p = Parsed::new(url);
    }
    Ok(p)
}

fn parse(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let url = a.bytes(0)?.unwrap_or_default();
    let mut p = Parsed::new(url);
    p.pinned = true;
    ctx.privs().insert(0, p);
    Ok(Value::Null)
}

fn reset(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    ctx.privs().remove::<Parsed>(0);
    Ok(Value::Null)
}

fn url_get(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Str(state(ctx)?.path.clone()))
}

fn get_extension(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let v = Bytes::copy_from_slice(state(ctx)?.extension());
    Ok(ws_string(ctx, v))
}

fn get_filename(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let v = Bytes::copy_from_slice(state(ctx)?.filename());
    Ok(ws_string(ctx, v))
}

fn get_dirname(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let v = Bytes::copy_from_slice(state(ctx)?.dirname());
    Ok(ws_string(ctx, v))
}

fn query_get(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let name = a.str_or_empty(0)?;
    let found = state(ctx)?
        .get(name)
        .map(|p| p.value.clone().unwrap_or_default());
    Ok(match found {
        Some(v) => Value::Str(v),
        None => a.bytes(1)?.map_or(Value::Null, Value::Str),
    })
}

fn query_count(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    Ok(Value::Int(state(ctx)?.written(false).len() as i64))
}

fn query_add(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let name = a.bytes(0)?.unwrap_or_default();
    if name.is_empty() {
        return Err("urlplus.query_add(): the parameter name is empty".into());
    }
    let value = a.bytes(1)?;
    state(ctx)?.add(name, value);
    Ok(Value::Null)
}

fn query_delete(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let name = a.str_or_empty(0)?;
    state(ctx)?.delete(|n| Ok(n == name))?;
    Ok(Value::Null)
}

fn query_delete_regex(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let re = env.regex(a.str_or_empty(0)?)?;
    state(ctx)?.delete(|n| re.is_match(n))?;
    Ok(Value::Null)
}

fn query_keep(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let name = a.str_or_empty(0)?;
    state(ctx)?.keep(|n| Ok(n == name))?;
    Ok(Value::Null)
}

fn query_keep_regex(env: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let re = env.regex(a.str_or_empty(0)?)?;
    state(ctx)?.keep(|n| re.is_match(n))?;
    Ok(Value::Null)
}

fn url_as_string(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let v = state(ctx)?.url(false);
    Ok(ws_string(ctx, v))
}

fn query_as_string(_: &Env, ctx: &mut dyn Context, _: &Args<'_>) -> R {
    let v = state(ctx)?.query_string(false);
    Ok(ws_string(ctx, v))
}

fn write(_: &Env, ctx: &mut dyn Context, a: &Args<'_>) -> R {
    let sort = a.bool(0)?.unwrap_or(true);
    let url = state(ctx)?.url(sort);
    let var = url_var(ctx);
    ctx.set_str(var, &url)?;
    // The copy now matches the URL it was written to.
    ctx.privs().insert(0, Parsed::new(Bytes::from(url)));
    Ok(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Parsed {
        Parsed::new(Bytes::copy_from_slice(s.as_bytes()))
    }

    fn text(v: Vec<u8>) -> String {
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn splits_path_and_query() {
        let u = p("/bucket/key.tar.gz?X-Amz-Signature=ab&&x=1&flag&");
        assert_eq!(&u.path[..], b"/bucket/key.tar.gz");
        assert_eq!(u.extension(), b"gz");
        assert_eq!(u.filename(), b"key.tar.gz");
        assert_eq!(u.dirname(), b"/bucket");
        assert_eq!(u.params.len(), 3);
        assert_eq!(u.get(b"x").unwrap().value.as_deref(), Some(&b"1"[..]));
        assert_eq!(u.get(b"flag").unwrap().value, None);
        // Empty parameters are dropped when rebuilt.
        assert_eq!(
            text(u.url(false)),
            "/bucket/key.tar.gz?X-Amz-Signature=ab&x=1&flag"
        );
        assert_eq!(text(p("/a?").url(true)), "/a");
        assert_eq!(p("/").dirname(), b"/");
        assert_eq!(p("/.hidden").extension(), b"");
        assert_eq!(p("/dir.d/file").extension(), b"");
        assert_eq!(p("noslash").filename(), b"noslash");
    }

    #[test]
    fn add_delete_keep_and_sort() {
        let mut u = p("/x?b=2&a=1&utm_source=z&b=1");
        u.delete(|n| Ok(n.starts_with(b"utm_"))).unwrap();
        assert!(u.changed);
        assert_eq!(text(u.url(false)), "/x?b=2&a=1&b=1");
        assert_eq!(text(u.url(true)), "/x?a=1&b=1&b=2");
        u.keep(|n| Ok(n == b"a")).unwrap();
        u.add(Bytes::from_static(b"c"), Some(Bytes::from_static(b"")));
        u.add(Bytes::from_static(b"d"), None);
        assert_eq!(text(u.query_string(false)), "a=1&c=&d");
        assert_eq!(u.written(true).len(), 3);
        // Deleting nothing changes nothing.
        let mut v = p("/y?q=1");
        v.delete(|n| Ok(n == b"nope")).unwrap();
        assert!(!v.changed);
    }
}
