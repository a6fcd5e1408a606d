//! The line editor of `lacquer adm`'s interactive session (varnishadm on
//! a terminal, where libedit reads the commands): a prompt, in-line
//! editing, history, and Tab completion of the first word from the
//! daemon's command list, with readline's habits (a unique match is
//! completed and followed by a space, a common prefix is filled in, a
//! second Tab lists the candidates, anything else rings the bell).
//!
//! The editor is a pure state machine: keys in, bytes to write out, so it
//! is tested without a terminal. The terminal is in raw mode while it
//! runs, hence the `\r\n` line ends in what it writes.

/// A key the editor understands (the terminal side maps its events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// A printable character.
    Char(char),
    /// Enter (also Ctrl-J and Ctrl-M).
    Enter,
    /// Tab: complete.
    Tab,
    /// Delete the character before the cursor (Backspace, Ctrl-H).
    Backspace,
    /// Delete the character under the cursor (Delete).
    Delete,
    /// Cursor left (also Ctrl-B).
    Left,
    /// Cursor right (also Ctrl-F).
    Right,
    /// Start of the line (also Ctrl-A).
    Home,
    /// End of the line (also Ctrl-E).
    End,
    /// Previous history entry (also Ctrl-P).
    Up,
    /// Next history entry (also Ctrl-N).
    Down,
    /// Delete from the start of the line to the cursor (Ctrl-U).
    KillStart,
    /// Delete from the cursor to the end of the line (Ctrl-K).
    KillEnd,
    /// Ctrl-D: end of input on an empty line, else Delete.
    CtrlD,
}

/// What a key led to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Keep editing; write these bytes to the terminal.
    Edit(String),
    /// A line was entered (the bytes end it on screen).
    Line(String, String),
    /// End of input (Ctrl-D on an empty line).
    Eof(String),
}

/// The editor's state: the line being edited and what it remembers.
#[derive(Debug)]
pub struct Editor {
    prompt: String,
    line: Vec<char>,
    cursor: usize,
    history: Vec<String>,
    /// The history entry shown, and the line that was being typed before
    /// Up was first pressed.
    browsing: Option<(usize, String)>,
    commands: Vec<String>,
    last_tab: bool,
}

impl Editor {
    /// An editor showing `prompt` and completing `commands`.
    pub fn new(prompt: &str, commands: Vec<String>) -> Editor {
        Editor {
            prompt: prompt.to_string(),
            line: Vec::new(),
            cursor: 0,
            history: Vec::new(),
            browsing: None,
            commands,
            last_tab: false,
        }
    }

    /// The command names of a `help` reply: the first word of each line.
    pub fn commands_of_help(help: &str) -> Vec<String> {
        help.lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }

    /// The prompt and the line as they are, with the cursor in place: what
    /// to write to show the editor again after other output.
    pub fn redraw(&self) -> String {
        let mut s = format!("\r{}", self.prompt);
        s.extend(&self.line);
        s.push_str("\x1b[K");
        let back = self.line.len() - self.cursor;
        if back > 0 {
            s.push_str(&format!("\x1b[{back}D"));
        }
        s
    }

    /// Applies one key.
    pub fn key(&mut self, key: Key) -> Step {
        let tab = key == Key::Tab;
        let step = self.apply(key);
        self.last_tab = tab;
        step
    }

    fn apply(&mut self, key: Key) -> Step {
        match key {
            Key::Char(c) => {
                self.line.insert(self.cursor, c);
                self.cursor += 1;
            }
            Key::Enter => {
                let line: String = self.line.iter().collect();
                self.line.clear();
                self.cursor = 0;
                self.browsing = None;
                if !line.trim().is_empty() && self.history.last() != Some(&line) {
                    self.history.push(line.clone());
                }
                return Step::Line(line, "\r\n".to_string());
            }
            Key::Tab => return self.complete(),
            Key::Backspace => {
                if self.cursor == 0 {
                    return Step::Edit("\x07".to_string());
                }
                self.cursor -= 1;
                self.line.remove(self.cursor);
            }
            Key::CtrlD if self.line.is_empty() => return Step::Eof("\r\n".to_string()),
            Key::Delete | Key::CtrlD => {
                if self.cursor == self.line.len() {
                    return Step::Edit("\x07".to_string());
                }
                self.line.remove(self.cursor);
            }
            Key::Left => self.cursor = self.cursor.saturating_sub(1),
            Key::Right => self.cursor = (self.cursor + 1).min(self.line.len()),
            Key::Home => self.cursor = 0,
            Key::End => self.cursor = self.line.len(),
            Key::KillStart => {
                self.line.drain(..self.cursor);
                self.cursor = 0;
            }
            Key::KillEnd => self.line.truncate(self.cursor),
            Key::Up => {
                let at = match &self.browsing {
                    Some((0, _)) => return Step::Edit("\x07".to_string()),
                    Some((i, _)) => i - 1,
                    None if self.history.is_empty() => return Step::Edit("\x07".to_string()),
                    None => {
                        self.browsing = Some((0, self.line.iter().collect()));
                        self.history.len() - 1
                    }
                };
                if let Some((i, _)) = &mut self.browsing {
                    *i = at;
                }
                self.set_line(&self.history[at].clone());
            }
            Key::Down => {
                let Some((i, typed)) = self.browsing.clone() else {
                    return Step::Edit("\x07".to_string());
                };
                if i + 1 < self.history.len() {
                    self.browsing = Some((i + 1, typed));
                    self.set_line(&self.history[i + 1].clone());
                } else {
                    self.browsing = None;
                    self.set_line(&typed);
                }
            }
        }
        Step::Edit(self.redraw())
    }

