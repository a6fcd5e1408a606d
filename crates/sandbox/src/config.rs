//! The JSON tenant configuration of `embed_tenants`/`load_tenants`, in
//! libvmod-riscv's shape: an object whose entries with a `filename` are
//! tenants and whose other entries are groups of limits a tenant names
//! with `"group"`. A tenant's own limit keys override its group's.
//!
//! ```json
//! { "small": { "max_instructions": 1000000, "max_memory": 16 },
//!   "customer1.com": { "group": "small", "filename": "/srv/t/c1.wasm" } }
//! ```
//!
//! Limits: `max_instructions` (fuel per hook call, deterministic),
//! `max_time` (seconds of wall time per hook call, by epoch deadline),
//! `max_memory` (MiB of linear memory), `max_backends` (distinct backends
//! a tenant may choose), `max_regex` (patterns a tenant may compile in
//! `main`), `max_boot_instructions` (fuel for `main`).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

/// Per-tenant limits.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Fuel per hook call; `None` when only a time budget applies.
    pub max_instructions: Option<u64>,
    /// Wall time per hook call.
    pub max_time: Option<Duration>,
    /// Fuel for `main` at load.
    pub max_boot_instructions: u64,
    /// Bytes of linear memory.
    pub max_memory: u64,
    pub max_backends: usize,
    pub max_regex: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_instructions: Some(DEFAULT_INSTRUCTIONS),
            max_time: None,
            max_boot_instructions: 1_000_000_000,
            max_memory: 16 << 20,
            max_backends: 16,
            max_regex: 64,
        }
    }
}

/// The fuel per call of a tenant that sets no budget.
pub const DEFAULT_INSTRUCTIONS: u64 = 10_000_000;

/// One tenant's entry.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantConfig {
    pub name: String,
    pub filename: PathBuf,
    pub group: Option<String>,
    pub limits: Limits,
}

fn get_u64(o: &Map<String, Value>, key: &str, who: &str) -> Result<Option<u64>, String> {
    match o.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            format!("tenant configuration: '{who}'.{key} must be a non-negative integer, not {v}")
        }),
    }
}

/// Applies the limit keys of `o` over `l`.
fn apply(l: &mut Limits, o: &Map<String, Value>, who: &str) -> Result<(), String> {
    if let Some(n) = get_u64(o, "max_instructions", who)? {
        l.max_instructions = Some(n.max(1));
    }
    if let Some(v) = o.get("max_time") {
        let s = v
            .as_f64()
            .filter(|s| s.is_finite() && *s > 0.0)
            .ok_or_else(|| {
                format!("tenant configuration: '{who}'.max_time must be seconds above 0, not {v}")
            })?;
        l.max_time = Some(Duration::from_secs_f64(s));
        if !o.contains_key("max_instructions") {
            l.max_instructions = None;
        }
    }
    if let Some(n) = get_u64(o, "max_boot_instructions", who)? {
        l.max_boot_instructions = n.max(1);
    }
    if let Some(n) = get_u64(o, "max_memory", who)? {
        l.max_memory = n.saturating_mul(1 << 20);
    }
    if let Some(n) = get_u64(o, "max_backends", who)? {
        l.max_backends = n as usize;
    }
    if let Some(n) = get_u64(o, "max_regex", who)? {
        l.max_regex = n as usize;
    }
    Ok(())
}

/// Parses a configuration; relative file names are taken from `base`.
pub fn parse(json: &str, base: Option<&std::path::Path>) -> Result<Vec<TenantConfig>, String> {
    let v: Value = serde_json::from_str(json)
        .map_err(|e| format!("tenant configuration is not valid JSON: {e}"))?;
    let top = v
        .as_object()
        .ok_or("tenant configuration must be a JSON object of tenants and groups")?;
    let mut out = Vec::new();
    for (name, entry) in top {
        let o = entry
            .as_object()
            .ok_or_else(|| format!("tenant configuration: '{name}' must be an object"))?;
        let Some(file) = o.get("filename") else {
            continue;
        };
        let file = file
            .as_str()
            .ok_or_else(|| format!("tenant configuration: '{name}'.filename must be a string"))?;
        let mut limits = Limits::default();
        let group = match o.get("group") {
            None => None,
            Some(g) => {
                let g = g.as_str().ok_or_else(|| {
                    format!("tenant configuration: '{name}'.group must be a string")
                })?;
                let go = top.get(g).and_then(Value::as_object).ok_or_else(|| {
                    format!(
                        "tenant configuration: '{name}' names group '{g}', which is not defined"
                    )
                })?;
                apply(&mut limits, go, g)?;
                Some(g.to_string())
            }
        };
        apply(&mut limits, o, name)?;
        let mut filename = PathBuf::from(file);
        if filename.is_relative()
            && let Some(b) = base
        {
            filename = b.join(filename);
        }
        out.push(TenantConfig {
            name: name.clone(),
            filename,
            group,
            limits,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_give_limits_that_tenants_override() {
        let t = parse(
            r#"{ "g": { "max_instructions": 5000, "max_memory": 2, "max_regex": 3 },
                 "a.com": { "group": "g", "filename": "a.wasm", "max_memory": 4 },
                 "b.com": { "filename": "/abs/b.wat", "max_time": 0.5 } }"#,
            Some(std::path::Path::new("/base")),
        )
        .unwrap();
        assert_eq!(t.len(), 2);
        let a = t.iter().find(|t| t.name == "a.com").unwrap();
        assert_eq!(a.filename, PathBuf::from("/base/a.wasm"));
        assert_eq!(a.limits.max_instructions, Some(5000));
        assert_eq!(a.limits.max_memory, 4 << 20);
        assert_eq!(a.limits.max_regex, 3);
        let b = t.iter().find(|t| t.name == "b.com").unwrap();
        assert_eq!(b.filename, PathBuf::from("/abs/b.wat"));
        assert_eq!(b.limits.max_instructions, None);
        assert_eq!(b.limits.max_time, Some(Duration::from_millis(500)));
    }

    #[test]
    fn bad_configurations_say_what_is_wrong() {
        assert!(parse("[1]", None).unwrap_err().contains("JSON object"));
        assert!(parse("{", None).unwrap_err().contains("not valid JSON"));
        let e = parse(r#"{"a": {"filename": "x", "group": "nope"}}"#, None).unwrap_err();
        assert!(e.contains("group 'nope'"), "{e}");
        let e = parse(r#"{"a": {"filename": "x", "max_memory": -1}}"#, None).unwrap_err();
        assert!(e.contains("max_memory"), "{e}");
        let e = parse(r#"{"a": {"filename": "x", "max_time": 0}}"#, None).unwrap_err();
        assert!(e.contains("max_time"), "{e}");
    }
}
