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

/// The next verbosity level (`v`: info → diag → debug, then stays).
pub fn more_verbose(l: Level) -> Level {
    match l {
        Level::Info => Level::Diag,
        Level::Diag | Level::Debug => Level::Debug,
    }
}

/// The previous verbosity level (`V`: debug → diag → info, then stays).
pub fn less_verbose(l: Level) -> Level {
    match l {
        Level::Debug => Level::Diag,
        Level::Diag | Level::Info => Level::Info,
    }
}

/// varnishstat's label of a verbosity level, as its status bar shows it.
pub fn level_name(l: Level) -> &'static str {
    match l {
        Level::Info => "INFO",
        Level::Diag => "DIAG",
        Level::Debug => "DEBUG",
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
    /// Take a sample now (ctrl-T).
    SampleNow,
}

/// What the loop does after a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Keep running.
    Continue,
    /// Leave the view.
    Quit,
}

/// Shortest and longest refresh interval, and the step of `+`/`-`, in
/// milliseconds.
const MIN_INTERVAL_MS: u64 = 100;
const MAX_INTERVAL_MS: u64 = 3_600_000;
const INTERVAL_STEP_MS: u64 = 100;

/// The operator's choices in the live view.
#[derive(Clone, Debug)]
pub struct ViewState {
    /// Most verbose level shown.
    pub verbosity: Level,
    /// Show counters that have been zero all along (`d`).
    pub show_unseen: bool,
    /// Scale byte counters to K, M, G… (`e` toggles).
    pub scale: bool,
    /// Field globs (`-f`, or typed after `/`), as `-f` takes them.
    pub globs: Vec<String>,
    /// Index of the first row on screen.
    pub top: usize,
    /// Index of the selected row.
    pub cursor: usize,
    /// The selected counter and its line on screen: when the rows change
    /// (a verbosity, `d`, a counter seen for the first time) the cursor
    /// stays on it, on the same line.
    pub anchor: Option<(String, usize)>,
    /// The filter being typed after `/`, if any.
    pub input: Option<String>,
    /// Refresh interval in milliseconds.
    pub interval_ms: u64,
    /// The help screen's first line, while it is shown (`h`).
    pub help: Option<usize>,
    /// The message line under the uptimes.
    pub message: String,
    /// Set by Ctrl-T: take a sample now.
    pub sample_now: bool,
}

impl ViewState {
    /// The initial state: info level, unseen counters hidden and bytes
    /// scaled (as varnishstat starts), the given globs and refresh
    /// interval.
    pub fn new(globs: Vec<String>, interval_ms: u64) -> ViewState {
        ViewState {
            verbosity: Level::Info,
            show_unseen: false,
            scale: true,
            globs,
            top: 0,
            cursor: 0,
            anchor: None,
            input: None,
            interval_ms: interval_ms.clamp(MIN_INTERVAL_MS, MAX_INTERVAL_MS),
            help: None,
            message: "Press <h> to toggle help screen".to_string(),
            sample_now: false,
        }
    }

