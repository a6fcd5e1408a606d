//! Parsing of varnishd `-s` storage arguments: `[name=]kind[,options]`.
//!
//! `malloc` (and its alias `default`) and varnishd's test store `debug`
//! (malloc with an optional `lessspace`) can be created here; `file`,
//! `persistent`, `umem` and `deprecated_persistent` are recognised so that the
//! error says they are unavailable rather than unknown. Unnamed stores are called
//! `s0`, `s1`, … in argument order, and a `Transient` store (unlimited malloc)
//! is added unless one is defined explicitly, as varnishd does.

use std::fmt;

/// The kind of store a `-s` argument asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageKind {
    /// In-memory store (`malloc` or `default`).
    Malloc,
    /// varnishd's `debug` store: malloc that, with `lessspace`, grants one
    /// byte less than each allocation asks for.
    Debug { less_space: bool },
}

/// One parsed `-s` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageSpec {
    /// Store name (`s0`, `Transient`, or the given `NAME=`).
    pub name: String,
    /// Store kind.
    pub kind: StorageKind,
    /// Size limit in bytes, `None` when unlimited.
    pub size: Option<u64>,
}

impl StorageSpec {
    /// Create the store this spec describes.
    pub fn build(&self) -> std::sync::Arc<dyn crate::Stevedore> {
        match self.kind {
            StorageKind::Malloc => {
                std::sync::Arc::new(crate::MallocStore::new(&self.name, self.size))
            }
            StorageKind::Debug { less_space } => {
                std::sync::Arc::new(crate::MallocStore::debug(&self.name, self.size, less_space))
            }
        }
    }
}

/// Why a `-s` argument was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageSpecError {
    /// The argument as given.
    pub arg: String,
    /// What is wrong with it and what to do.
    pub reason: String,
}

impl fmt::Display for StorageSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "-s {}: {}", self.arg, self.reason)
    }
}

impl std::error::Error for StorageSpecError {}

/// Parse a byte size as varnishd does: a number (fractions allowed) followed by an
/// optional unit `b`, `k`, `m`, `g`, `t` or `p` (any case, powers of 1024), which
/// may itself be followed by `b` (`10MB`). A percentage is refused: it only means
/// something for file storage.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("missing size".into());
    }
    if t.ends_with('%') {
        return Err(format!(
            "size \"{s}\": percentages are only meaningful for file storage; give a size such as 256m or 1G"
        ));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("size \"{s}\": invalid number; expected e.g. 100m, 2G or 1048576"))?;
    let unit = unit.trim();
    let lower = unit.to_ascii_lowercase();
    let mult: f64 = match lower.as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1024.0,
        "m" | "mb" => 1024.0 * 1024.0,
        "g" | "gb" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" => 1024.0f64.powi(4),
        "p" | "pb" => 1024.0f64.powi(5),
        _ => {
            return Err(format!(
                "size \"{s}\": unknown unit \"{unit}\"; use b, k, m, g, t or p"
            ));
        }
    };
    let bytes = (value * mult).round();
    if !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(format!("size \"{s}\": too large"));
    }
    Ok(bytes as u64)
}

