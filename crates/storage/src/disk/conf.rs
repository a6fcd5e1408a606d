//! `mse.conf`: the configuration file Varnish Enterprise's Massive Storage
//! Engine reads, so that `-s mse,/etc/varnish/mse.conf` starts Lacquer with
//! the same setup.
//!
//! The file is in libconfig syntax: `name = value;` (or `name: value`)
//! settings, `{ ... }` groups, `( ... )` lists, strings, numbers and
//! booleans, `#`, `//` and `/* */` comments. Of it Lacquer uses the
//! environment's `id` and `memcache_size`, each book's `directory` (where
//! the ban/purge journals go) and each store's `id`, `filename` and `size`.
//! Keys that mean nothing in Lacquer's design (the metadata database size:
//! object records live in the store files) are accepted and listed in
//! [`MseConf::ignored`], for the daemon to report once at startup; a key it
//! does not know at all is an error, as a typo would otherwise go unnoticed.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// A value of the configuration tree.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    Num(String),
    Bool(bool),
    Group(BTreeMap<String, Value>),
    List(Vec<Value>),
}

/// One store of a book.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MseStore {
    /// Its id (the store's name in VCL).
    pub id: String,
    /// The store file.
    pub filename: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// The book's directory (where its journal goes).
    pub book_dir: Option<PathBuf>,
}

/// What an `mse.conf` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MseConf {
    /// The environment's id (the memory tier's name).
    pub id: String,
    /// The memory tier's size (`None`: `auto`).
    pub memcache_size: Option<u64>,
    /// The share of RAM the memory tier may use when `auto` (percent).
    pub memory_target: u64,
    /// The stores, in order.
    pub stores: Vec<MseStore>,
    /// Keys accepted but meaningless here, with why.
    pub ignored: Vec<String>,
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
    line: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> String {
        format!("line {}: {what}", self.line)
    }

    fn skip(&mut self) {
        loop {
            while let Some(&c) = self.s.get(self.at) {
                if c == b'\n' {
                    self.line += 1;
                } else if !c.is_ascii_whitespace() {
                    break;
                }
                self.at += 1;
            }
            let rest = &self.s[self.at..];
            if rest.starts_with(b"#") || rest.starts_with(b"//") {
                while self.s.get(self.at).is_some_and(|&c| c != b'\n') {
                    self.at += 1;
                }
            } else if rest.starts_with(b"/*") {
                self.at += 2;
                while self.at < self.s.len() && !self.s[self.at..].starts_with(b"*/") {
                    if self.s[self.at] == b'\n' {
                        self.line += 1;
                    }
                    self.at += 1;
                }
                self.at = (self.at + 2).min(self.s.len());
            } else {
                return;
            }
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip();
        self.s.get(self.at).copied()
    }

    fn name(&mut self) -> Result<String, String> {
        self.skip();
        let start = self.at;
        while self
            .s
            .get(self.at)
            .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'*'))
        {
            self.at += 1;
        }
        if start == self.at {
            return Err(self.err("expected a setting name"));
        }
        Ok(String::from_utf8_lossy(&self.s[start..self.at]).into_owned())
    }

    /// Settings up to `end` (`None`: end of file).
    fn settings(&mut self, end: Option<u8>) -> Result<BTreeMap<String, Value>, String> {
        let mut out = BTreeMap::new();
        loop {
            match (self.peek(), end) {
                (None, None) => return Ok(out),
                (None, Some(e)) => {
                    return Err(self.err(&format!("missing '{}'", e as char)));
                }
                (Some(c), Some(e)) if c == e => {
                    self.at += 1;
                    return Ok(out);
                }
                _ => {}
            }
            let name = self.name()?;
            match self.peek() {
                Some(b'=' | b':') => self.at += 1,
                _ => return Err(self.err(&format!("expected '=' after \"{name}\""))),
            }
            let v = self.value()?;
            if matches!(self.peek(), Some(b';' | b',')) {
                self.at += 1;
            }
            if out.insert(name.clone(), v).is_some() {
                return Err(self.err(&format!("\"{name}\" is set twice")));
            }
        }
    }

    fn value(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some(b'{') => {
                self.at += 1;
                Ok(Value::Group(self.settings(Some(b'}'))?))
            }
            Some(b'(' | b'[') => {
                let close = if self.s[self.at] == b'(' { b')' } else { b']' };
                self.at += 1;
                let mut items = Vec::new();
                loop {
                    if self.peek() == Some(close) {
                        self.at += 1;
                        return Ok(Value::List(items));
                    }
                    items.push(self.value()?);
                    match self.peek() {
                        Some(b',') => self.at += 1,
                        Some(c) if c == close => {}
                        _ => return Err(self.err("expected ',' or the end of the list")),
                    }
                }
            }
            Some(b'"') => {
                let mut s = Vec::new();
                // Adjacent strings concatenate, as in libconfig.
                while self.peek() == Some(b'"') {
                    self.at += 1;
                    loop {
                        match self.s.get(self.at) {
                            None | Some(b'\n') => return Err(self.err("unterminated string")),
                            Some(b'"') => {
                                self.at += 1;
                                break;
                            }
                            Some(b'\\') => {
                                let c = self.s.get(self.at + 1).copied().unwrap_or(b'\\');
                                s.push(match c {
                                    b'n' => b'\n',
                                    b't' => b'\t',
                                    other => other,
                                });
                                self.at += 2;
                            }
                            Some(&c) => {
                                s.push(c);
                                self.at += 1;
                            }
                        }
                    }
                }
                Ok(Value::Str(String::from_utf8_lossy(&s).into_owned()))
            }
            Some(_) => {
                let start = self.at;
                while self
                    .s
                    .get(self.at)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'+'))
                {
                    self.at += 1;
                }
                let w = String::from_utf8_lossy(&self.s[start..self.at]).into_owned();
                match w.to_ascii_lowercase().as_str() {
                    "" => Err(self.err("expected a value")),
                    "true" => Ok(Value::Bool(true)),
                    "false" => Ok(Value::Bool(false)),
                    _ => Ok(Value::Num(w)),
                }
            }
            None => Err(self.err("expected a value")),
        }
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::Str(s) | Value::Num(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn size_of(key: &str, v: &Value) -> Result<u64, String> {
    let t = text(v).ok_or_else(|| format!("\"{key}\" must be a size such as \"100G\""))?;
    let t = t.trim_end_matches(['L', 'l']);
    crate::spec::parse_size(t).map_err(|e| format!("\"{key}\": {e}"))
}

/// Keys of MSE that Lacquer accepts without using, and why.
fn meaningless(key: &str) -> Option<&'static str> {
    Some(match key {
        "database_size" => "object records live in the store files, not in a separate database",
        "database_readahead" | "database_sync" => "there is no separate metadata database",
        "tables" | "books_default" => "there is no separate metadata database",
        "memcache_chunksize" | "memcache_metachunksize" => {
            "the memory tier allocates per object body piece"
        }
        "mode" | "align" | "aio_db" | "aio_requests" | "journal_size" | "segment_size" => {
            "the store's layout is fixed by its own format"
        }
        "waterlevel" | "waterlevel_hysterisis" | "waterlevel_minchunksize" => {
            "space is made by the cache's LRU eviction"
        }
        "default_stores" | "default_ttl" | "default_grace" | "default_keep" => {
            "choose stores in VCL (beresp.storage, mse.set_stores())"
        }
        _ => return None,
    })
}