    /// Applies a key to the view of `rows` (the names shown, in order);
    /// `page` rows fit on screen, and `help_page` lines of the help.
    pub fn on_key(&mut self, key: Key, rows: &[&str], page: usize, help_page: usize) -> Outcome {
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
                    self.anchor = None;
                }
                Key::Esc => self.input = None,
                _ => {}
            }
            return Outcome::Continue;
        }
        let page = page.max(1);
        if let Some(first) = &mut self.help {
            let last = HELP.len().saturating_sub(help_page.max(1));
            match key {
                Key::Char('q') => return Outcome::Quit,
                Key::Char('h') => self.help = None,
                Key::Up | Key::Char('k') => *first = first.saturating_sub(1),
                Key::Down | Key::Char('j') => *first = (*first + 1).min(last),
                Key::PageUp | Key::Char('b') => *first = first.saturating_sub(help_page),
                Key::PageDown | Key::Char(' ') => *first = (*first + help_page).min(last),
                Key::Home | Key::Char('g') => *first = 0,
                Key::End | Key::Char('G') => *first = last,
                _ => {}
            }
            return Outcome::Continue;
        }
        match key {
            Key::Char('q') => return Outcome::Quit,
            Key::Char('h') => self.help = Some(0),
            Key::Up | Key::Char('k') => self.cursor = self.cursor.saturating_sub(1),
            Key::Down | Key::Char('j') => self.cursor += 1,
            Key::PageUp | Key::Char('b') => self.cursor = self.cursor.saturating_sub(page),
            Key::PageDown | Key::Char(' ') => self.cursor += page,
            Key::Home | Key::Char('g') => self.cursor = 0,
            Key::End | Key::Char('G') => self.cursor = usize::MAX,
            Key::Char('v') => self.verbosity = more_verbose(self.verbosity),
            Key::Char('V') => self.verbosity = less_verbose(self.verbosity),
            Key::Char('d') => self.show_unseen = !self.show_unseen,
            Key::Char('e') => self.scale = !self.scale,
            Key::Char('/') => self.input = Some(self.globs.join(" ")),
            Key::SampleNow => self.sample_now = true,
            Key::Char('+') => self.set_interval(self.interval_ms + INTERVAL_STEP_MS),
            Key::Char('-') => {
                self.set_interval(self.interval_ms.saturating_sub(INTERVAL_STEP_MS));
            }
            _ => {}
        }
        self.scroll(rows.len(), page);
        self.anchor = rows
            .get(self.cursor)
            .map(|n| (n.to_string(), self.cursor - self.top));
        Outcome::Continue
    }

    fn set_interval(&mut self, ms: u64) {
        self.interval_ms = ms.clamp(MIN_INTERVAL_MS, MAX_INTERVAL_MS);
        self.message = format!(
            "Refresh interval set to {:.1} seconds.",
            self.interval_ms as f64 / 1000.0
        );
    }

    /// Puts the cursor back on the anchored counter (if it is still
    /// shown, on the same line), then keeps it on a row and on screen.
    pub fn follow(&mut self, rows: &[&str], page: usize) {
        if let Some((name, line)) = &self.anchor
            && let Some(i) = rows.iter().position(|r| r == name)
        {
            self.cursor = i;
            self.top = i.saturating_sub(*line);
        }
        self.scroll(rows.len(), page);
        self.anchor = rows
            .get(self.cursor)
            .map(|n| (n.to_string(), self.cursor - self.top));
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
        self.top = self.top.min(nrows.saturating_sub(1));
    }
}

/// The help screen: each key, then what it does on the next line.
pub const HELP: &[&str] = &[
    "<h>",
    "    Toggle the help screen.",
    "<UP> or <k>",
    "    Navigate the counter list one line up.",
    "<DOWN> or <j>",
    "    Navigate the counter list one line down.",
    "<PAGEUP> or <b> or <CTRL-B>",
    "    Navigate the counter list one page up.",
    "<PAGEDOWN> or <SPACE> or <CTRL-F>",
    "    Navigate the counter list one page down.",
    "<HOME> or <g>",
    "    Navigate the counter list to the top.",
    "<END> or <G>",
    "    Navigate the counter list to the bottom.",
    "<d>",
    "    Toggle between showing and hiding unseen counters. Unseen",
    "    counters are those that have been zero since the view started.",
    "    They are hidden at first.",
    "<e>",
    "    Toggle scaling of values.",
    "<v>",
    "    Increase verbosity. Only informational counters are shown",
    "    at first.",
    "<V>",
    "    Decrease verbosity.",
    "</>",
    "    Type field globs to filter the counters (Enter applies,",
    "    Esc cancels).",
    "<q>",
    "    Quit.",
    "<CTRL+T>",
    "    Sample now.",
    "<+>",
    "    Increase refresh interval.",
    "<->",
    "    Decrease refresh interval.",
];

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