    fn set_line(&mut self, s: &str) {
        self.line = s.chars().collect();
        self.cursor = self.line.len();
    }

    /// Tab: only the first word is completed, from the command names.
    fn complete(&mut self) -> Step {
        let before: String = self.line[..self.cursor].iter().collect();
        let start = before.rfind(' ').map_or(0, |i| i + 1);
        let bell = Step::Edit("\x07".to_string());
        if start != 0 {
            return bell;
        }
        let matches: Vec<&String> = self
            .commands
            .iter()
            .filter(|c| c.starts_with(&before))
            .collect();
        let Some(first) = matches.first() else {
            return bell;
        };
        let insert = if matches.len() == 1 {
            format!("{first} ")
        } else {
            let common = matches.iter().fold(first.as_str(), |acc, m| {
                let n = acc
                    .char_indices()
                    .zip(m.chars())
                    .take_while(|((_, a), b)| a == b)
                    .last()
                    .map_or(0, |((i, a), _)| i + a.len_utf8());
                &acc[..n]
            });
            if common.len() > before.len() {
                common.to_string()
            } else if self.last_tab {
                return Step::Edit(format!("\r\n{}\r\n{}", list(&matches), self.redraw()));
            } else {
                return bell;
            }
        };
        let rest: Vec<char> = self.line.split_off(self.cursor);
        self.line = insert.chars().collect();
        self.cursor = self.line.len();
        self.line.extend(rest);
        Step::Edit(self.redraw())
    }
}

/// Candidates side by side, each padded to the longest plus two.
fn list(matches: &[&String]) -> String {
    let width = matches.iter().map(|m| m.len()).max().unwrap_or(0) + 2;
    matches
        .iter()
        .map(|m| format!("{m:<width$}"))
        .collect::<String>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn editor() -> Editor {
        Editor::new(
            "varnish> ",
            Editor::commands_of_help(
                "ping [<timestamp>]\nvcl.list\nvcl.show [-v] <configname>\nvcl.state <configname> auto|cold|warm\nvcl.symtab\n",
            ),
        )
    }

    fn typed(e: &mut Editor, s: &str) -> Vec<Step> {
        s.chars()
            .map(|c| {
                e.key(match c {
                    '\t' => Key::Tab,
                    '\r' => Key::Enter,
                    c => Key::Char(c),
                })
            })
            .collect()
    }

    #[test]
    fn a_unique_match_completes_with_a_space() {
        let mut e = editor();
        let steps = typed(&mut e, "pin\t\r");
        assert_eq!(steps[3], Step::Edit("\rvarnish> ping \x1b[K".to_string()));
        assert_eq!(
            steps[4],
            Step::Line("ping ".to_string(), "\r\n".to_string())
        );
        let steps = typed(&mut e, "vcl.li\t\r");
        assert_eq!(
            steps.last().unwrap(),
            &Step::Line("vcl.list ".into(), "\r\n".into())
        );
    }

    #[test]
    fn ambiguous_completion_rings_then_lists() {
        let mut e = editor();
        let steps = typed(&mut e, "vcl.s\t\th\t vcl1\r");
        assert_eq!(steps[5], Step::Edit("\x07".to_string()));
        let Step::Edit(list) = &steps[6] else {
            panic!("{:?}", steps[6])
        };
        assert!(
            list.starts_with("\r\nvcl.show    vcl.state   vcl.symtab  \r\n\rvarnish> vcl.s"),
            "{list:?}"
        );
        assert_eq!(
            steps.last().unwrap(),
            &Step::Line("vcl.show  vcl1".into(), "\r\n".into())
        );
        // A common prefix longer than the word is filled in.
        let mut e = editor();
        typed(&mut e, "v\t\r");
        assert_eq!(
            typed(&mut e, "\r")[0],
            Step::Line(String::new(), "\r\n".into())
        );
        assert_eq!(e.history, ["vcl."]);
        // Only the first word completes; nothing matching rings.
        assert_eq!(
            typed(&mut e, "vcl.show vc\t")[11],
            Step::Edit("\x07".into())
        );
        e.key(Key::KillStart);
        assert_eq!(typed(&mut e, "x\t")[1], Step::Edit("\x07".into()));
    }

    #[test]
    fn editing_and_history() {
        let mut e = editor();
        typed(&mut e, "ping\r");
        typed(&mut e, "vcl.list\r");
        typed(&mut e, "ab");
        assert_eq!(
            e.key(Key::Up),
            Step::Edit("\rvarnish> vcl.list\x1b[K".into())
        );
        e.key(Key::Up);
        assert_eq!(e.key(Key::Up), Step::Edit("\x07".into()));
        e.key(Key::Down);
        assert_eq!(e.key(Key::Down), Step::Edit("\rvarnish> ab\x1b[K".into()));
        e.key(Key::Left);
        e.key(Key::Left);
        e.key(Key::Char('x'));
        assert_eq!(e.redraw(), "\rvarnish> xab\x1b[K\x1b[2D");
        e.key(Key::CtrlD);
        e.key(Key::End);
        e.key(Key::Backspace);
        assert_eq!(e.key(Key::Enter), Step::Line("x".into(), "\r\n".into()));
        assert_eq!(e.key(Key::Backspace), Step::Edit("\x07".into()));
        assert_eq!(e.key(Key::CtrlD), Step::Eof("\r\n".into()));
        typed(&mut e, "abc");
        e.key(Key::Home);
        e.key(Key::Delete);
        e.key(Key::Right);
        e.key(Key::KillEnd);
        assert_eq!(e.key(Key::Enter), Step::Line("b".into(), "\r\n".into()));
    }
}
