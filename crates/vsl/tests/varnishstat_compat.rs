//! Output compatibility with real varnishstat 7.1.
//!
//! `tests/data/stat.json` and `stat1.txt` are `varnishstat -j` and
//! `varnishstat -1` of a real varnishd 7.1.1. The same sections are created
//! in our counters file, the values copied in, and the snapshot read back
//! through a `VscReader` must render to the same text.

use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use lacquer_vsl::vsc::tables::schema_for_kind;
use lacquer_vsl::vsc::{Section, Vsc, VscConfig, VscReader, render_json, render_once, vsc_path};

fn data(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// (name, value) pairs in document order, from the simple JSON layout.
fn json_counters(text: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut name = None;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("\"") && t.ends_with("{") && t.contains('.') {
            name = Some(t[1..t.find("\":").unwrap()].to_string());
        } else if let Some(v) = t.strip_prefix("\"value\": ") {
            out.push((name.take().unwrap(), v.parse().unwrap()));
        }
    }
    out
}

#[test]
fn once_and_json_match_real_varnishstat() {
    let dir = std::env::temp_dir().join(format!("lq-statc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let vsc = Vsc::create(&vsc_path(&dir), &VscConfig::default()).unwrap();
    let counters = json_counters(&data("stat.json"));
    assert_eq!(counters.len(), 350);
    let mut sections: Vec<Section> = Vec::new();
    let mut i = 0;
    while i < counters.len() {
        let (name, _) = &counters[i];
        let kind = name.split('.').next().unwrap();
        let section = name.rsplit_once('.').unwrap().0;
        let schema = schema_for_kind(kind).unwrap_or_else(|| panic!("no schema for {name}"));
        let s = vsc.add_section(schema, section).unwrap();
        for (f, def) in schema.fields.iter().enumerate() {
            let (n, v) = &counters[i + f];
            assert_eq!(n, &format!("{section}.{}", def.name));
            s.set(f, *v);
        }
        i += schema.fields.len();
        sections.push(s);
    }
    let snap = VscReader::open(&vsc_path(&dir))
        .unwrap()
        .snapshot()
        .unwrap();
    assert_eq!(render_once(&snap), data("stat1.txt"));
    let ts = UNIX_EPOCH + Duration::from_secs(1_795_316_562);
    assert_eq!(render_json(&snap, ts), data("stat.json"));
    drop(sections);
    std::fs::remove_dir_all(&dir).unwrap();
}
