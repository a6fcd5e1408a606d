//! The pure part of `lacquer stat`'s live view: per-counter rates and
//! moving averages computed from successive snapshots (varnishstat's
//! CHANGE, AVERAGE and AVG_10/100/1000 columns), the hit rate, the
//! selection of the rows to show (verbosity, unseen counters, globs) and
//! their formatting. No terminal here, so all of it is unit-tested; the
//! terminal side is in `tui`.

use std::collections::HashMap;

use lacquer_vsl::vsc::{self, CounterType, CounterValue, Format, Level};

/// The moving-average windows, as varnishstat's columns.
pub const WINDOWS: [u64; 3] = [10, 100, 1000];

/// A moving average over at most `cap` samples: while fewer samples have
/// been seen it is their plain mean, then each new sample weighs `1/cap`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MovingAvg {
    cap: u64,
    n: u64,
    acc: f64,
}

impl MovingAvg {
    /// An empty average over windows of `cap` samples.
    pub fn new(cap: u64) -> MovingAvg {
        MovingAvg {
            cap: cap.max(1),
            n: 0,
            acc: 0.0,
        }
    }

    /// Adds one sample.
    pub fn push(&mut self, v: f64) {
        if self.n < self.cap {
            self.n += 1;
        }
        self.acc += (v - self.acc) / self.n as f64;
    }

    /// The current average (0 before any sample).
    pub fn value(&self) -> f64 {
        self.acc
    }

    /// Samples the average covers (at most the window).
    pub fn samples(&self) -> u64 {
        self.n
    }
}

fn windows() -> [MovingAvg; 3] {
    WINDOWS.map(MovingAvg::new)
}

/// One counter followed over time.
#[derive(Clone, Debug)]
pub struct Point {
    /// Full name (`MAIN.cache_hit`).
    pub name: String,
    /// Semantics.
    pub ctype: CounterType,
    /// Display format.
    pub format: Format,
    /// Verbosity level.
    pub level: Level,
    /// One-line description.
    pub oneliner: String,
    /// Longer description.
    pub long: String,
    /// Value in the latest snapshot.
    pub cur: u64,
    /// Per-second change over the last interval (none before two samples).
    pub chg: Option<f64>,
    /// Average per second since the child started (counters only).
    pub avg: Option<f64>,
    /// Moving averages over 10, 100 and 1000 samples: of the change for
    /// counters, of the value for gauges.
    pub ma: [MovingAvg; 3],
    /// True once the counter has been non-zero.
    pub seen: bool,
}

/// All counters followed over time, in the daemon's order.
#[derive(Debug)]
pub struct Model {
    /// The counters of the latest snapshot.
    pub points: Vec<Point>,
    /// Snapshots taken.
    pub samples: u64,
    /// Management process uptime in seconds, if published.
    pub mgt_uptime: Option<u64>,
    /// Child uptime in seconds, if published.
    pub main_uptime: Option<u64>,
    /// Hit rate (`cache_hit / (cache_hit + cache_miss)`) moving averages.
    pub hitrate: [MovingAvg; 3],
    /// Why the latest snapshot could not be taken, if it could not.
    pub error: Option<String>,
    last_hit_miss: Option<(u64, u64)>,
}

impl Default for Model {
    fn default() -> Model {
        Model::new()
    }
}

impl Model {
    /// An empty model.
    pub fn new() -> Model {
        Model {
            points: Vec::new(),
            samples: 0,
            mgt_uptime: None,
            main_uptime: None,
            hitrate: windows(),
            error: None,
            last_hit_miss: None,
        }
    }

