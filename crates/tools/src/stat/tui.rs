//! The terminal side of `lacquer stat`'s live view (varnishstat's curses
//! mode) on ratatui: drawing the model of `view` into a frame, and the
//! loop that takes a snapshot every interval and reads keys in between.
//! All decisions (rates, rows, keys) are made in `view`.

use std::time::{Duration, Instant};

use ratatui::Frame;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Row as TableRow, Table};

use super::Source;
use super::view::{self, Key, Model, Outcome, ViewState};

/// Lines above the table (uptimes and hit rate, then a blank).
const HEADER: u16 = 3;
/// Lines below the table (description, status).
const FOOTER: u16 = 2;

/// How many table rows fit in a terminal of `height` lines.
pub fn page_size(height: u16) -> usize {
    usize::from(height.saturating_sub(HEADER + FOOTER + 1))
}

/// Draws the whole view; also keeps the cursor on screen for the frame's
/// size.
pub fn draw(f: &mut Frame, model: &Model, st: &mut ViewState) {
    let area = f.area();
    let [head, table, foot] = Layout::vertical([
        Constraint::Length(HEADER),
        Constraint::Min(1),
        Constraint::Length(FOOTER),
    ])
    .areas(area);
    let rows = view::visible(model, st);
    st.scroll(rows.len(), page_size(area.height));
    draw_header(f, head, model);
    let widths = [
        Constraint::Min(24),
        Constraint::Length(12),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
    ];
    let mut titles = vec![Line::from("NAME")];
    titles.extend(
        [
            "CURRENT", "CHANGE", "AVERAGE", "AVG_10", "AVG_100", "AVG_1000",
        ]
        .map(|h| Line::from(h).right_aligned()),
    );
    let header = TableRow::new(titles).style(Style::new().add_modifier(Modifier::BOLD));
    let body: Vec<TableRow> = rows
        .iter()
        .enumerate()
        .skip(st.top)
        .take(page_size(area.height))
        .map(|(i, p)| {
            let r = view::format_row(p);
            let [a, b, c] = r.ma;
            let mut cells = vec![Line::from(r.name)];
            cells.extend([r.cur, r.chg, r.avg, a, b, c].map(|s| Line::from(s).right_aligned()));
            let row = TableRow::new(cells);
            if i == st.cursor {
                row.style(Style::new().add_modifier(Modifier::REVERSED))
            } else {
                row
            }
        })
        .collect();
    f.render_widget(Table::new(body, widths).header(header), table);
    let desc = match &model.error {
        Some(e) => format!("cannot read the counters (values are stale): {e}"),
        None => rows
            .get(st.cursor)
            .map(|p| format!("{}: {}", p.name, p.long))
            .unwrap_or_default(),
    };
    let status = match &st.input {
        Some(text) => format!("filter (globs, ^ excludes; Enter applies, Esc cancels): {text}"),
        None => format!(
            "verbosity {} | {} | filter: {} | every {:.1}s | {}-{}/{} | q quit, v verbosity, d zeros, / filter, +/- interval",
            view::level_name(st.verbosity),
            if st.show_unseen {
                "zeros shown"
            } else {
                "zeros hidden"
            },
            if st.globs.is_empty() {
                "none".to_string()
            } else {
                st.globs.join(" ")
            },
            st.interval_ms as f64 / 1000.0,
            if rows.is_empty() { 0 } else { st.top + 1 },
            (st.top + page_size(area.height)).min(rows.len()),
            rows.len()
        ),
    };
    f.render_widget(
        Paragraph::new(vec![
            Line::from(desc),
            Line::from(status).style(Style::new().add_modifier(Modifier::REVERSED)),
        ]),
        foot,
    );
}

fn draw_header(f: &mut Frame, area: Rect, model: &Model) {
    let up = |v: Option<u64>| v.map_or_else(|| "-".to_string(), view::duration);
    let (hn, havg) = view::hitrate_lines(model);
    let [left, right] =
        Layout::horizontal([Constraint::Min(28), Constraint::Length(40)]).areas(area);
    f.render_widget(
        Paragraph::new(vec![
            Line::from(format!("Uptime mgt:   {:>12}", up(model.mgt_uptime))),
            Line::from(format!("Uptime child: {:>12}", up(model.main_uptime))),
        ]),
        left,
    );
    f.render_widget(
        Paragraph::new(vec![Line::from(hn), Line::from(havg)]).right_aligned(),
        right,
    );
}