/// Width of each value column, as varnishstat's.
pub const COLW: usize = 14;
/// The value columns.
const N_COL: usize = 6;
/// The narrowest name column.
const NAME_MIN: usize = 24;

/// The name column's width on a terminal `width` columns wide: what the
/// six value columns leave, at least 24.
pub fn name_width(width: usize) -> usize {
    if width.saturating_sub(NAME_MIN) > N_COL * COLW {
        width - N_COL * COLW
    } else {
        NAME_MIN
    }
}

/// The column titles as varnishstat's top bar shows them (`^^^` when rows
/// are hidden above).
pub fn title_line(width: usize, more_above: bool) -> String {
    let nw = name_width(width);
    let mut s = format!("{:<4}", if more_above { "^^^" } else { "" });
    s.push_str(&format!("{:<w$}", "NAME", w = nw - 4));
    let mut x = nw;
    for t in [
        "CURRENT", "CHANGE", "AVERAGE", "AVG_10", "AVG_100", "AVG_1000",
    ] {
        if width.saturating_sub(x) < COLW {
            break;
        }
        s.push_str(&format!("{:<COLW$}", format!(" {t:>12}")));
        x += COLW;
    }
    s
}

/// One counter's row: the name (cut with `...` when too long for its
/// column), then as many value columns as fit: CURRENT, CHANGE (`.`
/// before two samples), AVERAGE (`.` for gauges and zero), and the moving
/// averages. Byte counters are scaled to K, M, G… when `scale` is on;
/// bitmaps show their value in hex and their bits as `V` (set) and `_`.
pub fn row_line(p: &Point, width: usize, scale: bool) -> String {
    let nw = name_width(width);
    let mut s = if p.name.len() > nw {
        let mut cut = nw - 3;
        while !p.name.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}...", &p.name[..cut])
    } else {
        format!("{:<nw$}", p.name)
    };
    let mut x = nw;
    let room = |x: usize, n: usize| width.saturating_sub(x) >= n;
    if p.ctype == CounterType::Bitmap || p.format == Format::Bitmap {
        if room(x, COLW) {
            let hex = format!("   {:010x}", (p.cur >> 24) & 0xff_ffff_ffff);
            s.push_str(&format!("{hex:<COLW$}"));
            x += COLW;
            if room(x, 2 * COLW) {
                s.push_str(&" ".repeat(2 * COLW - 24));
                s.extend(
                    (0..24)
                        .rev()
                        .map(|b| if p.cur >> b & 1 == 1 { 'V' } else { '_' }),
                );
            }
        }
        return s;
    }
    let dot = format!(" {:>12}", ".  ");
    let bytes = p.format == Format::Bytes;
    let num = |v: f64| {
        if bytes {
            scaled_bytes(v, scale)
        } else {
            format!(" {v:12.2}")
        }
    };
    let cur = match p.format {
        Format::Bytes if scale && p.cur > 1024 => scaled_bytes(p.cur as f64, true),
        Format::Duration => format!(" {:>12}", duration(p.cur)),
        _ => format!(" {:12}", p.cur),
    };
    let cols = [
        cur,
        p.chg.map_or_else(|| dot.clone(), num),
        p.avg.filter(|v| *v != 0.0).map_or_else(|| dot.clone(), num),
        num(p.ma[0].value()),
        num(p.ma[1].value()),
        num(p.ma[2].value()),
    ];
    for c in cols {
        if !room(x, COLW) {
            break;
        }
        s.push_str(&format!("{c:<COLW$}"));
        x += COLW;
    }
    s
}

