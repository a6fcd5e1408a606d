//! Parsing of varnishd `-s` storage arguments: `[name=]kind[,options]`.
//!
//! `malloc` (and its alias `default`), varnishd's test store `debug`
//! (malloc with an optional `lessspace`) and `file` can be created here;
//! `disk,PATH,SIZE[,journal=DIR]` and `mse,CONF` make the persistent store
//! (`crate::disk`); an `mse` argument stands for the memory tier and every
//! store its `mse.conf` lists, each a spec of its own.
//! Other kinds (`persistent`, `umem`, ...) are refused with varnishd's
//! "Unknown storage method", as a Linux varnishd 7.1 refuses them; malloc
//! sizes, names and duplicates are checked with its texts too. A `file` argument is
//! checked here with varnishd's rules and messages; its file is opened and
//! its size decided when the store is built ([`StorageSpec::build`]), as
//! varnishd does them in that order. Unnamed stores are called
//! `s0`, `s1`, … in argument order, and a `Transient` store (unlimited malloc)
//! is added unless one is defined explicitly, as varnishd does.

use std::fmt;

use crate::file::Advice;

/// The kind of store a `-s` argument asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageKind {
    /// In-memory store (`malloc` or `default`).
    Malloc,
    /// varnishd's `debug` store: malloc that, with `lessspace`, grants one
    /// byte less than each allocation asks for.
    Debug { less_space: bool },
    /// The memory tier of an `mse.conf`: malloc, used when VCL names it.
    MemoryTier,
    /// A file on disk (`file,PATH[,SIZE[,GRANULARITY[,ADVICE]]]`).
    File {
        /// The file, or a directory to make an anonymous file in.
        path: String,
        /// The SIZE argument as given (parsed when the file is opened).
        size: Option<String>,
        /// The allocation unit asked for (raised to the file system's block
        /// size when opened).
        granularity: u64,
        /// How the file will be read.
        advice: Advice,
    },
    /// The persistent store (`disk,PATH,SIZE` or a store of an `mse.conf`).
    Disk {
        /// `mse` or `disk`, as the argument named it.
        kind: &'static str,
        /// Where and how large.
        cfg: crate::disk::DiskConfig,
    },
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
    /// What to tell the operator once at startup about this store (keys of
    /// an `mse.conf` that mean nothing here).
    pub notes: Vec<String>,
}

impl StorageSpec {
    /// Create the store this spec describes (a file store opens, and may
    /// create, its file).
    pub fn build(&self) -> Result<std::sync::Arc<dyn crate::Stevedore>, StorageSpecError> {
        for n in &self.notes {
            eprintln!("Storage {}: {n}", self.name);
        }
        Ok(match &self.kind {
            StorageKind::Disk { kind, cfg } => {
                std::sync::Arc::new(crate::DiskStore::open(&self.name, kind, cfg).map_err(
                    |reason| StorageSpecError {
                        arg: String::new(),
                        reason,
                        verbatim: true,
                    },
                )?)
            }
            StorageKind::Malloc => {
                std::sync::Arc::new(crate::MallocStore::new(&self.name, self.size))
            }
            StorageKind::MemoryTier => {
                std::sync::Arc::new(crate::MallocStore::tier(&self.name, self.size))
            }
            StorageKind::Debug { less_space } => std::sync::Arc::new(crate::MallocStore::debug(
                &self.name,
                self.size,
                *less_space,
            )),
            StorageKind::File {
                path,
                size,
                granularity,
                advice,
            } => std::sync::Arc::new(
                crate::FileStore::open(&self.name, path, size.as_deref(), *granularity, *advice)
                    .map_err(|reason| StorageSpecError {
                        arg: String::new(),
                        reason,
                        verbatim: true,
                    })?,
            ),
        })
    }
}

/// Why a `-s` argument was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageSpecError {
    /// The argument as given.
    pub arg: String,
    /// What is wrong with it and what to do.
    pub reason: String,
    /// The reason is varnishd's own message, which names its context
    /// (`(-sfile) …`): it is shown alone.
    pub verbatim: bool,
}

