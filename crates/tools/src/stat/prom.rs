//! The Prometheus text exposition (format 0.0.4) of the counters, named as
//! the common Varnish exporters name them so existing dashboards work:
//! `MAIN.cache_hit` is `varnish_main_cache_hit`, per-backend counters are
//! one family with labels (`varnish_backend_req{backend="b1",server="boot"}`
//! for `VBE.boot.b1.req`), stores are labelled by `type`
//! (`varnish_sma_g_bytes{type="s0"}`), locks by `target` and memory pools
//! by `id`. Counters are `counter`, gauges and bitmaps `gauge`; each family
//! has one HELP and one TYPE line and its samples together.

use std::collections::HashMap;
use std::fmt::Write as _;

use lacquer_vsl::vsc::{CounterType, CounterValue};

/// Where one counter goes: its family name and its labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metric {
    /// Family (metric) name.
    pub name: String,
    /// Label pairs, in output order.
    pub labels: Vec<(&'static str, String)>,
}

/// Maps a counter name (`SECTION[.IDENT].FIELD`) to its metric.
pub fn metric(counter: &str) -> Metric {
    let (section, field) = counter.rsplit_once('.').unwrap_or(("", counter));
    let (kind, ident) = section.split_once('.').unwrap_or((section, ""));
    let mut labels = Vec::new();
    let family = match kind {
        "VBE" => {
            // VBE.<vcl>.<backend>: VCL names have no dots, backend names
            // of dynamic backends may.
            let (vcl, backend) = ident.split_once('.').unwrap_or(("", ident));
            labels.push(("backend", backend.to_string()));
            labels.push(("server", vcl.to_string()));
            "backend".to_string()
        }
        _ => {
            if !ident.is_empty() {
                let key = match kind {
                    "SMA" | "SMF" | "SMU" => "type",
                    "LCK" => "target",
                    _ => "id",
                };
                labels.push((key, ident.to_string()));
            }
            kind.to_ascii_lowercase()
        }
    };
    let raw = if family.is_empty() {
        format!("varnish_{field}")
    } else {
        format!("varnish_{family}_{field}")
    };
    let name = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    Metric { name, labels }
}

/// The exposition of a snapshot.
pub fn render(snap: &[CounterValue]) -> String {
    struct Family<'a> {
        name: String,
        help: &'a str,
        kind: &'static str,
        samples: Vec<(Vec<(&'static str, String)>, u64)>,
    }
    let mut families: Vec<Family<'_>> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for c in snap {
        let m = metric(&c.name);
        let i = *index.entry(m.name.clone()).or_insert_with(|| {
            families.push(Family {
                name: m.name.clone(),
                help: &c.oneliner,
                kind: if c.ctype == CounterType::Counter {
                    "counter"
                } else {
                    "gauge"
                },
                samples: Vec::new(),
            });
            families.len() - 1
        });
        families[i].samples.push((m.labels, c.value));
    }
    let mut out = String::new();
    for f in &families {
        let _ = writeln!(out, "# HELP {} {}", f.name, escape(f.help, false));
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (labels, value) in &f.samples {
            out.push_str(&f.name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape(v, true));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {value}");
        }
    }
    out
}

/// Escapes HELP text (backslash, newline) or a label value (also `"`).
fn escape(s: &str, quote: bool) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '"' if quote => o.push_str("\\\""),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use lacquer_vsl::vsc::{Format, Level};

    fn cv(name: &str, value: u64, ctype: CounterType, one: &str) -> CounterValue {
        CounterValue {
            name: name.to_string(),
            value,
            ctype,
            format: Format::Integer,
            level: Level::Info,
            oneliner: one.to_string(),
            long: String::new(),
        }
    }

    #[test]
    fn names_and_labels_follow_the_exporters() {
        let m = |n: &str| metric(n);
        assert_eq!(m("MAIN.cache_hit").name, "varnish_main_cache_hit");
        assert!(m("MAIN.cache_hit").labels.is_empty());
        assert_eq!(m("MGT.uptime").name, "varnish_mgt_uptime");
        let b = m("VBE.boot.default.req");
        assert_eq!(b.name, "varnish_backend_req");
        assert_eq!(
            b.labels,
            [
                ("backend", "default".to_string()),
                ("server", "boot".to_string())
            ]
        );
        assert_eq!(
            m("VBE.v1.dyn.example.com.conn").labels[0],
            ("backend", "dyn.example.com".to_string())
        );
        let s = m("SMA.s0.g_bytes");
        assert_eq!(s.name, "varnish_sma_g_bytes");
        assert_eq!(s.labels, [("type", "s0".to_string())]);
        assert_eq!(m("LCK.sma.creat").labels, [("target", "sma".to_string())]);
        assert_eq!(m("MEMPOOL.req0.live").name, "varnish_mempool_live");
        assert_eq!(m("MEMPOOL.req0.live").labels, [("id", "req0".to_string())]);
        assert_eq!(m("odd-name").name, "varnish_odd_name");
    }

    #[test]
    fn families_are_grouped_with_help_and_type() {
        let snap = vec![
            cv("MAIN.cache_hit", 7, CounterType::Counter, "Cache hits"),
            cv(
                "MAIN.n_object",
                3,
                CounterType::Gauge,
                "object structs made",
            ),
            cv(
                "VBE.boot.a.req",
                1,
                CounterType::Counter,
                "Backend requests sent",
            ),
            cv(
                "VBE.boot.a.happy",
                1,
                CounterType::Bitmap,
                "Happy health probes",
            ),
            cv(
                "VBE.boot.b\"x.req",
                2,
                CounterType::Counter,
                "Backend requests sent",
            ),
            cv(
                "SMA.s0.g_bytes",
                9,
                CounterType::Gauge,
                "Bytes\\outstanding\nnow",
            ),
        ];
        assert_eq!(
            render(&snap),
            "# HELP varnish_main_cache_hit Cache hits\n\
             # TYPE varnish_main_cache_hit counter\n\
             varnish_main_cache_hit 7\n\
             # HELP varnish_main_n_object object structs made\n\
             # TYPE varnish_main_n_object gauge\n\
             varnish_main_n_object 3\n\
             # HELP varnish_backend_req Backend requests sent\n\
             # TYPE varnish_backend_req counter\n\
             varnish_backend_req{backend=\"a\",server=\"boot\"} 1\n\
             varnish_backend_req{backend=\"b\\\"x\",server=\"boot\"} 2\n\
             # HELP varnish_backend_happy Happy health probes\n\
             # TYPE varnish_backend_happy gauge\n\
             varnish_backend_happy{backend=\"a\",server=\"boot\"} 1\n\
             # HELP varnish_sma_g_bytes Bytes\\\\outstanding\\nnow\n\
             # TYPE varnish_sma_g_bytes gauge\n\
             varnish_sma_g_bytes{type=\"s0\"} 9\n"
        );
        assert_eq!(render(&[]), "");
    }
}