    /// Folds in a new snapshot taken `dt` seconds after the previous one.
    /// Counters that disappeared (a discarded VCL's backends) are dropped;
    /// a counter that went backwards (the daemon restarted) starts over.
    pub fn update(&mut self, snap: Vec<CounterValue>, dt: f64) {
        let mut old: HashMap<String, Point> =
            self.points.drain(..).map(|p| (p.name.clone(), p)).collect();
        let value = |n: &str| vsc::lookup(&snap, n).map(|c| c.value);
        self.mgt_uptime = value("MGT.uptime");
        self.main_uptime = value("MAIN.uptime");
        let up = self.main_uptime.or(self.mgt_uptime).unwrap_or(0);
        let hm = value("MAIN.cache_hit").zip(value("MAIN.cache_miss"));
        if let (Some((h1, m1)), Some((h0, m0))) = (hm, self.last_hit_miss)
            && h1 >= h0
            && m1 >= m0
        {
            let (dh, dm) = (h1 - h0, m1 - m0);
            if dh + dm > 0 {
                let r = dh as f64 / (dh + dm) as f64;
                for m in &mut self.hitrate {
                    m.push(r);
                }
            }
        }
        self.last_hit_miss = hm;
        self.samples += 1;
        for c in snap {
            let prev = old
                .remove(&c.name)
                .filter(|p| !(c.ctype == CounterType::Counter && c.value < p.cur));
            let last = prev.as_ref().map(|p| p.cur);
            let mut p = prev.unwrap_or_else(|| Point {
                name: c.name,
                ctype: c.ctype,
                format: c.format,
                level: c.level,
                oneliner: c.oneliner,
                long: c.long,
                cur: c.value,
                chg: None,
                avg: None,
                ma: windows(),
                seen: false,
            });
            p.cur = c.value;
            p.seen |= c.value != 0;
            p.chg = match (last, p.ctype) {
                (Some(l), CounterType::Counter | CounterType::Gauge) if dt > 0.0 => {
                    Some((p.cur as f64 - l as f64) / dt)
                }
                _ => None,
            };
            match p.ctype {
                CounterType::Counter => {
                    p.avg = (up > 0).then(|| p.cur as f64 / up as f64);
                    if let Some(chg) = p.chg {
                        for m in &mut p.ma {
                            m.push(chg);
                        }
                    }
                }
                CounterType::Gauge => {
                    for m in &mut p.ma {
                        m.push(p.cur as f64);
                    }
                }
                CounterType::Bitmap => {}
            }
            self.points.push(p);
        }
    }
}

/// The next verbosity level (`v` cycles info → diag → debug → info).
pub fn next_level(l: Level) -> Level {
    match l {
        Level::Info => Level::Diag,
        Level::Diag => Level::Debug,
        Level::Debug => Level::Info,
    }
}

/// varnishstat's name of a verbosity level.
pub fn level_name(l: Level) -> &'static str {
    match l {
        Level::Info => "info",
        Level::Diag => "diag",
        Level::Debug => "debug",
    }
}

/// A key press, as the view understands it (the terminal side maps its
/// events onto these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// A printable character.
    Char(char),
    /// Cursor up.
    Up,
    /// Cursor down.
    Down,
    /// One page up.
    PageUp,
    /// One page down.
    PageDown,
    /// First row.
    Home,
    /// Last row.
    End,
    /// Enter.
    Enter,
    /// Escape.
    Esc,
    /// Backspace.
    Backspace,
    /// Interrupt (ctrl-C).
    Interrupt,
}

/// What the loop does after a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Keep running.
    Continue,
    /// Leave the view.
    Quit,
}

/// Shortest and longest refresh interval `+`/`-` reach, in milliseconds.
const MIN_INTERVAL_MS: u64 = 100;
const MAX_INTERVAL_MS: u64 = 3_600_000;

/// The operator's choices in the live view.
#[derive(Clone, Debug)]
pub struct ViewState {
    /// Most verbose level shown.
    pub verbosity: Level,
    /// Show counters that have been zero all along (`d`).
    pub show_unseen: bool,
    /// Field globs (`-f`, or typed after `/`), as `-f` takes them.
    pub globs: Vec<String>,
    /// Index of the first row on screen.
    pub top: usize,
    /// Index of the selected row.
    pub cursor: usize,
    /// The filter being typed after `/`, if any.
    pub input: Option<String>,
    /// Refresh interval in milliseconds.
    pub interval_ms: u64,
}

