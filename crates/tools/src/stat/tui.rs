//! The terminal side of `lacquer stat`'s live view, laid out as
//! varnishstat's curses screen: the uptimes and hit rate, a message line,
//! the column titles, the counters, a status bar (position, verbosity,
//! unseen counters shown) and the selected counter's description; or the
//! help screen. The loop takes a snapshot every interval and reads keys in
//! between. Rates, rows and keys are decided in `view`; this module only
//! places them.

use std::time::{Duration, Instant};

use ratatui::Frame;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::Paragraph;

use super::Source;
use super::view::{self, HELP, Key, Model, Outcome, ViewState};

/// Lines above the counters: two of uptimes, one of messages.
const STATUS: usize = 3;
/// Lines of the selected counter's description, when there is room.
const INFO: usize = 3;
/// The fewest counter rows shown.
const POINTS_MIN: usize = 3;

/// How many counter rows, and description lines, a terminal of `height`
/// lines has room for (the two bars take one line each).
pub fn layout(height: usize) -> (usize, usize) {
    let points = height.saturating_sub(STATUS + 2 + INFO);
    if points < POINTS_MIN {
        ((points + INFO).max(POINTS_MIN), 0)
    } else {
        (points, INFO)
    }
}

/// Help lines on screen: everything under the column-title bar.
pub fn help_page(height: usize) -> usize {
    height.saturating_sub(STATUS + 1).max(1)
}

/// The screen's lines, each with whether it is shown in reverse video;
/// also keeps the cursor on its counter and on screen.
pub fn lines(
    model: &Model,
    st: &mut ViewState,
    width: usize,
    height: usize,
) -> Vec<(String, bool)> {
    let [up_mgt, up_child] = view::status_lines(model, width);
    let message = match (&st.input, &model.error) {
        (Some(text), _) => {
            format!("Filter (globs, ^ excludes; Enter applies, Esc cancels): {text}")
        }
        (None, Some(e)) => format!("Cannot read the counters (values are stale): {e}"),
        (None, None) => st.message.clone(),
    };
    let mut out = vec![(up_mgt, false), (up_child, false), (message, false)];
    if let Some(first) = st.help {
        out.push((" ".repeat(width), true));
        out.extend(
            HELP.iter()
                .skip(first)
                .take(help_page(height))
                .map(|l| (l.to_string(), false)),
        );
        return out;
    }
    let (points, info) = layout(height);
    let rows = view::visible(model, st);
    let names: Vec<&str> = rows.iter().map(|p| p.name.as_str()).collect();
    st.follow(&names, points);
    out.push((title_bar(width, st.top > 0), true));
    for i in st.top..st.top + points {
        out.push(match rows.get(i) {
            Some(p) => (view::row_line(p, width, st.scale), i == st.cursor),
            None => (String::new(), false),
        });
    }
    out.push((status_bar(st, &names, points, width), true));
    if let Some(p) = rows.get(st.cursor) {
        let mut text = vec![format!("{}:", p.oneliner)];
        text.extend(wrap(&p.long, width.saturating_sub(9).max(20)));
        out.extend(text.into_iter().take(info).map(|l| (l, false)));
    }
    out
}

fn title_bar(width: usize, more_above: bool) -> String {
    format!("{:<width$}", view::title_line(width, more_above))
}

/// `vvv` when rows are hidden below, the selected counter, and at the
/// right the position, the verbosity and `UNSEEN` when those are shown.
fn status_bar(st: &ViewState, names: &[&str], points: usize, width: usize) -> String {
    let n = names.len();
    let mut bar = format!("{:<4}", if st.top + points < n { "vvv" } else { "" });
    if let Some(name) = names.get(st.cursor) {
        bar.push_str(name);
    }
    let last = (st.top + points).min(n);
    let mut right = vec![format!(
        "{}-{last}/{n}",
        if n == 0 { 0 } else { st.top + 1 }
    )];
    right.push(view::level_name(st.verbosity).to_string());
    if st.show_unseen {
        right.push("UNSEEN".to_string());
    }
    right.reverse();
    let right = right.join("  ");
    let at = width.saturating_sub(right.len());
    if bar.len() < at {
        bar.push_str(&" ".repeat(at - bar.len()));
    } else {
        bar.push(' ');
    }
    bar.push_str(&right);
    bar
}

/// Words of `text` on lines of at most `width` characters, indented by 8.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for w in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + w.len() > width {
            lines.push(format!("        {line}"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(w);
    }
    if !line.is_empty() {
        lines.push(format!("        {line}"));
    }
    lines
}

