//! The terminal side that `lacquer top` and `lacquer hist` share, as the
//! curses loop of varnishtop and varnishhist: a full-screen terminal that
//! shows lines the tool prepared, and keys read the way those tools read
//! them (q, Ctrl-C and Ctrl-Q quit, Ctrl-L and Ctrl-T redraw, a resize
//! redraws, other keys go to the tool, which beeps at those it ignores).

use std::io::Write;
use std::time::Duration;

use ratatui::DefaultTerminal;
use ratatui::backend::{Backend, ClearType};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::text::Line;
use ratatui::widgets::Paragraph;

/// What a key press (or a resize) asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Leave.
    Quit,
    /// Clear and draw again.
    Redraw,
    /// A character for the tool.
    Char(char),
}

/// A full-screen terminal, restored when dropped.
pub struct Screen {
    terminal: DefaultTerminal,
}

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Screen")
    }
}

impl Screen {
    /// Takes over the terminal; fails (saying what to use instead) when
    /// standard output is not one.
    pub fn open(instead: &str) -> Result<Screen, String> {
        use std::io::IsTerminal;
        if !std::io::stdout().is_terminal() {
            return Err(format!("the live view needs a terminal; {instead}"));
        }
        Ok(Screen {
            terminal: ratatui::init(),
        })
    }

    /// Columns and lines.
    pub fn size(&self) -> Result<(usize, usize), String> {
        let s = self.terminal.size().map_err(|e| e.to_string())?;
        Ok((usize::from(s.width), usize::from(s.height)))
    }

    /// Shows `lines` from the top left corner.
    pub fn show(&mut self, lines: Vec<String>) -> Result<(), String> {
        self.terminal
            .draw(|f| {
                let text: Vec<Line> = lines.into_iter().map(Line::from).collect();
                f.render_widget(Paragraph::new(text), f.area());
            })
            .map(|_| ())
            .map_err(|e| format!("cannot draw: {e}"))
    }

    /// Waits up to `wait` for a key; handles redraws itself.
    pub fn input(&mut self, wait: Duration) -> Result<Option<Input>, String> {
        if !event::poll(wait).map_err(|e| e.to_string())? {
            return Ok(None);
        }
        let input = match event::read().map_err(|e| e.to_string())? {
            Event::Key(k) if k.kind != KeyEventKind::Release => {
                let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
                match k.code {
                    KeyCode::Char('q' | 'Q') => Input::Quit,
                    KeyCode::Char('c') if ctrl => Input::Quit,
                    KeyCode::Char('l' | 't') if ctrl => Input::Redraw,
                    KeyCode::Char(c) if !ctrl => Input::Char(c),
                    _ => Input::Char('\0'),
                }
            }
            Event::Resize(..) => Input::Redraw,
            _ => return Ok(None),
        };
        if input == Input::Redraw {
            clear(&mut self.terminal)?;
        }
        Ok(Some(input))
    }

    /// The terminal bell, for keys the tool does not know.
    pub fn beep(&self) {
        let mut out = std::io::stdout();
        let _ = out.write_all(b"\x07").and_then(|()| out.flush());
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Blanks the terminal and forgets what it showed, so that the next draw
/// writes every line again. Unlike ratatui's own `clear`, this never asks
/// the terminal where its cursor is: a terminal that does not answer
/// (varnishtest's, for one) would make that fail after a two-second wait,
/// and curses' redraw does not ask either.
pub fn clear(terminal: &mut DefaultTerminal) -> Result<(), String> {
    terminal
        .backend_mut()
        .clear_region(ClearType::All)
        .map_err(|e| format!("cannot clear the terminal: {e}"))?;
    // Both buffers are now blank, like the screen: the next draw writes
    // every cell that is not blank.
    terminal.swap_buffers();
    Ok(())
}