impl ViewState {
    /// The initial state: info level, unseen counters hidden (as
    /// varnishstat starts), the given globs and refresh interval.
    pub fn new(globs: Vec<String>, interval_ms: u64) -> ViewState {
        ViewState {
            verbosity: Level::Info,
            show_unseen: false,
            globs,
            top: 0,
            cursor: 0,
            input: None,
            interval_ms: interval_ms.clamp(MIN_INTERVAL_MS, MAX_INTERVAL_MS),
        }
    }

    /// Applies a key; `nrows` is the number of rows shown, `page` how
    /// many fit on screen.
    pub fn on_key(&mut self, key: Key, nrows: usize, page: usize) -> Outcome {
        if key == Key::Interrupt {
            return Outcome::Quit;
        }
        if let Some(text) = &mut self.input {
            match key {
                Key::Char(c) => text.push(c),
                Key::Backspace => {
                    text.pop();
                }
                Key::Enter => {
                    self.globs = text.split_whitespace().map(str::to_string).collect();
                    self.input = None;
                    self.cursor = 0;
                    self.top = 0;
                }
                Key::Esc => self.input = None,
                _ => {}
            }
            return Outcome::Continue;
        }
        let page = page.max(1);
        match key {
            Key::Char('q') => return Outcome::Quit,
            Key::Up | Key::Char('k') => self.cursor = self.cursor.saturating_sub(1),
            Key::Down | Key::Char('j') => self.cursor += 1,
            Key::PageUp | Key::Char('b') => self.cursor = self.cursor.saturating_sub(page),
            Key::PageDown | Key::Char(' ') => self.cursor += page,
            Key::Home | Key::Char('g') => self.cursor = 0,
            Key::End | Key::Char('G') => self.cursor = usize::MAX,
            Key::Char('v') => self.verbosity = next_level(self.verbosity),
            Key::Char('d') => self.show_unseen = !self.show_unseen,
            Key::Char('/') => self.input = Some(self.globs.join(" ")),
            Key::Char('+') => {
                self.interval_ms = (self.interval_ms * 2).min(MAX_INTERVAL_MS);
            }
            Key::Char('-') => {
                self.interval_ms = (self.interval_ms / 2).max(MIN_INTERVAL_MS);
            }
            _ => {}
        }
        self.scroll(nrows, page);
        Outcome::Continue
    }

    /// Keeps the cursor on a row and on screen.
    pub fn scroll(&mut self, nrows: usize, page: usize) {
        let page = page.max(1);
        self.cursor = self.cursor.min(nrows.saturating_sub(1));
        if self.cursor < self.top {
            self.top = self.cursor;
        } else if self.cursor >= self.top + page {
            self.top = self.cursor + 1 - page;
        }
        self.top = self.top.min(nrows.saturating_sub(page));
    }
}

/// The counters to show, in order: at most the chosen verbosity, seen
/// ones unless `d` asked for all, and matching the globs.
pub fn visible<'a>(model: &'a Model, st: &ViewState) -> Vec<&'a Point> {
    let allowed: Option<std::collections::HashSet<String>> = (!st.globs.is_empty()).then(|| {
        let all = model
            .points
            .iter()
            .map(|p| CounterValue {
                name: p.name.clone(),
                value: p.cur,
                ctype: p.ctype,
                format: p.format,
                level: p.level,
                oneliner: String::new(),
                long: String::new(),
            })
            .collect();
        let globs: Vec<&str> = st.globs.iter().map(String::as_str).collect();
        vsc::filter(all, &globs)
            .into_iter()
            .map(|c| c.name)
            .collect()
    });
    model
        .points
        .iter()
        .filter(|p| p.level <= st.verbosity)
        .filter(|p| st.show_unseen || p.seen)
        .filter(|p| allowed.as_ref().is_none_or(|a| a.contains(&p.name)))
        .collect()
}

