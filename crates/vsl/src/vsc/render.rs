//! varnishstat output formats over a counter snapshot: `-1` (one line per
//! counter with average rate), `-j` (the version-1 JSON document), `-x`
//! (XML) and `-l` (the field list), plus the field globs (`-f`, `-I`,
//! `-X`). `lacquer stat` calls these.

use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use super::{CounterType, CounterValue};

/// Keeps the counters selected by varnishstat's field globs, given in
/// command-line order: a glob starting with `^` excludes (`-X`, or `-f
/// ^glob`), any other includes (`-I`, `-f glob`). As varnishstat does, the
/// first glob that matches a counter decides; a counter no glob matches is
/// kept only when no glob includes. `*` matches any run of characters; a
/// backslash escapes the next character.
pub fn filter(counters: Vec<CounterValue>, globs: &[&str]) -> Vec<CounterValue> {
    let default = !globs.iter().any(|g| !g.starts_with('^'));
    counters
        .into_iter()
        .filter(|c| {
            globs
                .iter()
                .find_map(|g| match g.strip_prefix('^') {
                    Some(x) => glob_match(x.as_bytes(), c.name.as_bytes()).then_some(false),
                    None => glob_match(g.as_bytes(), c.name.as_bytes()).then_some(true),
                })
                .unwrap_or(default)
        })
        .collect()
}

fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    // Iterative matcher with backtracking on the last '*'.
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pat.len() && pat[p] == b'*' {
            star = Some((p, i));
            p += 1;
            continue;
        }
        let (lit, next) = if p < pat.len() && pat[p] == b'\\' && p + 1 < pat.len() {
            (Some(pat[p + 1]), p + 2)
        } else {
            (pat.get(p).copied(), p + 1)
        };
        if lit == Some(s[i]) {
            p = next;
            i += 1;
        } else if let Some((sp, si)) = star {
            p = sp + 1;
            i = si + 1;
            star = Some((sp, si + 1));
        } else {
            return false;
        }
    }
    while p < pat.len() && pat[p] == b'*' {
        p += 1;
    }
    p == pat.len()
}

fn uptime(counters: &[CounterValue]) -> u64 {
    counters
        .iter()
        .find(|c| c.name == "MAIN.uptime")
        .or_else(|| counters.iter().find(|c| c.name == "MGT.uptime"))
        .map_or(0, |c| c.value)
}

/// `varnishstat -1`: `NAME  VALUE  RATE DESCRIPTION` per counter. The rate
/// is the value divided by the child uptime for counters and `.` for gauges
/// and bitmaps; the name column widens as longer names appear, like
/// varnishstat does.
pub fn render_once(counters: &[CounterValue]) -> String {
    let up = uptime(counters);
    let mut pad = 18;
    let mut out = String::new();
    for c in counters {
        let n = c.name.len();
        if n >= pad {
            pad = n + 1;
        }
        out.push_str(&c.name);
        out.push_str(&" ".repeat(pad - n));
        let _ = write!(out, "{:>12} ", c.value);
        if c.ctype == CounterType::Counter {
            let rate = if up > 0 {
                c.value as f64 / up as f64
            } else {
                0.0
            };
            let _ = write!(out, "{rate:>12.2}");
        } else {
            let _ = write!(out, "{:>12}", ".  ");
        }
        let _ = writeln!(out, " {}", c.oneliner);
    }
    out
}

/// `varnishstat -j`: the JSON document of Varnish 7.1 (`version` 1,
/// `timestamp`, and `counters` keyed by name with `description`, `flag`,
/// `format` and `value`). The timestamp is rendered in UTC.
pub fn render_json(counters: &[CounterValue], now: SystemTime) -> String {
    let mut out = String::from("{\n  \"version\": 1,\n");
    let _ = writeln!(out, "  \"timestamp\": \"{}\",", iso_time(now));
    out.push_str("  \"counters\": {\n");
    for (i, c) in counters.iter().enumerate() {
        let _ = write!(
            out,
            "    {}: {{\n      \"description\": {},\n      \"flag\": \"{}\",\n      \"format\": \"{}\",\n      \"value\": {}\n    }}",
            json_str(&c.name),
            json_str(&c.oneliner),
            c.ctype.flag(),
            c.format.letter(),
            c.value
        );
        out.push_str(if i + 1 < counters.len() { ",\n" } else { "\n" });
    }
    out.push_str("  }\n}\n");
    out
}

/// `varnishstat -x`: one `<stat>` element per counter (name, value, flag,
/// format, description) inside a `<varnishstat>` element stamped with the
/// time in UTC.
pub fn render_xml(counters: &[CounterValue], now: SystemTime) -> String {
    let mut out = String::from("<?xml version=\"1.0\"?>\n");
    let _ = writeln!(out, "<varnishstat timestamp=\"{}\">", iso_time(now));
    for c in counters {
        let _ = write!(
            out,
            "\t<stat>\n\t\t<name>{}</name>\n\t\t<value>{}</value>\n\t\t<flag>{}</flag>\n\t\t<format>{}</format>\n\t\t<description>{}</description>\n\t</stat>\n",
            xml_text(&c.name),
            c.value,
            c.ctype.flag(),
            c.format.letter(),
            xml_text(&c.oneliner)
        );
    }
    out.push_str("</varnishstat>\n");
    out
}