/// Maps a terminal key event onto the view's keys.
pub fn key(ev: KeyEvent) -> Option<Key> {
    if ev.kind == KeyEventKind::Release {
        return None;
    }
    if ev.modifiers.contains(KeyModifiers::CONTROL) && ev.code == KeyCode::Char('c') {
        return Some(Key::Interrupt);
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

/// Runs the live view until `q`: a snapshot every interval, keys in
/// between. The terminal is restored on every way out.
pub fn run(source: &mut Source, mut st: ViewState) -> Result<(), String> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return Err(
            "the live view needs a terminal; use -1, -j or --prometheus for output to a pipe"
                .to_string(),
        );
    }
    let mut model = Model::new();
    model.update(source.snapshot()?, 0.0);
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
            if event::poll(wait).map_err(|e| format!("cannot read the terminal: {e}"))? {
                if let Event::Key(k) =
                    event::read().map_err(|e| format!("cannot read the terminal: {e}"))?
                    && let Some(k) = key(k)
                {
                    let n = view::visible(&model, &st).len();
                    let page = page_size(terminal.size().map_or(24, |s| s.height));
                    if st.on_key(k, n, page) == Outcome::Quit {
                        return Ok(());
                    }
                }
                continue;
            }
            let now = Instant::now();
            match source.snapshot() {
                Ok(snap) => {
                    if source.take_reopened() {
                        model = Model::new();
                    }
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
    fn draws_header_table_and_status() {
        let m = model(3);
        let mut st = ViewState::new(Vec::new(), 1000);
        let mut t = Terminal::new(TestBackend::new(120, 12)).unwrap();
        t.draw(|f| draw(f, &m, &mut st)).unwrap();
        let s = screen(&t);
        assert!(s[0].starts_with("Uptime mgt:              -"), "{s:?}");
        assert!(s[1].starts_with("Uptime child:   0+00:01:41"), "{s:?}");
        assert!(
            s[0].ends_with("Hitrate n:        1        1        1"),
            "{s:?}"
        );
        assert!(
            s[1].ends_with("avg(n):   1.0000   1.0000   1.0000"),
            "{s:?}"
        );
        assert!(s[3].starts_with("NAME"), "{s:?}");
        assert!(s[3].contains("CURRENT") && s[3].trim_end().ends_with("AVG_1000"));
        let hit = s.iter().find(|l| l.starts_with("MAIN.cache_hit")).unwrap();
        let cols: Vec<&str> = hit.split_whitespace().collect();
        assert_eq!(
            cols,
            [
                "MAIN.cache_hit",
                "130",
                "30.00",
                "1.29",
                "30.00",
                "30.00",
                "30.00"
            ]
        );
        assert!(s[10].starts_with("MAIN.uptime: about MAIN.uptime"), "{s:?}");
        assert!(
            s[11].starts_with("verbosity info | zeros hidden | filter: none"),
            "{s:?}"
        );
        assert!(s[11].contains("| 1-6/6 |"), "{s:?}");
    }

    #[test]
    fn scrolling_moves_the_window_and_the_description() {
        let m = model(40);
        let mut st = ViewState::new(Vec::new(), 1000);
        let mut t = Terminal::new(TestBackend::new(100, 12)).unwrap();
        // 12 lines: 3 header, 1 column titles, 6 rows, 2 footer.
        assert_eq!(page_size(12), 6);
        st.on_key(Key::End, 43, page_size(12));
        t.draw(|f| draw(f, &m, &mut st)).unwrap();
        let s = screen(&t);
        assert!(s[9].starts_with("VBE.boot.b39.req"), "{s:?}");
        assert!(s[4].starts_with("VBE.boot.b34.req"), "{s:?}");
        assert!(s[10].starts_with("VBE.boot.b39.req: about"), "{s:?}");
        assert!(s[11].contains("| 38-43/43 |"), "{s:?}");
        // A filter shrinks the rows; the cursor follows.
        st.globs = vec!["MAIN.*".to_string()];
        t.draw(|f| draw(f, &m, &mut st)).unwrap();
        let s = screen(&t);
        assert!(s[4].starts_with("MAIN.uptime"), "{s:?}");
        assert!(s[10].starts_with("MAIN.cache_miss: about"), "{s:?}");
        let mut m = m;
        m.error = Some("gone".to_string());
        t.draw(|f| draw(f, &m, &mut st)).unwrap();
        assert!(screen(&t)[10].starts_with("cannot read the counters (values are stale): gone"));
        st.input = Some("VBE".to_string());
        t.draw(|f| draw(f, &m, &mut st)).unwrap();
        assert!(
            screen(&t)[11]
                .starts_with("filter (globs, ^ excludes; Enter applies, Esc cancels): VBE")
        );
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
            k(KeyCode::PageDown, KeyModifiers::NONE),
            Some(Key::PageDown)
        );
        assert_eq!(k(KeyCode::F(1), KeyModifiers::NONE), None);
    }
}