/// One formatted row of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Counter name.
    pub name: String,
    /// CURRENT.
    pub cur: String,
    /// CHANGE (per second).
    pub chg: String,
    /// AVERAGE (per second since start).
    pub avg: String,
    /// AVG_10, AVG_100, AVG_1000.
    pub ma: [String; 3],
}

/// Formats a counter's columns by its format: bytes scaled to K/M/G/T
/// (powers of 1024), durations as `days+hh:mm:ss`, bitmaps in hex.
/// Gauges have no AVERAGE; bitmaps only a CURRENT.
pub fn format_row(p: &Point) -> Row {
    let rate = |v: f64| match p.format {
        Format::Bytes => bytes(v),
        _ => format!("{v:.2}"),
    };
    let cur = match p.format {
        Format::Bytes => bytes(p.cur as f64),
        Format::Duration => duration(p.cur),
        Format::Bitmap => format!("{:#x}", p.cur),
        Format::Integer => p.cur.to_string(),
    };
    let bitmap = p.ctype == CounterType::Bitmap || p.format == Format::Bitmap;
    let opt = |v: Option<f64>| match v {
        Some(v) if !bitmap => rate(v),
        _ => String::new(),
    };
    let ma = p.ma.map(|m| opt((m.samples() > 0).then(|| m.value())));
    Row {
        name: p.name.clone(),
        cur,
        chg: opt(p.chg),
        avg: opt(p.avg),
        ma,
    }
}

/// `512`, `1.50K`, `12.00M`: a byte amount scaled by powers of 1024.
pub fn bytes(v: f64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];
    if v.abs() < 1024.0 {
        return if v.fract() == 0.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.2}")
        };
    }
    let mut v = v / 1024.0;
    let mut unit = 0;
    while v.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2}{}", UNITS[unit])
}