impl fmt::Display for StorageSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.verbatim {
            f.write_str(&self.reason)
        } else {
            write!(f, "-s {}: {}", self.arg, self.reason)
        }
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
    vnum_bytes(t).map_err(|e| match e {
        VNUM_INVALID => {
            format!("size \"{s}\": invalid number; expected e.g. 100m, 2G or 1048576")
        }
        VNUM_UNIT => format!(
            "size \"{s}\": unknown unit \"{}\"; use b, k, m, g, t or p",
            t.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
                .trim()
        ),
        other => format!("size \"{s}\": {other}"),
    })
}

const VNUM_INVALID: &str = "Invalid number";
const VNUM_UNIT: &str = "Unknown BYTES unit of measurement ([KMGTP][B])";

/// A byte count as varnishd's `VNUM_2bytes` reads it: a decimal number
/// (fraction allowed), then optionally one space and a unit `b k m g t p`
/// (any case, powers of 1024) itself optionally followed by `b`. Errors
/// are varnishd's texts.
pub fn vnum_bytes(s: &str) -> Result<u64, &'static str> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, rest) = s.split_at(split);
    if !num.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return Err(VNUM_INVALID);
    }
    let value: f64 = num.parse().map_err(|_| VNUM_INVALID)?;
    let unit = match rest.strip_prefix(' ') {
        Some(u) if !u.is_empty() => u,
        _ => rest,
    };
    let mut chars = unit.chars();
    let shift = match chars.next().map(|c| c.to_ascii_lowercase()) {
        None => 0,
        Some('b') => 0,
        Some('k') => 10,
        Some('m') => 20,
        Some('g') => 30,
        Some('t') => 40,
        Some('p') => 50,
        Some(_) => return Err(VNUM_UNIT),
    };
    let tail = chars.as_str();
    if !(tail.is_empty() || (shift > 0 && tail.eq_ignore_ascii_case("b"))) {
        return Err(VNUM_UNIT);
    }
    let bytes =
        (value * f64::from(1u32 << (shift % 30)) * f64::from(1u32 << (shift - shift % 30))).round();
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Ok(u64::MAX);
    }
    Ok(bytes as u64)
}

/// The arguments after the kind, split as varnishd splits them: at commas,
/// and within each at blanks (an empty field stays an empty argument).
fn split_args(rest: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for field in rest {
        let mut words = field.split_whitespace().peekable();
        if words.peek().is_none() {
            out.push(String::new());
        }
        out.extend(words.map(str::to_owned));
    }
    out
}

/// The options of `file` (`PATH[,SIZE[,GRANULARITY[,ADVICE]]]`) checked as
/// varnishd checks them before touching the file.
fn parse_file(opts: &[&str]) -> Result<StorageKind, String> {
    let av = split_args(opts);
    if av.len() > 4 {
        return Err("(-sfile) too many arguments".into());
    }
    let Some(path) = av.first().filter(|p| !p.is_empty()) else {
        return Err("(-sfile) path is mandatory".into());
    };
    let size = av.get(1).filter(|s| !s.is_empty()).cloned();
    let granularity = match av.get(2).filter(|g| !g.is_empty()) {
        Some(g) => vnum_bytes(g).map_err(|e| format!("(-sfile) granularity \"{g}\": {e}"))?,
        None => 1,
    };
    let advice = match av.get(3) {
        Some(a) => Advice::parse(a).ok_or_else(|| format!("(-s file) invalid advice: \"{a}\""))?,
        None => Advice::Random,
    };
    Ok(StorageKind::File {
        path: path.clone(),
        size,
        granularity,
        advice,
    })
}

