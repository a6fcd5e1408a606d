//! `lacquer adm`: varnishadm's management CLI client. It connects to the
//! daemon's `-T` address (given, or found in the working directory),
//! answers the `-S` challenge, sends one command (or each line of standard
//! input) and prints the replies. On a terminal with no command it is an
//! interactive session with a line editor (`lineedit`), as varnishadm's.

use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use lacquer_cli::auth_response;

/// Reads one reply: status and body (as text).
pub fn read_reply(r: &mut impl Read) -> Result<(u16, String), String> {
    let (status, body) = lacquer_cli::read_reply(r).map_err(|e| e.to_string())?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A connected, authenticated CLI session.
pub struct Session {
    stream: TcpStream,
}

impl Session {
    /// Connects to `addr` (`host:port` or `host port`) within `timeout`,
    /// authenticates with `secret` when the daemon asks, and checks that it
    /// answers a ping, as varnishadm does. Errors are varnishadm's messages.
    pub fn connect(
        addr: &str,
        secret: Option<&std::path::Path>,
        timeout: Duration,
    ) -> Result<Session, String> {
        use std::net::ToSocketAddrs;
        let a = addr.trim().replace(' ', ":");
        let failed = |e: &dyn std::fmt::Display| format!("Connection failed ({a}): {e}");
        let targets: Vec<_> = a.to_socket_addrs().map_err(|e| failed(&e))?.collect();
        let mut last = None;
        let mut stream = None;
        for t in targets {
            match TcpStream::connect_timeout(&t, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some(mut stream) = stream else {
            return Err(failed(
                &last.map_or("no address".to_string(), |e| e.to_string()),
            ));
        };
        let _ = stream.set_read_timeout(Some(timeout));
        // A reply that cannot be read counts as varnishd's 400 (CLIS_COMMS).
        let reply = |stream: &mut TcpStream| read_reply(stream).unwrap_or_else(|e| (400, e));
        let (st, body) = reply(&mut stream);
        let (st, body) = if st == 107 {
            // The secret is read only when the daemon asks for it.
            let path = secret.ok_or("Authentication required")?;
            let secret = std::fs::read(path).map_err(|e| {
                format!(
                    "Cannot open {}: {}",
                    path.display(),
                    crate::vut::io_reason(&e)
                )
            })?;
            let challenge = body.lines().next().unwrap_or_default();
            let line = format!("auth {}\n", auth_response(challenge, &secret));
            if let Err(e) = stream.write_all(line.as_bytes()) {
                return Err(failed(&e));
            }
            reply(&mut stream)
        } else {
            (st, body)
        };
        // A banner cut short by `cli_limit` (201) still opens the session,
        // as with varnishadm.
        if st != 200 && st != 201 {
            return Err(format!("Rejected {st}\n{body}"));
        }
        let mut sess = Session { stream };
        match sess.send("ping") {
            Ok((200, pong)) if pong.starts_with("PONG") => Ok(sess),
            _ => Err("No pong received from server".to_string()),
        }
    }

    /// Sends one command line and returns the reply.
    pub fn send(&mut self, line: &str) -> Result<(u16, String), String> {
        self.stream
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| e.to_string())?;
        read_reply(&mut self.stream)
    }
}

fn usage(name: &str) -> String {
    format!(
        "Usage: {name} [-h] [-n ident] [-p] [-S secretfile] [-T [address]:port] [-t timeout] [command [...]]\n\t-n is mutually exclusive with -S and -T\n"
    )
}

/// `lacquer adm` options (varnishadm's).
#[derive(Debug, Default, PartialEq)]
pub struct AdmArgs {
    /// `-T`.
    pub address: Option<String>,
    /// `-S`.
    pub secret: Option<PathBuf>,
    /// `-n`.
    pub workdir: Option<String>,
    /// `-p`: print replies as the protocol frames them (status line first).
    pub pass: bool,
    /// `-t`: seconds to wait for the daemon.
    pub timeout: Option<f64>,
    /// The command, if given on the command line.
    pub command: Vec<String>,
}

impl AdmArgs {
    /// Parses the command line like varnishadm: options stop at the first
    /// word of the command. Errors are the exit status and message.
    pub fn parse(name: &str, args: &[String]) -> Result<AdmArgs, (i32, String)> {
        let mut a = AdmArgs::default();
        let mut i = 0;
        while i < args.len() {
            let arg = args[i].as_str();
            if arg == "--" {
                i += 1;
                break;
            }
            if !arg.starts_with('-') || arg.len() < 2 {
                break;
            }
            let opt = &arg[1..2];
            let takes = matches!(opt, "n" | "S" | "T" | "t");
            let val = if !takes {
                None
            } else if arg.len() > 2 {
                Some(arg[2..].to_string())
            } else if i + 1 < args.len() {
                i += 1;
                Some(args[i].clone())
            } else {
                return Err((
                    1,
                    format!(
                        "{name}: option requires an argument -- '{opt}'\n{}",
                        usage(name)
                    ),
                ));
            };
            let v = val.unwrap_or_default();
            match opt {
                "h" => return Err((0, usage(name))),
                "p" => a.pass = true,
                "n" => a.workdir = Some(v),
                "S" => a.secret = Some(v.into()),
                "T" => a.address = Some(v),
                "t" => match v.parse::<f64>() {
                    Ok(t) if t.is_finite() && t >= 0.0 => a.timeout = Some(t),
                    _ => return Err((2, format!("-t: Invalid argument: {v}\n"))),
                },
                _ => {
                    return Err((
                        1,
                        format!("{name}: invalid option -- '{opt}'\n{}", usage(name)),
                    ));
                }
            }
            i += 1;
        }
        if a.workdir.is_some() && (a.address.is_some() || a.secret.is_some()) {
            return Err((1, usage(name)));
        }
        a.command = args[i..].to_vec();
        Ok(a)
    }
}

/// Prints a reply as varnishadm does: the body, or with `-p` the status
/// line the protocol frames it with and the body.
fn print_reply(pass: bool, st: u16, body: &str) {
    let mut out = std::io::stdout();
    let _ = if pass {
        write!(out, "{st:<3} {:<8}\n{body}", body.len())
    } else {
        writeln!(out, "{body}")
    };
    let _ = out.flush();
}

/// Runs `lacquer adm` as `name`; returns the process exit code.
pub fn main(name: &str, args: &[String]) -> i32 {
    let a = match AdmArgs::parse(name, args) {
        Ok(a) => a,
        Err((code, msg)) => {
            eprint!("{msg}");
            return code;
        }
    };
    let mut t = a.address.clone();
    let mut s = a.secret.clone();
    if t.is_none() {
        // The daemon publishes its -T address (and -S file) as `Arg`
        // segments in its shared-memory directory, as varnishd does.
        let dir = crate::workdir(a.workdir.as_deref()).join(lacquer_vsl::vsm::MGT_DIR);
        if !dir.join(lacquer_vsl::vsm::INDEX).exists() {
            eprintln!("Could not get hold of varnishd, is it running?");
            return 1;
        }
        let arg = |opt: &str| {
            lacquer_vsl::vsm::read_segment(&dir, "Arg", opt)
                .map(|v| String::from_utf8_lossy(&v).into_owned())
        };
        t = arg("-T");
        if s.is_none() {
            s = arg("-S").map(Into::into);
        }
    }
    let Some(t) = t else {
        eprintln!("No -T in shared memory");
        return 1;
    };
    let timeout = Duration::from_secs_f64(a.timeout.unwrap_or(5.0).max(0.001));
    let mut sess = match Session::connect(&t, s.as_deref(), timeout) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    if a.command.is_empty() && !a.pass && std::io::stdin().is_terminal() {
        return interactive(&mut sess);
    }
    // One command from the command line, else each line of standard input
    // as it comes (a script feeding commands one by one).
    let lines: Box<dyn Iterator<Item = String>> = if a.command.is_empty() {
        Box::new(
            BufReader::new(std::io::stdin())
                .lines()
                .map_while(Result::ok)
                .filter(|l| !l.trim().is_empty()),
        )
    } else {
        // As varnishadm: the words as given, separated by spaces (so
        // `varnishadm "param.show x"` works, and quoting is the caller's).
        Box::new(std::iter::once(a.command.join(" ")))
    };
    let mut code = 0;
    for line in lines {
        match sess.send(&line) {
            Ok((st, body)) => {
                print_reply(a.pass, st, &body);
                // A reply cut short by `cli_limit` is still a success;
                // varnishadm says it was cut.
                if st == 201 && !a.pass {
                    println!("[response was truncated]");
                } else if st != 200 {
                    if !a.pass {
                        eprintln!("Command failed with error code {st}");
                    }
                    code = 1;
                }
                if st == 500 {
                    break;
                }
            }
            Err(e) => {
                eprintln!("{name}: {e}");
                return 1;
            }
        }
    }
    code
}

/// CLIS_CLOSE: the daemon closes the session after this reply.
const CLOSING: u16 = 500;
/// CLIS_COMMS: the reply could not be read (the connection is gone).
const COMMS: u16 = 400;

/// The interactive session on a terminal, as varnishadm's: the command
/// names are fetched for completion, the banner is shown, then each line
/// typed at the `varnish> ` prompt is sent and its reply printed as the
/// status on one line and the body below. It ends, with status 0, at
/// end of input (Ctrl-D) or when the daemon closes the session (`quit`);
/// Ctrl-C ends it with status 130, as the interrupt would.
fn interactive(sess: &mut Session) -> i32 {
    use ratatui::crossterm::terminal;
    let commands = match sess.send("help") {
        Ok((200, help)) => crate::lineedit::Editor::commands_of_help(&help),
        _ => Vec::new(),
    };
    let mut ed = crate::lineedit::Editor::new("varnish> ", commands);
    if let Err(e) = terminal::enable_raw_mode() {
        eprintln!("Cannot put the terminal in raw mode: {e}");
        return 1;
    }
    let code = edit_loop(sess, &mut ed);
    let _ = terminal::disable_raw_mode();
    code
}

/// Shows a reply (the terminal is raw: line ends are written in full)
/// and says whether the session goes on.
fn show_reply(out: &mut impl Write, reply: Result<(u16, String), String>) -> Option<i32> {
    let (st, body) = reply.unwrap_or_else(|e| (COMMS, e));
    if st == COMMS {
        return Some(0);
    }
    let body = body.replace('\n', "\r\n");
    let _ = write!(out, "{st}\r\n{body}\r\n");
    (st == CLOSING).then_some(0)
}

fn edit_loop(sess: &mut Session, ed: &mut crate::lineedit::Editor) -> i32 {
    use crate::lineedit::Step;
    use ratatui::crossterm::event::{self, Event};
    let mut out = std::io::stdout();
    let banner = sess.send("banner");
    if let Some(code) = show_reply(&mut out, banner) {
        return code;
    }
    let _ = write!(out, "{}", ed.redraw());
    let _ = out.flush();
    loop {
        let ev = match event::read() {
            Ok(ev) => ev,
            Err(e) => {
                let _ = write!(out, "\r\n");
                eprintln!("Cannot read the terminal: {e}");
                return 1;
            }
        };
        let Event::Key(k) = ev else { continue };
        let key = match editor_key(k) {
            Some(KeyAction::Key(key)) => key,
            Some(KeyAction::Interrupt) => {
                let _ = write!(out, "\r\n");
                return 130;
            }
            None => continue,
        };
        match ed.key(key) {
            Step::Edit(bytes) => {
                let _ = write!(out, "{bytes}");
            }
            Step::Eof(bytes) => {
                let _ = write!(out, "{bytes}");
                return 0;
            }
            Step::Line(line, bytes) => {
                let _ = write!(out, "{bytes}");
                if !line.trim().is_empty() {
                    let reply = sess.send(&line);
                    if let Some(code) = show_reply(&mut out, reply) {
                        let _ = out.flush();
                        return code;
                    }
                }
                let _ = write!(out, "{}", ed.redraw());
            }
        }
        let _ = out.flush();
    }
}

/// A terminal key for the editor, or the interrupt.
enum KeyAction {
    Key(crate::lineedit::Key),
    Interrupt,
}

fn editor_key(k: ratatui::crossterm::event::KeyEvent) -> Option<KeyAction> {
    use crate::lineedit::Key;
    use ratatui::crossterm::event::{KeyCode, KeyEventKind, KeyModifiers};
    if k.kind == KeyEventKind::Release {
        return None;
    }
    let key = if k.modifiers.contains(KeyModifiers::CONTROL) {
        match k.code {
            KeyCode::Char('c') => return Some(KeyAction::Interrupt),
            KeyCode::Char('a') => Key::Home,
            KeyCode::Char('e') => Key::End,
            KeyCode::Char('b') => Key::Left,
            KeyCode::Char('f') => Key::Right,
            KeyCode::Char('p') => Key::Up,
            KeyCode::Char('n') => Key::Down,
            KeyCode::Char('h') => Key::Backspace,
            KeyCode::Char('d') => Key::CtrlD,
            KeyCode::Char('u') => Key::KillStart,
            KeyCode::Char('k') => Key::KillEnd,
            KeyCode::Char('j' | 'm') => Key::Enter,
            _ => return None,
        }
    } else {
        match k.code {
            KeyCode::Char(c) => Key::Char(c),
            KeyCode::Enter => Key::Enter,
            KeyCode::Tab => Key::Tab,
            KeyCode::Backspace => Key::Backspace,
            KeyCode::Delete => Key::Delete,
            KeyCode::Left => Key::Left,
            KeyCode::Right => Key::Right,
            KeyCode::Home => Key::Home,
            KeyCode::End => Key::End,
            KeyCode::Up => Key::Up,
            KeyCode::Down => Key::Down,
            _ => return None,
        }
    };
    Some(KeyAction::Key(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        let p = |v: &[&str]| {
            AdmArgs::parse(
                "varnishadm",
                &v.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            )
        };
        let a = p(&["-n", "x", "-p", "vcl.list", "-j"]).unwrap();
        assert_eq!(a.command, ["vcl.list", "-j"]);
        assert!(a.pass);
        assert_eq!(
            p(&["-t", "foobar"]).unwrap_err(),
            (2, "-t: Invalid argument: foobar\n".to_string())
        );
        let (code, msg) = p(&["-Q"]).unwrap_err();
        assert_eq!(code, 1);
        assert!(msg.contains("Usage: varnishadm [-h]"), "{msg}");
        assert_eq!(p(&["-h"]).unwrap_err().0, 0);
        assert_eq!(p(&["-n", "x", "-T", "y"]).unwrap_err().0, 1);
    }

    #[test]
    fn replies_parse() {
        let mut r: &[u8] = b"200 4       \nPONG\n";
        assert_eq!(read_reply(&mut r).unwrap(), (200, "PONG".to_string()));
        let mut bad: &[u8] = b"xx";
        assert!(read_reply(&mut bad).is_err());
    }
}