/// A byte amount in a 14-column field: scaled by powers of 1024 with its
/// unit letter when `scale` is on, else as it is.
fn scaled_bytes(mut v: f64, scale: bool) -> String {
    let mut unit = ' ';
    if scale {
        for u in [' ', 'K', 'M', 'G', 'T', 'P', 'E', 'Z', 'Y'] {
            unit = u;
            if v.abs() < 1024.0 || u == 'Y' {
                break;
            }
            v /= 1024.0;
        }
    }
    format!(" {v:12.2}{unit}")
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

/// The two uptime lines, with the hit rate at their right when the
/// terminal is wide enough, or the daemon's absence.
pub fn status_lines(model: &Model, width: usize) -> [String; 2] {
    let up = |v: Option<u64>| {
        let t = v.unwrap_or(0);
        format!(
            "{:4}+{:02}:{:02}:{:02}",
            t / 86_400,
            t % 86_400 / 3600,
            t % 3600 / 60,
            t % 60
        )
    };
    let mut lines = [
        format!("Uptime mgt:   {}", up(model.mgt_uptime)),
        format!("Uptime child: {}", up(model.main_uptime)),
    ];
    let right = |line: &mut String, text: &str| {
        let at = width.saturating_sub(text.len());
        if line.len() < at {
            line.push_str(&" ".repeat(at - line.len()));
            line.push_str(text);
        }
    };
    if model.error.is_some() {
        right(&mut lines[0], "*** DISCONNECTED ***");
    } else if width > 70 {
        let (n, avg) = hitrate_lines(model);
        right(&mut lines[0], &n);
        right(&mut lines[1], &avg);
    }
    lines
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
        let row = |m: &Model, n: &str, w: usize, scale: bool| row_line(point(m, n), w, scale);
        // A value field: right-aligned in 12 after a space, in a 14-wide
        // column; a scaled byte amount fills the column with its unit.
        let f = |v: &str| format!("{:<14}", format!(" {v:>12}"));
        let b = |v: &str| format!(" {v:>13}");
        // One sample: no change yet.
        assert_eq!(
            row(&m, "MAIN.cache_hit", 80, true),
            format!(
                "{:<24}{}{}{}{}",
                "MAIN.cache_hit",
                f("50"),
                f(".  "),
                f("0.00"),
                f("0.00")
            )
        );
        m.update(snap(90_062, 51, 50, 7, (3 << 20) + 1536), 1.0);
        assert_eq!(
            row(&m, "MAIN.uptime", 80, true),
            format!(
                "{:<24}{}{}{}{}",
                "MAIN.uptime",
                f("1+01:01:02"),
                f("1.00"),
                f("1.00"),
                f("1.00")
            )
        );
        assert_eq!(
            row(&m, "MAIN.s_resp_bodybytes", 80, true),
            format!(
                "{:<24}{}{}{}{}",
                "MAIN.s_resp_bodybytes",
                b("3.00M"),
                b("1.50K"),
                b("34.95 "),
                b("1.50K")
            )
        );
        assert_eq!(
            row(&m, "MAIN.s_resp_bodybytes", 70, false),
            format!(
                "{:<24}{}{}{}",
                "MAIN.s_resp_bodybytes",
                f("3147264"),
                b("1536.00 "),
                b("34.95 ")
            )
        );
        // A name too long for its column is cut.
        let mut long = point(&m, "MAIN.uptime").clone();
        long.name = "VBE.vcl1.s1.bereq_hdrbytes".into();
        assert!(row_line(&long, 80, true).starts_with("VBE.vcl1.s1.bereq_hdr... "));
        // Gauges: no average; the moving averages follow the value.
        assert_eq!(
            row(&m, "MAIN.n_object", 132, true),
            format!(
                "{:<48}{}{}{}{}{}{}",
                "MAIN.n_object",
                f("7"),
                f("0.00"),
                f(".  "),
                f("7.00"),
                f("7.00"),
                f("7.00")
            )
        );
        let happy = row(&m, "VBE.boot.b1.happy", 80, true);
        assert_eq!(
            happy,
            format!(
                "{:<24}   0000000000     {}V",
                "VBE.boot.b1.happy",
                "_".repeat(23)
            )
        );
        assert_eq!(duration(59), "0+00:00:59");
        assert_eq!(name_width(80), 24);
        assert_eq!(name_width(132), 48);
        let t = title_line(132, true);
        assert!(t.starts_with("^^^ NAME"), "{t}");
        assert_eq!(t.find("AVG_1000"), Some(123));
        assert_eq!(
            title_line(80, false).trim_end().rsplit(' ').next(),
            Some("AVG_10")
        );
        let [a, b] = status_lines(&m, 80);
        assert_eq!(
            a,
            format!(
                "Uptime mgt:      0+00:00:00{}Hitrate n:        1        1        1",
                " ".repeat(16)
            )
        );
        assert!(b.starts_with("Uptime child:    1+01:01:02"), "{b}");
        assert!(b.ends_with("avg(n):   1.0000   1.0000   1.0000"), "{b}");
        m.error = Some("gone".into());
        assert!(status_lines(&m, 80)[0].ends_with("*** DISCONNECTED ***"));
    }

    fn names<'a>(m: &'a Model, st: &ViewState) -> Vec<&'a str> {
        visible(m, st)
            .into_iter()
            .map(|p| p.name.as_str())
            .collect()
    }

    #[test]
    fn visibility_levels_unseen_and_globs() {
        let mut m = Model::new();
        m.update(snap(10, 5, 0, 0, 0), 0.0);
        let mut st = ViewState::new(Vec::new(), 1000);
        let key = |st: &mut ViewState, m: &Model, k: Key| {
            let rows = names(m, st);
            st.on_key(k, &rows, 10, 10)
        };
        assert_eq!(
            names(&m, &st),
            ["MAIN.uptime", "MAIN.cache_hit", "VBE.boot.b1.happy"],
            "info level, zero counters hidden"
        );
        key(&mut st, &m, Key::Char('d'));
        assert_eq!(names(&m, &st).len(), 6);
        key(&mut st, &m, Key::Char('v'));
        assert_eq!(st.verbosity, Level::Diag);
        assert_eq!(names(&m, &st).len(), 7);
        key(&mut st, &m, Key::Char('v'));
        key(&mut st, &m, Key::Char('v'));
        assert_eq!(st.verbosity, Level::Debug, "v stops at debug");
        assert_eq!(names(&m, &st).len(), 8);
        key(&mut st, &m, Key::Char('V'));
        key(&mut st, &m, Key::Char('V'));
        key(&mut st, &m, Key::Char('V'));
        assert_eq!(st.verbosity, Level::Info);
        // A counter once seen stays shown when it drops back to zero.
        key(&mut st, &m, Key::Char('d'));
        m.update(snap(11, 5, 0, 3, 0), 1.0);
        m.update(snap(12, 5, 0, 0, 0), 1.0);
        assert!(names(&m, &st).contains(&"MAIN.n_object"));
        // Typing a filter after `/`.
        for k in [
            Key::Char('/'),
            Key::Char('V'),
            Key::Char('B'),
            Key::Backspace,
        ] {
            key(&mut st, &m, k);
        }
        assert_eq!(st.input.as_deref(), Some("V"));
        for c in "BE.* *busy".chars() {
            key(&mut st, &m, Key::Char(c));
        }
        assert_eq!(
            key(&mut st, &m, Key::Char('q')),
            Outcome::Continue,
            "q is text here"
        );
        key(&mut st, &m, Key::Backspace);
        key(&mut st, &m, Key::Enter);
        assert_eq!(st.globs, ["VBE.*", "*busy"]);
        assert_eq!(names(&m, &st), ["VBE.boot.b1.happy"]);
        key(&mut st, &m, Key::Char('/'));
        key(&mut st, &m, Key::Esc);
        assert_eq!(st.input, None);
        assert_eq!(st.globs.len(), 2, "escape keeps the filter");
    }

    #[test]
    fn the_cursor_stays_on_its_counter() {
        let mut m = Model::new();
        m.update(snap(10, 5, 0, 0, 0), 0.0);
        let mut st = ViewState::new(Vec::new(), 1000);
        let rows = names(&m, &st);
        st.on_key(Key::End, &rows, 10, 10);
        assert_eq!(st.anchor.as_ref().unwrap().0, "VBE.boot.b1.happy");
        st.on_key(Key::Char('d'), &rows, 10, 10);
        let rows = names(&m, &st);
        st.follow(&rows, 10);
        assert_eq!(rows[st.cursor], "VBE.boot.b1.happy");
        st.on_key(Key::Char('k'), &rows, 10, 10);
        assert_eq!(rows[st.cursor], "MAIN.s_resp_bodybytes");
    }

    #[test]
    fn keys_scroll_help_interval_and_quit() {
        let rows: Vec<String> = (0..100).map(|i| format!("c{i}")).collect();
        let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
        let mut st = ViewState::new(Vec::new(), 1000);
        st.on_key(Key::Down, &rows, 10, 10);
        st.on_key(Key::Char('j'), &rows, 10, 10);
        assert_eq!((st.cursor, st.top), (2, 0));
        st.on_key(Key::PageDown, &rows, 10, 10);
        assert_eq!((st.cursor, st.top), (12, 3));
        st.on_key(Key::End, &rows, 10, 10);
        assert_eq!((st.cursor, st.top), (99, 90));
        st.on_key(Key::Down, &rows, 10, 10);
        assert_eq!(st.cursor, 99, "stays on the last row");
        st.on_key(Key::PageUp, &rows, 10, 10);
        assert_eq!((st.cursor, st.top), (89, 89));
        st.on_key(Key::Home, &rows, 10, 10);
        assert_eq!((st.cursor, st.top), (0, 0));
        st.on_key(Key::Up, &rows, 10, 10);
        assert_eq!(st.cursor, 0);
        // The help screen scrolls on its own and keeps the counters' place.
        st.on_key(Key::Char('j'), &rows, 10, 10);
        st.on_key(Key::Char('h'), &rows, 10, 10);
        assert_eq!(st.help, Some(0));
        st.on_key(Key::Char('G'), &rows, 10, 10);
        assert_eq!(st.help, Some(HELP.len() - 10));
        st.on_key(Key::Char('h'), &rows, 10, 10);
        assert_eq!((st.help, st.cursor), (None, 1));
        st.on_key(Key::Char('h'), &rows, 10, 10);
        assert_eq!(st.help, Some(0), "help starts at its top");
        st.on_key(Key::Char('h'), &rows, 10, 10);
        // Rows vanish (a filter): the cursor follows.
        st.cursor = 50;
        st.scroll(5, 10);
        assert_eq!((st.cursor, st.top), (4, 0));
        assert_eq!(st.message, "Press <h> to toggle help screen");
        st.on_key(Key::Char('+'), &rows, 10, 10);
        assert_eq!(st.interval_ms, 1100);
        assert_eq!(st.message, "Refresh interval set to 1.1 seconds.");
        for _ in 0..20 {
            st.on_key(Key::Char('-'), &rows, 10, 10);
        }
        assert_eq!(st.interval_ms, 100);
        assert_eq!(st.message, "Refresh interval set to 0.1 seconds.");
        st.on_key(Key::SampleNow, &rows, 10, 10);
        assert!(st.sample_now);
        st.on_key(Key::Char('e'), &rows, 10, 10);
        assert!(!st.scale);
        assert_eq!(st.on_key(Key::Char('q'), &rows, 10, 10), Outcome::Quit);
        assert_eq!(st.on_key(Key::Interrupt, &rows, 10, 10), Outcome::Quit);
        assert_eq!(ViewState::new(Vec::new(), 0).interval_ms, 100);
    }
}