/// The options of `disk`: `PATH,SIZE[,journal=DIR]`.
fn parse_disk(opts: &[&str]) -> Result<crate::disk::DiskConfig, String> {
    let usage = "usage: -s [name=]disk,PATH,SIZE[,journal=DIR]";
    let (path, size, rest) = match opts {
        [p, s, rest @ ..] if !p.trim().is_empty() => (p.trim(), s.trim(), rest),
        _ => return Err(format!("a path and a size are required; {usage}")),
    };
    let size = parse_size(size)?;
    let mut journal_dir = None;
    for o in rest {
        match o.trim().split_once('=') {
            Some(("journal", d)) if !d.is_empty() => journal_dir = Some(d.into()),
            _ => return Err(format!("unknown option \"{o}\"; {usage}")),
        }
    }
    Ok(crate::disk::DiskConfig {
        path: path.into(),
        size: Some(size),
        journal_dir,
    })
}

/// RAM of this machine in bytes (`/proc/meminfo`), for `memcache_size =
/// "auto"` and the `memory_target` parameter.
pub fn total_ram() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// `mse,CONF`: the memory tier (named after the environment's id) and the
/// configured stores, in the file's order.
fn parse_mse(opts: &[&str]) -> Result<Vec<StorageSpec>, String> {
    let [conf] = opts else {
        return Err("usage: -s mse,/path/to/mse.conf".into());
    };
    let conf = conf.trim();
    let text = std::fs::read_to_string(conf)
        .map_err(|e| format!("cannot read {conf} ({e}); give the path of an mse.conf"))?;
    let c = crate::disk::conf::MseConf::parse(&text).map_err(|e| format!("{conf}: {e}"))?;
    let mem = match c.memcache_size {
        Some(n) => n,
        None => total_ram()
            .map(|r| r / 100 * c.memory_target)
            .ok_or_else(|| {
                format!("{conf}: memcache_size is auto but the RAM size is unknown; give a size")
            })?,
    };
    let mut out = vec![StorageSpec {
        name: c.id.clone(),
        kind: StorageKind::MemoryTier,
        size: Some(mem),
        notes: c.ignored.clone(),
    }];
    for st in c.stores {
        if !valid_name(&st.id) {
            return Err(format!(
                "{conf}: store id \"{}\" is not a valid storage name (letters, digits, '_' and '-', starting with a letter)",
                st.id
            ));
        }
        out.push(StorageSpec {
            name: st.id,
            kind: StorageKind::Disk {
                kind: "mse",
                cfg: crate::disk::DiskConfig {
                    path: st.filename,
                    size: Some(st.size),
                    journal_dir: st.book_dir,
                },
            },
            size: Some(st.size),
            notes: Vec::new(),
        });
    }
    Ok(out)
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
        verbatim: true,
    };
    // As mgt_stevedore.c: a '=' before the first comma ends a name.
    let named = match (arg.find('='), arg.find(',')) {
        (Some(e), Some(c)) => e < c,
        (Some(_), None) => true,
        _ => false,
    };
    let (name, rest) = match arg.split_once('=').filter(|_| named) {
        Some((n, r)) => (Some(n), r),
        None => (None, arg),
    };
    let mut parts = rest.split(',');
    let kind = parts.next().unwrap_or("").trim();
    let mut opts: Vec<&str> = parts.collect();
    if arg.is_empty() {
        return Err(err("-s argument lacks strategy {malloc, file, ...}".into()));
    }
    if name.is_some() && rest.is_empty() {
        return Err(err(format!("Empty named -s argument \"{arg}\"")));
    }
    if !matches!(
        kind,
        "malloc" | "default" | "debug" | "file" | "disk" | "mse"
    ) {
        return Err(err(format!("Unknown storage method \"{kind}\"")));
    }
    let name = match name {
        Some(n) if !valid_name(n) => {
            return Err(err(format!("invalid -s name \"{n}\"=[...]")));
        }
        Some(n) => n.to_owned(),
        None => format!("s{index}"),
    };
    let mut store_kind = StorageKind::Malloc;
    if kind == "debug" {
        // The debug store takes its own flag, then malloc's arguments.
        let less_space = opts.iter().any(|o| o.trim() == "lessspace");
        opts.retain(|o| o.trim() != "lessspace");
        store_kind = StorageKind::Debug { less_space };
    }
    match kind {
        "malloc" | "default" | "debug" => {
            // storage_malloc.c's checks and texts.
            let size = match opts.as_slice() {
                [] => None,
                [""] => None,
                [s] => {
                    let n = vnum_bytes(s)
                        .map_err(|e| err(format!("(-smalloc) size \"{s}\": {e}")))?;
                    if n < 1024 * 1024 {
                        return Err(err(format!(
                            "(-smalloc) size \"{s}\": too small, did you forget to specify M or G?"
                        )));
                    }
                    Some(n)
                }
                _ => return Err(err("(-smalloc) too many arguments".into())),
            };
            Ok(StorageSpec {
                name,
                kind: store_kind,
                size,
                notes: Vec::new(),
            })
        }
        "mse" => Err(err(
            "an mse store takes its names from its mse.conf: give -s mse,/path/mse.conf without NAME=".into(),
        )),
        "disk" => parse_disk(&opts)
            .map(|cfg| StorageSpec {
                name,
                size: cfg.size,
                kind: StorageKind::Disk { kind: "disk", cfg },
                notes: Vec::new(),
            })
            .map_err(err),
        // `file`, the one kind left after the check above.
        _ => parse_file(&opts)
            .map(|kind| StorageSpec {
                name,
                kind,
                size: None,
                notes: Vec::new(),
            })
            .map_err(|reason| StorageSpecError {
                arg: arg.to_owned(),
                reason,
                verbatim: true,
            }),
    }
}