/// Check the keys of a group: known ones pass, meaningless ones are noted,
/// others are an error.
fn keys(
    what: &str,
    g: &BTreeMap<String, Value>,
    known: &[&str],
    ignored: &mut Vec<String>,
) -> Result<(), String> {
    for k in g.keys() {
        if known.contains(&k.as_str()) {
            continue;
        }
        match meaningless(k) {
            Some(why) => ignored.push(format!("{what}.{k}: ignored ({why})")),
            None => {
                return Err(format!(
                    "{what}: unknown setting \"{k}\" (known: {})",
                    known.join(", ")
                ));
            }
        }
    }
    Ok(())
}

fn group<'a>(what: &str, v: &'a Value) -> Result<&'a BTreeMap<String, Value>, String> {
    match v {
        Value::Group(g) => Ok(g),
        _ => Err(format!("{what} must be a group {{ ... }}")),
    }
}

fn list<'a>(what: &str, v: &'a Value) -> Result<Vec<&'a Value>, String> {
    match v {
        Value::List(l) => Ok(l.iter().collect()),
        Value::Group(_) => Ok(vec![v]),
        _ => Err(format!("{what} must be a list ( {{ ... }}, ... )")),
    }
}

impl MseConf {
    /// Parse the text of an `mse.conf`.
    pub fn parse(src: &str) -> Result<MseConf, String> {
        let mut p = Parser {
            s: src.as_bytes(),
            at: 0,
            line: 1,
        };
        let top = p.settings(None)?;
        let mut ignored = Vec::new();
        let env = top
            .get("env")
            .ok_or("no \"env\" group: an mse.conf starts with env: { id = \"mse\"; ... }")?;
        keys("top level", &top, &["env"], &mut ignored)?;
        let env = group("env", env)?;
        keys(
            "env",
            env,
            &["id", "memcache_size", "memory_target", "books"],
            &mut ignored,
        )?;
        let id = env
            .get("id")
            .and_then(text)
            .unwrap_or_else(|| "mse".to_owned());
        let memcache_size = match env.get("memcache_size") {
            None => None,
            Some(v) if text(v).is_some_and(|t| t == "auto") => None,
            Some(v) => Some(size_of("env.memcache_size", v)?),
        };
        let memory_target = match env.get("memory_target") {
            None => 80,
            Some(v) => {
                let t = text(v).unwrap_or_default();
                let n = t.trim_end_matches('%').trim();
                match n.parse::<u64>() {
                    Ok(p) if (1..=100).contains(&p) => p,
                    _ => {
                        return Err(format!(
                            "env.memory_target \"{t}\": give a percentage of RAM from 1% to 100%"
                        ));
                    }
                }
            }
        };
        let mut stores = Vec::new();
        for (bi, b) in list("env.books", env.get("books").ok_or("env has no \"books\"")?)?
            .into_iter()
            .enumerate()
        {
            let what = format!("books[{bi}]");
            let b = group(&what, b)?;
            keys(&what, b, &["id", "directory", "stores"], &mut ignored)?;
            let dir = b.get("directory").and_then(text).map(PathBuf::from);
            let Some(sv) = b.get("stores") else {
                return Err(format!("{what} has no \"stores\""));
            };
            for (si, s) in list(&format!("{what}.stores"), sv)?.into_iter().enumerate() {
                let what = format!("{what}.stores[{si}]");
                let s = group(&what, s)?;
                keys(&what, s, &["id", "filename", "size"], &mut ignored)?;
                let filename = s
                    .get("filename")
                    .and_then(text)
                    .ok_or_else(|| format!("{what} has no \"filename\""))?;
                let size = size_of(
                    &format!("{what}.size"),
                    s.get("size")
                        .ok_or_else(|| format!("{what} has no \"size\""))?,
                )?;
                let id = s
                    .get("id")
                    .and_then(text)
                    .unwrap_or_else(|| format!("store{}", stores.len()));
                if id.is_empty() {
                    return Err(format!(
                        "{what}: store id is empty: name the store (id = \"store-1\";) or leave id out"
                    ));
                }
                if stores.iter().any(|x: &MseStore| x.id == id) {
                    return Err(format!("{what}: store id \"{id}\" is used twice"));
                }
                stores.push(MseStore {
                    id,
                    filename: PathBuf::from(filename),
                    size,
                    book_dir: dir.clone(),
                });
            }
        }
        if stores.is_empty() {
            return Err("no stores are configured (books[].stores is empty)".into());
        }
        ignored.sort();
        ignored.dedup();
        Ok(MseConf {
            id,
            memcache_size,
            memory_target,
            stores,
            ignored,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUIDE: &str = r#"
# The object-store guide's file.
env: {
    id = "mse";
    memcache_size = "auto";
    books = ( {
        id = "book";
        directory = "/var/lib/mse/book";
        database_size = "1G";   /* meaningless here */
        stores = ( {
            id = "store-1";
            filename = "/var/lib/mse/stores/disk1/store-1.dat";
            size = "100G";
        }, {
            id = "store-2";
            filename = "/var/lib/mse/stores/disk2/store-2.dat";
            size = 200G;
        } );
    } );
};
"#;

    #[test]
    fn parses_the_guides_file() {
        let c = MseConf::parse(GUIDE).unwrap();
        assert_eq!(c.id, "mse");
        assert_eq!(c.memcache_size, None);
        assert_eq!(c.memory_target, 80);
        assert_eq!(c.stores.len(), 2);
        assert_eq!(c.stores[0].id, "store-1");
        assert_eq!(c.stores[1].size, 200 << 30);
        assert_eq!(
            c.stores[0].book_dir.as_deref(),
            Some(std::path::Path::new("/var/lib/mse/book"))
        );
        assert_eq!(c.ignored.len(), 1);
        assert!(c.ignored[0].starts_with("books[0].database_size: ignored"));
    }

    #[test]
    fn sizes_targets_and_errors() {
        let c = MseConf::parse(
            "env: { memcache_size = \"2G\"; memory_target = \"50%\"; books = ({ stores = ({ filename = \"/x\"; size = \"1G\"; }); }); }",
        )
        .unwrap();
        assert_eq!(c.memcache_size, Some(2 << 30));
        assert_eq!(c.memory_target, 50);
        assert_eq!(c.stores[0].id, "store0");
        for (bad, msg) in [
            ("", "no \"env\""),
            ("env: { books = (); }", "no stores"),
            (
                "env: { bogus = 1; books = (); }",
                "unknown setting \"bogus\"",
            ),
            (
                "env: { books = ({ stores = ({ size = \"1G\"; }); }); }",
                "no \"filename\"",
            ),
            (
                "env: { books = ({ stores = ({ filename = \"/x\"; size = \"1Q\"; }); }); }",
                "unknown unit",
            ),
            (
                // Found by the mse_conf fuzz target: accepted before.
                "env: { books = ({ stores = ({ id = \"\"; filename = \"/x\"; size = \"1G\"; }); }); }",
                "store id is empty",
            ),
            ("env: { id = \"a\"; id = \"b\"; }", "set twice"),
            ("env: { id = \"a ", "unterminated"),
            ("env: { memory_target = 0; books = (); }", "percentage"),
        ] {
            let e = MseConf::parse(bad).unwrap_err();
            assert!(e.contains(msg), "{bad:?}: {e}");
        }
    }
}