/// `days+hh:mm:ss`, as varnishstat shows uptimes.
pub fn duration(secs: u64) -> String {
    format!(
        "{}+{:02}:{:02}:{:02}",
        secs / 86_400,
        secs % 86_400 / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// The hit-rate header: the sample count of each window and its average.
pub fn hitrate_lines(model: &Model) -> (String, String) {
    let mut n = String::from("Hitrate n:");
    let mut avg = String::from("   avg(n):");
    for m in &model.hitrate {
        n.push_str(&format!(" {:>8}", m.samples()));
        avg.push_str(&format!(" {:>8.4}", m.value()));
    }
    (n, avg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cv(
        name: &str,
        value: u64,
        ctype: CounterType,
        format: Format,
        level: Level,
    ) -> CounterValue {
        CounterValue {
            name: name.to_string(),
            value,
            ctype,
            format,
            level,
            oneliner: format!("{name} one"),
            long: format!("{name} long"),
        }
    }

    fn snap(up: u64, hit: u64, miss: u64, objs: u64, bytes: u64) -> Vec<CounterValue> {
        use CounterType::*;
        vec![
            cv("MAIN.uptime", up, Counter, Format::Duration, Level::Info),
            cv("MAIN.cache_hit", hit, Counter, Format::Integer, Level::Info),
            cv(
                "MAIN.cache_miss",
                miss,
                Counter,
                Format::Integer,
                Level::Info,
            ),
            cv("MAIN.n_object", objs, Gauge, Format::Integer, Level::Info),
            cv(
                "MAIN.s_resp_bodybytes",
                bytes,
                Counter,
                Format::Bytes,
                Level::Info,
            ),
            cv("MAIN.summs", 0, Counter, Format::Integer, Level::Debug),
            cv("VBE.boot.b1.happy", 1, Bitmap, Format::Bitmap, Level::Info),
            cv("VBE.boot.b1.busy", 0, Counter, Format::Integer, Level::Diag),
        ]
    }

    fn point<'a>(m: &'a Model, name: &str) -> &'a Point {
        m.points.iter().find(|p| p.name == name).unwrap()
    }

    #[test]
    fn moving_average_is_the_mean_then_decays() {
        let mut m = MovingAvg::new(10);
        assert_eq!(m.value(), 0.0);
        m.push(10.0);
        m.push(20.0);
        assert_eq!(m.value(), 15.0);
        assert_eq!(m.samples(), 2);
        for _ in 0..100 {
            m.push(0.0);
        }
        assert_eq!(m.samples(), 10);
        assert!(m.value() < 0.01, "{}", m.value());
        let mut w = MovingAvg::new(10);
        for _ in 0..10 {
            w.push(4.0);
        }
        w.push(14.0);
        assert!((w.value() - 5.0).abs() < 1e-9, "one new sample weighs 1/10");
    }

    #[test]
    fn rates_and_averages() {
        let mut m = Model::new();
        m.update(snap(10, 50, 50, 7, 2048), 0.0);
        let hit = point(&m, "MAIN.cache_hit");
        assert_eq!(hit.chg, None, "no change before two samples");
        assert_eq!(hit.avg, Some(5.0));
        assert_eq!(point(&m, "MAIN.n_object").ma[0].value(), 7.0);
        m.update(snap(12, 90, 60, 9, 4096), 2.0);
        let hit = point(&m, "MAIN.cache_hit");
        assert_eq!(hit.chg, Some(20.0));
        assert_eq!(hit.avg, Some(7.5));
        assert_eq!(hit.ma[0].value(), 20.0);
        let obj = point(&m, "MAIN.n_object");
        assert_eq!(obj.chg, Some(1.0));
        assert_eq!(obj.avg, None, "gauges have no average rate");
        assert_eq!(obj.ma[1].value(), 8.0, "gauge averages follow the value");
        assert_eq!(m.samples, 2);
        assert_eq!(m.main_uptime, Some(12));
        // 40 hits and 10 misses in the interval.
        assert_eq!(m.hitrate[0].value(), 0.8);
        assert_eq!(m.hitrate[0].samples(), 1);
        let (n, avg) = hitrate_lines(&m);
        assert_eq!(n, "Hitrate n:        1        1        1");
        assert_eq!(avg, "   avg(n):   0.8000   0.8000   0.8000");
        // A restart (counters went back) starts the counter over.
        m.update(snap(1, 3, 0, 1, 0), 1.0);
        assert_eq!(point(&m, "MAIN.cache_hit").chg, None);
        assert_eq!(m.hitrate[0].samples(), 1, "no hit rate across a restart");
        // Counters that went away are dropped.
        m.update(snap(2, 3, 0, 1, 0)[..3].to_vec(), 1.0);
        assert_eq!(m.points.len(), 3);
    }

    #[test]
    fn rows_are_formatted_by_kind() {
        let mut m = Model::new();
        m.update(snap(90_061, 50, 50, 7, 3 << 20), 0.0);
        m.update(snap(90_062, 51, 50, 7, (3 << 20) + 1536), 1.0);
        let r = format_row(point(&m, "MAIN.uptime"));
        assert_eq!(r.cur, "1+01:01:02");
        assert_eq!(r.chg, "1.00");
        let r = format_row(point(&m, "MAIN.s_resp_bodybytes"));
        assert_eq!(r.cur, "3.00M");
        assert_eq!(r.chg, "1.50K");
        let r = format_row(point(&m, "MAIN.n_object"));
        assert_eq!(
            (r.cur.as_str(), r.chg.as_str(), r.avg.as_str()),
            ("7", "0.00", "")
        );
        assert_eq!(r.ma[0], "7.00");
        let r = format_row(point(&m, "VBE.boot.b1.happy"));
        assert_eq!(r.cur, "0x1");
        assert!(r.chg.is_empty() && r.avg.is_empty() && r.ma.iter().all(String::is_empty));
        assert_eq!(bytes(512.0), "512");
        assert_eq!(bytes(0.5), "0.50");
        assert_eq!(bytes(5.0 * 1024.0 * 1024.0 * 1024.0), "5.00G");
        assert_eq!(duration(59), "0+00:00:59");
    }

    #[test]
    fn visibility_levels_unseen_and_globs() {
        let mut m = Model::new();
        m.update(snap(10, 5, 0, 0, 0), 0.0);
        let mut st = ViewState::new(Vec::new(), 1000);
        let names = |m: &Model, st: &ViewState| {
            visible(m, st)
                .into_iter()
                .map(|p| p.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(&m, &st),
            ["MAIN.uptime", "MAIN.cache_hit", "VBE.boot.b1.happy"],
            "info level, zero counters hidden"
        );
        st.on_key(Key::Char('d'), 3, 10);
        assert_eq!(names(&m, &st).len(), 6);
        st.on_key(Key::Char('v'), 6, 10);
        assert_eq!(st.verbosity, Level::Diag);
        assert_eq!(names(&m, &st).len(), 7);
        st.on_key(Key::Char('v'), 7, 10);
        assert_eq!(names(&m, &st).len(), 8);
        st.on_key(Key::Char('v'), 8, 10);
        assert_eq!(st.verbosity, Level::Info);
        // A counter once seen stays shown when it drops back to zero.
        st.on_key(Key::Char('d'), 8, 10);
        m.update(snap(11, 5, 0, 3, 0), 1.0);
        m.update(snap(12, 5, 0, 0, 0), 1.0);
        assert!(names(&m, &st).contains(&"MAIN.n_object".to_string()));
        // Typing a filter after `/`.
        for k in [
            Key::Char('/'),
            Key::Char('V'),
            Key::Char('B'),
            Key::Backspace,
        ] {
            st.on_key(k, 4, 10);
        }
        assert_eq!(st.input.as_deref(), Some("V"));
        for c in "BE.* ^*busy".chars() {
            st.on_key(Key::Char(c), 4, 10);
        }
        assert_eq!(
            st.on_key(Key::Char('q'), 4, 10),
            Outcome::Continue,
            "q is text here"
        );
        st.on_key(Key::Backspace, 4, 10);
        st.on_key(Key::Enter, 4, 10);
        assert_eq!(st.globs, ["VBE.*", "^*busy"]);
        assert_eq!(names(&m, &st), ["VBE.boot.b1.happy"]);
        st.on_key(Key::Char('/'), 1, 10);
        st.on_key(Key::Esc, 1, 10);
        assert_eq!(st.input, None);
        assert_eq!(st.globs.len(), 2, "escape keeps the filter");
    }

    #[test]
    fn keys_scroll_and_quit() {
        let mut st = ViewState::new(Vec::new(), 1000);
        st.on_key(Key::Down, 100, 10);
        st.on_key(Key::Char('j'), 100, 10);
        assert_eq!((st.cursor, st.top), (2, 0));
        st.on_key(Key::PageDown, 100, 10);
        assert_eq!((st.cursor, st.top), (12, 3));
        st.on_key(Key::End, 100, 10);
        assert_eq!((st.cursor, st.top), (99, 90));
        st.on_key(Key::Down, 100, 10);
        assert_eq!(st.cursor, 99, "stays on the last row");
        st.on_key(Key::PageUp, 100, 10);
        assert_eq!((st.cursor, st.top), (89, 89));
        st.on_key(Key::Home, 100, 10);
        assert_eq!((st.cursor, st.top), (0, 0));
        st.on_key(Key::Up, 100, 10);
        assert_eq!(st.cursor, 0);
        // Rows vanish (a filter): the cursor follows.
        st.cursor = 50;
        st.scroll(5, 10);
        assert_eq!((st.cursor, st.top), (4, 0));
        st.on_key(Key::Char('+'), 5, 10);
        assert_eq!(st.interval_ms, 2000);
        for _ in 0..10 {
            st.on_key(Key::Char('-'), 5, 10);
        }
        assert_eq!(st.interval_ms, 100);
        assert_eq!(st.on_key(Key::Char('q'), 5, 10), Outcome::Quit);
        assert_eq!(st.on_key(Key::Interrupt, 5, 10), Outcome::Quit);
        assert_eq!(ViewState::new(Vec::new(), 0).interval_ms, 100);
    }
}