fn valid_name(n: &str) -> bool {
    let mut chars = n.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn parse_one(arg: &str, index: usize) -> Result<StorageSpec, StorageSpecError> {
    let err = |reason: String| StorageSpecError {
        arg: arg.to_owned(),
        reason,
    };
    let (name, rest) = match arg.split_once('=') {
        Some((n, r)) => {
            if !valid_name(n) {
                return Err(err(format!(
                    "\"{n}\" is not a valid storage name (letters, digits, '_' and '-', starting with a letter)"
                )));
            }
            (n.to_owned(), r)
        }
        None => (format!("s{index}"), arg),
    };
    let mut parts = rest.split(',');
    let kind = parts.next().unwrap_or("").trim();
    let mut opts: Vec<&str> = parts.collect();
    let mut store_kind = StorageKind::Malloc;
    if kind == "debug" {
        // The debug store takes its own flag, then malloc's arguments.
        let less_space = opts.iter().any(|o| o.trim() == "lessspace");
        opts.retain(|o| o.trim() != "lessspace");
        store_kind = StorageKind::Debug { less_space };
    }
    match kind {
        "malloc" | "default" | "debug" => {
            let size = match opts.as_slice() {
                [] => None,
                [s] if s.trim().is_empty() => None,
                [s] => Some(parse_size(s).map_err(err)?),
                _ => {
                    return Err(err(format!(
                        "too many arguments to malloc ({}); usage: -s [name=]malloc[,size]",
                        opts.len()
                    )));
                }
            };
            if name == "Transient" || size.is_none() || size.is_some_and(|s| s > 0) {
                Ok(StorageSpec {
                    name,
                    kind: store_kind,
                    size,
                })
            } else {
                Err(err(
                    "a malloc size of 0 leaves no room for any object".into()
                ))
            }
        }
        "file" | "persistent" | "deprecated_persistent" | "umem" => Err(err(format!(
            "storage kind \"{kind}\" is not available in lacquer; use malloc (-s malloc,SIZE)"
        ))),
        "" => Err(err(
            "missing storage kind; usage: -s [name=]malloc[,size]".into()
        )),
        other => Err(err(format!(
            "unknown storage kind \"{other}\"; usage: -s [name=]malloc[,size]"
        ))),
    }
}

/// Parse all `-s` arguments in order. With no store other than `Transient` given,
/// varnishd's default `-s default,100m` applies (`s0`, malloc, 100 MiB). A
/// `Transient` store (unlimited malloc) is appended unless an argument names it.
pub fn parse_storage_args<S: AsRef<str>>(args: &[S]) -> Result<Vec<StorageSpec>, StorageSpecError> {
    let mut out: Vec<StorageSpec> = Vec::new();
    let mut unnamed = 0usize;
    for a in args {
        let a = a.as_ref();
        let spec = parse_one(a, unnamed)?;
        if !a.contains('=') {
            unnamed += 1;
        }
        if out.iter().any(|s| s.name == spec.name) {
            return Err(StorageSpecError {
                arg: a.to_owned(),
                reason: format!("storage \"{}\" is already defined", spec.name),
            });
        }
        out.push(spec);
    }
    if out.iter().all(|s| s.name == "Transient") {
        out.insert(
            0,
            StorageSpec {
                name: "s0".into(),
                kind: StorageKind::Malloc,
                size: Some(100 * 1024 * 1024),
            },
        );
    }
    if !out.iter().any(|s| s.name == "Transient") {
        out.push(StorageSpec {
            name: "Transient".into(),
            kind: StorageKind::Malloc,
            size: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1024").unwrap(), 1024);
        assert_eq!(parse_size("1k").unwrap(), 1024);
        assert_eq!(parse_size("10MB").unwrap(), 10 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5m").unwrap(), 3 << 19);
        assert_eq!(parse_size("2t").unwrap(), 2 << 40);
        assert_eq!(parse_size("100b").unwrap(), 100);
        assert!(parse_size("banana").unwrap_err().contains("invalid number"));
        assert!(
            parse_size("10x")
                .unwrap_err()
                .contains("unknown unit \"x\"")
        );
        assert!(parse_size("50%").unwrap_err().contains("percentages"));
        assert!(parse_size("").is_err());
    }

    #[test]
    fn specs() {
        let v = parse_storage_args(&["malloc,256m"]).unwrap();
        assert_eq!(
            v,
            vec![
                StorageSpec {
                    name: "s0".into(),
                    kind: StorageKind::Malloc,
                    size: Some(256 << 20)
                },
                StorageSpec {
                    name: "Transient".into(),
                    kind: StorageKind::Malloc,
                    size: None
                },
            ]
        );
        let v = parse_storage_args(&["big=malloc,1g", "default", "Transient=malloc,1m"]).unwrap();
        assert_eq!(v[0].name, "big");
        assert_eq!(v[1].name, "s0");
        assert_eq!(v[1].size, None);
        assert_eq!(v[2].name, "Transient");
        assert_eq!(v[2].size, Some(1 << 20));
        assert_eq!(v.len(), 3);
        let v = parse_storage_args::<&str>(&[]).unwrap();
        assert_eq!(v[0].size, Some(100 << 20));
        assert_eq!(v[1].name, "Transient");
    }

    #[test]
    fn debug_store() {
        let v = parse_storage_args(&["Transient=debug,lessspace"]).unwrap();
        let t = v.iter().find(|s| s.name == "Transient").unwrap();
        assert_eq!(t.kind, StorageKind::Debug { less_space: true });
        assert_eq!(t.size, None);
        let st = t.build();
        assert_eq!((st.kind(), st.grant(100)), ("debug", 99));
        let v = parse_storage_args(&["debug,10m"]).unwrap();
        assert_eq!(v[0].kind, StorageKind::Debug { less_space: false });
        assert_eq!(v[0].size, Some(10 << 20));
        assert!(parse_storage_args(&["debug,lessspace,1m,2"]).is_err());
    }

    #[test]
    fn build_stores() {
        let v = parse_storage_args(&["malloc,1k"]).unwrap();
        let stores: Vec<_> = v.iter().map(StorageSpec::build).collect();
        assert_eq!(stores[0].name(), "s0");
        assert_eq!(stores[0].limit(), Some(1024));
        assert!(stores[0].try_alloc(2048).is_err());
        assert_eq!(stores[1].name(), "Transient");
        assert_eq!(stores[1].limit(), None);
    }

    #[test]
    fn bad_specs() {
        let e = parse_storage_args(&["foo"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "-s foo: unknown storage kind \"foo\"; usage: -s [name=]malloc[,size]"
        );
        let e = parse_storage_args(&["malloc,banana"]).unwrap_err();
        assert!(
            e.to_string().contains("size \"banana\": invalid number"),
            "{e}"
        );
        let e = parse_storage_args(&["file,/tmp/x,1g"]).unwrap_err();
        assert!(e.to_string().contains("\"file\" is not available"), "{e}");
        let e = parse_storage_args(&["persistent,/tmp/x,1g"]).unwrap_err();
        assert!(e.to_string().contains("not available"), "{e}");
        let e = parse_storage_args(&["a=malloc", "a=malloc"]).unwrap_err();
        assert!(e.to_string().contains("already defined"), "{e}");
        let e = parse_storage_args(&["1x=malloc"]).unwrap_err();
        assert!(e.to_string().contains("not a valid storage name"), "{e}");
        assert!(parse_storage_args(&["malloc,1m,2"]).is_err());
        assert!(parse_storage_args(&["malloc,0"]).is_err());
        assert!(parse_storage_args(&["x="]).is_err());
    }
}