/// Draws the whole view into a frame.
pub fn draw(f: &mut Frame, model: &Model, st: &mut ViewState) {
    let area = f.area();
    let text: Vec<Line> = lines(model, st, usize::from(area.width), usize::from(area.height))
        .into_iter()
        .map(|(l, rev)| {
            let line = Line::from(l);
            if rev {
                line.style(Style::new().add_modifier(Modifier::REVERSED))
            } else {
                line
            }
        })
        .collect();
    f.render_widget(Paragraph::new(text), area);
}

/// What a terminal key asks of the view (Ctrl-L is the loop's).
pub fn key(ev: KeyEvent) -> Option<Key> {
    if ev.kind == KeyEventKind::Release {
        return None;
    }
    if ev.modifiers.contains(KeyModifiers::CONTROL) {
        return match ev.code {
            KeyCode::Char('c') => Some(Key::Interrupt),
            KeyCode::Char('t') => Some(Key::SampleNow),
            KeyCode::Char('b') => Some(Key::PageUp),
            KeyCode::Char('f') => Some(Key::PageDown),
            _ => None,
        };
    }
    Some(match ev.code {
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        _ => return None,
    })
}

/// Runs the live view until `q`: a snapshot every interval (or at once
/// after Ctrl-T), keys in between; gauges are adjusted unless `raw` (see
/// [`super::adjust`]). The terminal is restored on every way out.
pub fn run(source: &mut Source, mut st: ViewState, raw: bool) -> Result<(), String> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return Err(
            "the live view needs a terminal; use -1, -j, -x or --prometheus for output to a pipe"
                .to_string(),
        );
    }
    let mut model = Model::new();
    model.update(super::adjust(source.snapshot()?, raw), 0.0);
    source.take_reopened();
    let mut terminal = ratatui::init();
    let result = (|| -> Result<(), String> {
        let mut last = Instant::now();
        loop {
            terminal
                .draw(|f| draw(f, &model, &mut st))
                .map_err(|e| format!("cannot draw: {e}"))?;
            let next = last + Duration::from_millis(st.interval_ms);
            let wait = next.saturating_duration_since(Instant::now());
            if !st.sample_now
                && event::poll(wait).map_err(|e| format!("cannot read the terminal: {e}"))?
            {
                let ev = event::read().map_err(|e| format!("cannot read the terminal: {e}"))?;
                if let Event::Key(k) = ev {
                    if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('l') {
                        crate::screen::clear(&mut terminal)?;
                    } else if let Some(k) = key(k) {
                        let height = terminal.size().map_or(24, |s| usize::from(s.height));
                        let rows = view::visible(&model, &st);
                        let names: Vec<&str> = rows.iter().map(|p| p.name.as_str()).collect();
                        let outcome = st.on_key(k, &names, layout(height).0, help_page(height));
                        if outcome == Outcome::Quit {
                            return Ok(());
                        }
                    }
                }
                continue;
            }
            st.sample_now = false;
            let now = Instant::now();
            match source.snapshot() {
                Ok(snap) => {
                    if source.take_reopened() {
                        model = Model::new();
                    }
                    let snap = super::adjust(snap, raw);
                    model.update(snap, now.duration_since(last).as_secs_f64());
                    model.error = None;
                }
                // The daemon stopped or restarts: keep the last values on
                // screen, say why they are stale, and try again.
                Err(e) => model.error = Some(e),
            }
            last = now;
        }
    })();
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use lacquer_vsl::vsc::{CounterType, CounterValue, Format, Level};
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    fn cv(name: &str, value: u64, ctype: CounterType, format: Format) -> CounterValue {
        CounterValue {
            name: name.to_string(),
            value,
            ctype,
            format,
            level: Level::Info,
            oneliner: String::new(),
            long: format!("about {name}"),
        }
    }

    fn screen(t: &Terminal<TestBackend>) -> Vec<String> {
        let b = t.backend().buffer();
        let w = usize::from(b.area.width);
        b.content
            .chunks(w)
            .map(|row| row.iter().map(|c| c.symbol()).collect::<String>())
            .collect()
    }

    fn model(n: usize) -> Model {
        let mk = |up: u64, hit: u64| {
            let mut v = vec![
                cv("MAIN.uptime", up, CounterType::Counter, Format::Duration),
                cv("MAIN.cache_hit", hit, CounterType::Counter, Format::Integer),
                cv("MAIN.cache_miss", 10, CounterType::Counter, Format::Integer),
            ];
            for i in 0..n {
                v.push(cv(
                    &format!("VBE.boot.b{i}.req"),
                    i as u64 + 1,
                    CounterType::Counter,
                    Format::Integer,
                ));
            }
            v
        };
        let mut m = Model::new();
        m.update(mk(100, 100), 0.0);
        m.update(mk(101, 130), 1.0);
        m
    }

    #[test]
    fn draws_varnishstat_s_screen() {
        let m = model(3);
        let mut st = ViewState::new(Vec::new(), 1000);
        // 14 lines: 3 status, titles, 6 rows, status bar, 3 description.
        assert_eq!(layout(14), (6, 3));
        let mut t = Terminal::new(TestBackend::new(80, 14)).unwrap();
        t.draw(|f| draw(f, &m, &mut st)).unwrap();
        let s = screen(&t);
        assert!(s[0].starts_with("Uptime mgt:      0+00:00:00"), "{s:?}");
        assert!(s[1].starts_with("Uptime child:    0+00:01:41"), "{s:?}");
        assert!(
            s[0].ends_with("Hitrate n:        1        1        1"),
            "{s:?}"
        );
        assert!(
            s[1].ends_with("avg(n):   1.0000   1.0000   1.0000"),
            "{s:?}"
        );
        assert!(s[2].starts_with("Press <h> to toggle help screen"), "{s:?}");
        assert_eq!(s[3].trim_end(), view::title_line(80, false).trim_end());
        assert!(s[4].starts_with("MAIN.uptime"), "{s:?}");
        let hit = s.iter().find(|l| l.starts_with("MAIN.cache_hit")).unwrap();
        let cols: Vec<&str> = hit.split_whitespace().collect();
        assert_eq!(cols, ["MAIN.cache_hit", "130", "30.00", "1.29", "30.00"]);
        assert_eq!(
            s[10],
            format!("    MAIN.uptime{}INFO  1-6/6", " ".repeat(54))
        );
        assert_eq!(s[11].trim_end(), ":");
        assert_eq!(s[12].trim_end(), "        about MAIN.uptime");
    }

    #[test]
    fn scrolling_unseen_help_and_errors() {
        let m = model(40);
        let mut st = ViewState::new(Vec::new(), 1000);
        let names: Vec<String> = view::visible(&m, &st)
            .iter()
            .map(|p| p.name.clone())
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        st.on_key(Key::End, &names, 6, 10);
        st.on_key(Key::Char('k'), &names, 6, 10);
        st.on_key(Key::Char('d'), &names, 6, 10);
        st.on_key(Key::Char('v'), &names, 6, 10);
        let l = lines(&m, &mut st, 132, 14);
        assert!(l[3].0.starts_with("^^^ NAME"), "{l:?}");
        assert_eq!(l[3].0.find("AVG_1000"), Some(123));
        assert!(l[8].0.starts_with("VBE.boot.b38.req") && l[8].1, "{l:?}");
        assert!(l[9].0.starts_with("VBE.boot.b39.req") && !l[9].1, "{l:?}");
        assert!(l[10].0.starts_with("    VBE.boot.b38.req"), "{l:?}");
        assert!(l[10].0.ends_with("UNSEEN  DIAG  38-43/43"), "{l:?}");
        assert_eq!(l[10].0.len(), 132);
        // The help screen, scrolled to its end, then gone.
        let rows = names.clone();
        st.on_key(Key::Char('h'), &rows, 6, help_page(14));
        st.on_key(Key::Char('G'), &rows, 6, help_page(14));
        let l = lines(&m, &mut st, 80, 14);
        assert_eq!(l.len(), 14);
        assert_eq!(l.last().unwrap().0, "    Decrease refresh interval.");
        st.on_key(Key::Char('h'), &rows, 6, help_page(14));
        let mut m = m;
        m.error = Some("gone".to_string());
        let l = lines(&m, &mut st, 80, 14);
        assert!(l[0].0.ends_with("*** DISCONNECTED ***"));
        assert_eq!(l[2].0, "Cannot read the counters (values are stale): gone");
        st.input = Some("VBE".to_string());
        assert!(
            lines(&m, &mut st, 80, 14)[2]
                .0
                .ends_with("Esc cancels): VBE")
        );
        assert_eq!(layout(8), (3, 0), "no room for the description");
    }

    #[test]
    fn key_events_map() {
        let k = |code, mods| key(KeyEvent::new(code, mods));
        assert_eq!(
            k(KeyCode::Char('q'), KeyModifiers::NONE),
            Some(Key::Char('q'))
        );
        assert_eq!(
            k(KeyCode::Char('c'), KeyModifiers::CONTROL),
            Some(Key::Interrupt)
        );
        assert_eq!(
            k(KeyCode::Char('t'), KeyModifiers::CONTROL),
            Some(Key::SampleNow)
        );
        assert_eq!(
            k(KeyCode::Char('f'), KeyModifiers::CONTROL),
            Some(Key::PageDown)
        );
        assert_eq!(
            k(KeyCode::PageDown, KeyModifiers::NONE),
            Some(Key::PageDown)
        );
        assert_eq!(k(KeyCode::F(1), KeyModifiers::NONE), None);
    }

    #[test]
    fn descriptions_wrap_on_words() {
        assert_eq!(
            wrap("one two three four", 9),
            ["        one two", "        three", "        four"]
        );
        assert!(wrap("", 9).is_empty());
    }
}