fn xml_text(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            c => o.push(c),
        }
    }
    o
}

/// `varnishstat -l`: the names `-f` (and `-I`, `-X`) can select, each
/// with its one-line description.
pub fn render_list(counters: &[CounterValue]) -> String {
    let mut out = String::from("Varnishstat -f option fields:\n");
    let _ = writeln!(out, "{:<30} Description", "Field name");
    let _ = writeln!(out, "{:<30} -----------", "----------");
    for c in counters {
        let _ = writeln!(out, "{:<30} {}", c.name, c.oneliner);
    }
    out
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// `YYYY-MM-DDTHH:MM:SS` in UTC.
fn iso_time(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::super::{Format, Level};
    use super::*;
    use std::time::Duration;

    fn cv(name: &str, value: u64, ctype: CounterType, format: Format, one: &str) -> CounterValue {
        CounterValue {
            name: name.to_string(),
            value,
            ctype,
            format,
            level: Level::Info,
            oneliner: one.to_string(),
            long: String::new(),
        }
    }

    fn sample() -> Vec<CounterValue> {
        vec![
            cv(
                "MGT.uptime",
                2,
                CounterType::Counter,
                Format::Duration,
                "Management process uptime",
            ),
            cv(
                "MAIN.uptime",
                3,
                CounterType::Counter,
                Format::Duration,
                "Child process uptime",
            ),
            cv(
                "MAIN.sess_fail_econnaborted",
                0,
                CounterType::Counter,
                Format::Integer,
                "Session accept failures: connection aborted",
            ),
            cv(
                "MAIN.n_object",
                1,
                CounterType::Gauge,
                Format::Integer,
                "object structs made",
            ),
        ]
    }

    #[test]
    fn once_matches_varnishstat() {
        assert_eq!(
            render_once(&sample()),
            "MGT.uptime                   2         0.67 Management process uptime\n\
             MAIN.uptime                  3         1.00 Child process uptime\n\
             MAIN.sess_fail_econnaborted            0         0.00 Session accept failures: connection aborted\n\
             MAIN.n_object                          1          .   object structs made\n"
        );
    }

    #[test]
    fn json_matches_varnishstat_shape() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_316_562);
        let j = render_json(&sample()[..2], t);
        assert_eq!(
            j,
            "{\n  \"version\": 1,\n  \"timestamp\": \"2026-11-22T03:02:42\",\n  \"counters\": {\n    \
             \"MGT.uptime\": {\n      \"description\": \"Management process uptime\",\n      \"flag\": \"c\",\n      \
             \"format\": \"d\",\n      \"value\": 2\n    },\n    \"MAIN.uptime\": {\n      \"description\": \
             \"Child process uptime\",\n      \"flag\": \"c\",\n      \"format\": \"d\",\n      \"value\": 3\n    }\n  }\n}\n"
        );
        assert_eq!(json_str("a\"b\\\u{1}"), "\"a\\\"b\\\\\\u0001\"");
        assert_eq!(iso_time(UNIX_EPOCH), "1970-01-01T00:00:00");
        assert_eq!(
            iso_time(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00"
        );
    }

    #[test]
    fn xml_and_field_list() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let mut v = sample();
        v.truncate(1);
        v[0].oneliner = "a <b> & c".to_string();
        assert_eq!(
            render_xml(&v, t),
            "<?xml version=\"1.0\"?>\n<varnishstat timestamp=\"2026-11-18T11:06:40\">\n\t<stat>\n\
             \t\t<name>MGT.uptime</name>\n\t\t<value>2</value>\n\t\t<flag>c</flag>\n\
             \t\t<format>d</format>\n\t\t<description>a &lt;b&gt; &amp; c</description>\n\
             \t</stat>\n</varnishstat>\n"
        );
        let l = render_list(&sample());
        assert!(l.starts_with(
            "Varnishstat -f option fields:\nField name                     Description\n\
             ----------                     -----------\n\
             MGT.uptime                     Management process uptime\n"
        ));
        assert_eq!(l.lines().count(), 3 + sample().len());
    }

    #[test]
    fn field_globs() {
        let names = |v: Vec<CounterValue>| v.into_iter().map(|c| c.name).collect::<Vec<_>>();
        assert_eq!(names(filter(sample(), &["MAIN.*"])).len(), 3);
        assert_eq!(
            names(filter(sample(), &["^MGT.*", "*uptime"])),
            vec!["MAIN.uptime"]
        );
        // The first glob that matches decides.
        assert_eq!(
            names(filter(sample(), &["*uptime", "^MGT.*"])),
            vec!["MGT.uptime", "MAIN.uptime"]
        );
        assert_eq!(names(filter(sample(), &["^MGT.*"])).len(), 3);
        assert_eq!(names(filter(sample(), &[])).len(), 4);
        assert!(glob_match(b"a\\*b", b"a*b"));
        assert!(!glob_match(b"a\\*b", b"axb"));
        assert!(glob_match(b"*.*_*", b"MAIN.n_object"));
    }
}