/// Parse all `-s` arguments in order. With no `-s` argument at all,
/// varnishd's default `-s default,100m` applies (`s0`, malloc, 100 MiB); any
/// `-s` (a `Transient=` one alone too) replaces it, as varnishd's
/// `s_arg_given`, so with only `Transient` given every object goes there. A
/// `Transient` store (unlimited malloc) is appended unless an argument names it.
pub fn parse_storage_args<S: AsRef<str>>(args: &[S]) -> Result<Vec<StorageSpec>, StorageSpecError> {
    let mut out: Vec<StorageSpec> = Vec::new();
    let mut unnamed = 0usize;
    for a in args {
        let a = a.as_ref();
        let specs = match a.split_once(',') {
            Some(("mse", rest)) => {
                parse_mse(&rest.split(',').collect::<Vec<_>>()).map_err(|reason| {
                    StorageSpecError {
                        arg: a.to_owned(),
                        reason,
                        verbatim: false,
                    }
                })?
            }
            _ => {
                let spec = parse_one(a, unnamed)?;
                if !a.contains('=') {
                    unnamed += 1;
                }
                vec![spec]
            }
        };
        for spec in specs {
            if out.iter().any(|s| s.name == spec.name) {
                return Err(StorageSpecError {
                    arg: a.to_owned(),
                    reason: format!("(-s {a}) '{}' is already defined", spec.name),
                    verbatim: true,
                });
            }
            out.push(spec);
        }
    }
    if args.is_empty() {
        out.insert(
            0,
            StorageSpec {
                name: "s0".into(),
                kind: StorageKind::Malloc,
                size: Some(100 * 1024 * 1024),
                notes: Vec::new(),
            },
        );
    }
    if !out.iter().any(|s| s.name == "Transient") {
        out.push(StorageSpec {
            name: "Transient".into(),
            kind: StorageKind::Malloc,
            size: None,
            notes: Vec::new(),
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
                    size: Some(256 << 20),
                    notes: vec![],
                },
                StorageSpec {
                    name: "Transient".into(),
                    kind: StorageKind::Malloc,
                    size: None,
                    notes: vec![],
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
        // Any -s replaces the default store, a Transient one alone too.
        let v = parse_storage_args(&["Transient=malloc,1m"]).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].name.as_str(), v[0].size),
            ("Transient", Some(1 << 20))
        );
    }

    #[test]
    fn debug_store() {
        let v = parse_storage_args(&["Transient=debug,lessspace"]).unwrap();
        let t = v.iter().find(|s| s.name == "Transient").unwrap();
        assert_eq!(t.kind, StorageKind::Debug { less_space: true });
        assert_eq!(t.size, None);
        let st = t.build().unwrap();
        assert_eq!((st.kind(), st.grant(100)), ("debug", 99));
        let v = parse_storage_args(&["debug,10m"]).unwrap();
        assert_eq!(v[0].kind, StorageKind::Debug { less_space: false });
        assert_eq!(v[0].size, Some(10 << 20));
        assert!(parse_storage_args(&["debug,lessspace,1m,2"]).is_err());
    }

    #[test]
    fn build_stores() {
        let v = parse_storage_args(&["malloc,1m"]).unwrap();
        let stores: Vec<_> = v.iter().map(|s| s.build().unwrap()).collect();
        assert_eq!(stores[0].name(), "s0");
        assert_eq!(stores[0].limit(), Some(1 << 20));
        assert!(stores[0].try_alloc(2 << 20).is_err());
        assert_eq!(stores[1].name(), "Transient");
        assert_eq!(stores[1].limit(), None);
    }

    #[test]
    fn varnishd_byte_counts() {
        assert_eq!(vnum_bytes("10M"), Ok(10 << 20));
        assert_eq!(vnum_bytes("10mb"), Ok(10 << 20));
        assert_eq!(vnum_bytes("1.5G"), Ok(3 << 29));
        assert_eq!(vnum_bytes("2047k"), Ok(2047 << 10));
        assert_eq!(vnum_bytes("10 M"), Ok(10 << 20));
        assert_eq!(vnum_bytes("1048576"), Ok(1 << 20));
        assert_eq!(vnum_bytes("99999999999999P"), Ok(u64::MAX));
        for bad in ["", "-5M", "banana", "M"] {
            assert_eq!(vnum_bytes(bad), Err(VNUM_INVALID), "{bad}");
        }
        for bad in ["10MiB", "1e7", "10Mx", "50%", "10bb", "10 "] {
            assert_eq!(vnum_bytes(bad), Err(VNUM_UNIT), "{bad}");
        }
    }

    #[test]
    fn file_specs_as_varnishd() {
        let v = parse_storage_args(&["file,/tmp/x,10M"]).unwrap();
        assert_eq!(
            v[0].kind,
            StorageKind::File {
                path: "/tmp/x".into(),
                size: Some("10M".into()),
                granularity: 1,
                advice: Advice::Random
            }
        );
        let v = parse_storage_args(&["Transient=file, /d ,1g,8k,sequential"]).unwrap();
        assert_eq!(v[0].name, "Transient");
        assert_eq!(
            v[0].kind,
            StorageKind::File {
                path: "/d".into(),
                size: Some("1g".into()),
                granularity: 8192,
                advice: Advice::Sequential
            }
        );
        let msg = |a: &str| parse_storage_args(&[a]).unwrap_err().to_string();
        assert_eq!(msg("file"), "(-sfile) path is mandatory");
        assert_eq!(msg("file,,10M"), "(-sfile) path is mandatory");
        assert_eq!(
            msg("file,/x,10M,4k,random,x"),
            "(-sfile) too many arguments"
        );
        assert_eq!(
            msg("file,/x,10M,4x,foo"),
            "(-sfile) granularity \"4x\": Unknown BYTES unit of measurement ([KMGTP][B])"
        );
        assert_eq!(
            msg("file,/x,10 M"),
            "(-sfile) granularity \"M\": Invalid number"
        );
        assert_eq!(
            msg("file,/x,10M,4k,RANDOM"),
            "(-s file) invalid advice: \"RANDOM\""
        );
        assert_eq!(msg("file,/x,10M,,"), "(-s file) invalid advice: \"\"");
    }

    #[test]
    fn disk_and_mse_specs() {
        let v = parse_storage_args(&["d=disk,/var/cache/x.dat,1G,journal=/j"]).unwrap();
        assert_eq!(v[0].name, "d");
        assert_eq!(v[0].size, Some(1 << 30));
        let StorageKind::Disk { kind, cfg } = &v[0].kind else {
            panic!("{:?}", v[0].kind);
        };
        assert_eq!(*kind, "disk");
        assert_eq!(cfg.path, std::path::Path::new("/var/cache/x.dat"));
        assert_eq!(cfg.journal_dir.as_deref(), Some(std::path::Path::new("/j")));
        let msg = |a: &str| parse_storage_args(&[a]).unwrap_err().to_string();
        assert!(msg("disk,/x").contains("a path and a size are required"));
        assert!(msg("disk,/x,1G,bogus").contains("unknown option \"bogus\""));
        assert!(msg("disk,/x,1Q").contains("unknown unit"));
        assert!(msg("mse,/nonexistent/mse.conf").contains("cannot read /nonexistent/mse.conf"));
        assert!(msg("m=mse,/x").contains("takes its names from its mse.conf"));
        // An mse.conf: the memory tier and each store, in order.
        let dir = std::env::temp_dir().join(format!("lacquer-spec-mse-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("mse.conf");
        std::fs::write(
            &conf,
            "env: { id = \"mem\"; memcache_size = \"64M\"; database_size = \"1G\";\n\
             books = ({ directory = \"/b\"; stores = ({ id = \"st1\"; filename = \"/s1\"; size = \"2G\"; }); }); };",
        )
        .unwrap();
        let v = parse_storage_args(&[format!("mse,{}", conf.display())]).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            v.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["mem", "st1", "Transient"]
        );
        assert_eq!(
            (v[0].kind.clone(), v[0].size),
            (StorageKind::MemoryTier, Some(64 << 20))
        );
        let tier = v[0].build().unwrap();
        assert!(tier.chosen_only() && tier.kind() == "malloc");
        assert_eq!(v[0].notes.len(), 1);
        assert!(v[0].notes[0].contains("database_size"));
        let StorageKind::Disk { kind, cfg } = &v[1].kind else {
            panic!("{:?}", v[1].kind);
        };
        assert_eq!((*kind, cfg.size), ("mse", Some(2 << 30)));
        assert_eq!(cfg.journal_dir.as_deref(), Some(std::path::Path::new("/b")));
    }

    #[test]
    fn bad_specs_as_varnishd() {
        // Each text as varnishd 7.1.1 prints it after "Error: ".
        let msg = |a: &[&str]| parse_storage_args(a).unwrap_err().to_string();
        assert_eq!(msg(&["foo"]), "Unknown storage method \"foo\"");
        assert_eq!(msg(&["umem,1M"]), "Unknown storage method \"umem\"");
        assert_eq!(
            msg(&["persistent,/tmp/x,1g"]),
            "Unknown storage method \"persistent\""
        );
        assert_eq!(
            msg(&["malloc,banana"]),
            "(-smalloc) size \"banana\": Invalid number"
        );
        assert_eq!(
            msg(&["malloc,1x"]),
            "(-smalloc) size \"1x\": Unknown BYTES unit of measurement ([KMGTP][B])"
        );
        assert_eq!(
            msg(&["malloc,1k"]),
            "(-smalloc) size \"1k\": too small, did you forget to specify M or G?"
        );
        assert_eq!(msg(&["malloc,1m,2"]), "(-smalloc) too many arguments");
        assert_eq!(
            msg(&["a=malloc", "a=malloc"]),
            "(-s a=malloc) 'a' is already defined"
        );
        assert_eq!(msg(&["1x=malloc"]), "invalid -s name \"1x\"=[...]");
        assert_eq!(msg(&["a.b=malloc"]), "invalid -s name \"a.b\"=[...]");
        assert!(parse_storage_args(&["malloc,0"]).is_err());
        assert_eq!(msg(&["x="]), "Empty named -s argument \"x=\"");
        assert_eq!(msg(&[""]), "-s argument lacks strategy {malloc, file, ...}");
        assert_eq!(msg(&[",1M"]), "Unknown storage method \"\"");
        // An empty size is no size; a '=' after the first comma is no name.
        assert!(parse_storage_args(&["malloc,"]).is_ok());
        assert!(parse_storage_args(&["file,/tmp/a=b,1M"]).is_ok());
    }
}
