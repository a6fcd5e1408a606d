//! `lacquer top`: varnishtop. Counts identical log records (tag and
//! payload, or only the payload's first field with `-f`) over the
//! transactions the options select, and shows the most frequent ones: once
//! (`-1`, after reading the log) or in a live view whose counts decay
//! towards the average rate over the `-p` period, as varnishtop's do.

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use crate::screen::{Input, Screen};
use crate::vut::{Common, Exit, Getopt, Prog, Reader, Signals, Step};
use lacquer_vsl::print::RecordFilter;
use lacquer_vsl::tags::{F_BINARY, F_UNSAFE};
use lacquer_vsl::{Tag, Transaction};

const OPTIONS: &[(&str, &str)] = &[
    ("[-1]", "Run once"),
    ("[-b]", "Only display backend records"),
    ("[-c]", "Only display client records"),
    ("[-C]", "Caseless regular expressions"),
    ("[-d]", "Process old log entries"),
    ("[-E]", "Display ESI transactions"),
    ("[-f]", "First field only"),
    (
        "[-g <session|request|vxid|raw>]",
        "Grouping mode (default: vxid)",
    ),
    ("[-h]", "Usage help"),
    ("[-i <taglist>]", "Include tags"),
    ("[-I <[taglist:]regex>]", "Include by regex"),
    ("[-L <limit>]", "Incomplete transaction limit"),
    ("[-n <dir>]", "lacquerd working directory"),
    ("[-p <period>]", "Sampling period"),
    ("[-Q <file>]", "VSL query file"),
    ("[-q <query>]", "VSL query"),
    ("[-r <filename>]", "Binary file input"),
    ("[-t <seconds|off>]", "VSM connection timeout"),
    ("[-T <seconds>]", "Transaction end timeout"),
    ("[-x <taglist>]", "Exclude tags"),
    ("[-X <[taglist:]regex>]", "Exclude by regex"),
    ("[-V]", "Version"),
];

/// The program description for `name` (`varnishtop` or `lacquer top`).
pub fn prog(name: &str) -> Prog {
    Prog {
        name: name.to_string(),
        varnish_name: "varnishtop",
        optstring: "1bcCdEfg:hi:I:L:n:p:Q:q:r:t:T:x:X:V",
        options: OPTIONS,
    }
}

/// `lacquer top` options.
#[derive(Debug)]
pub struct TopArgs {
    /// The options shared with the other log tools.
    pub common: Common,
    /// `-1`: print once and exit.
    pub once: bool,
    /// `-f`: the first field only.
    pub first_field: bool,
    /// `-p`: seconds the live counts average over.
    pub period: u64,
}

/// `strtoul(s, &end, 0)` over all of `s`: decimal, `0x` hex or `0` octal.
fn strtoul_all(s: &str) -> Option<u64> {
    let t = s.trim_start();
    let t = t.strip_prefix('+').unwrap_or(t);
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or(t.strip_prefix("0X")) {
        (h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        (&t[1..], 8)
    } else {
        (t, 10)
    };
    if digits.is_empty() {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

impl TopArgs {
    /// Parses the command line (without the program name).
    pub fn parse(p: &Prog, args: &[String]) -> Result<TopArgs, Exit> {
        let mut a = TopArgs {
            common: Common::default(),
            once: false,
            first_field: false,
            period: 60,
        };
        for (opt, val) in Getopt::parse(p, args)? {
            let v = val.as_deref().unwrap_or("");
            match opt {
                '1' => {
                    a.once = true;
                    a.common.dump = true;
                }
                'f' => a.first_field = true,
                'p' => match strtoul_all(v) {
                    Some(n) => a.period = n,
                    None => {
                        return Err(Exit::error(format!("Syntax error, {v} is not a number")));
                    }
                },
                _ => {
                    a.common.handle(opt, val.as_deref()).map_err(Exit::error)?;
                }
            }
        }
        a.common.check().map_err(Exit::error)?;
        Ok(a)
    }
}

/// One distinct record and how often it was seen.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Its tag.
    pub tag: Tag,
    /// The payload (or its first field with `-f`).
    pub key: Vec<u8>,
    hash: u32,
    /// How often it was seen (decayed in the live view).
    pub count: f64,
}

/// The counts.
#[derive(Debug, Default)]
pub struct Top {
    entries: Vec<Entry>,
    index: HashMap<(Tag, Vec<u8>), usize>,
    first_field: bool,
}

impl Top {
    /// Empty counts; `first_field` for `-f`.
    pub fn new(first_field: bool) -> Top {
        Top {
            first_field,
            ..Top::default()
        }
    }

    /// Number of distinct records counted (varnishtop's "list length").
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Counts the records of a reported group that `filter` shows.
    pub fn accumulate(&mut self, group: &[Transaction], filter: &RecordFilter) {
        for t in group {
            for r in &t.records {
                if r.tag.flags() & (F_BINARY | F_UNSAFE) != 0 || !filter.matches(r) {
                    continue;
                }
                let mut len = r.data.iter().position(|&b| b == 0).unwrap_or(r.data.len());
                if self.first_field {
                    len = r.data[..len]
                        .iter()
                        .position(|&b| b == b':' || b.is_ascii_whitespace())
                        .unwrap_or(len);
                }
                if len == 0 {
                    continue;
                }
                let key = r.data[..len].to_vec();
                match self.index.get(&(r.tag, key.clone())) {
                    Some(&i) => self.entries[i].count += 1.0,
                    None => {
                        // varnishtop's hash: the sum of the (signed) bytes.
                        let hash = key
                            .iter()
                            .fold(0u32, |h, &b| h.wrapping_add(b as i8 as i32 as u32));
                        self.index.insert((r.tag, key.clone()), self.entries.len());
                        self.entries.push(Entry {
                            tag: r.tag,
                            key,
                            hash,
                            count: 1.0,
                        });
                    }
                }
            }
        }
    }

    /// The entries in varnishtop's order: most frequent first, ties by
    /// hash, tag, length and bytes.
    pub fn ordered(&self) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.entries.len()).collect();
        idx.sort_by(|&a, &b| {
            let (x, y) = (&self.entries[a], &self.entries[b]);
            y.count
                .partial_cmp(&x.count)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| (x.hash.wrapping_sub(y.hash) as i32).cmp(&0))
                .then_with(|| (x.tag as u8).cmp(&(y.tag as u8)))
                .then_with(|| x.key.len().cmp(&y.key.len()))
                .then_with(|| x.key.cmp(&y.key))
        });
        idx
    }

    /// The `-1` output: `count tag payload` per line.
    pub fn dump(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for i in self.ordered() {
            let e = &self.entries[i];
            out.extend_from_slice(format!("{:9.2} {} ", e.count, e.tag.name()).as_bytes());
            out.extend_from_slice(&e.key);
            out.push(b'\n');
        }
        out
    }

    /// One refresh of the live view for a terminal of `cols` x `lines`:
    /// the screen lines, then (unless the input ended) each count moves
    /// 1/`n` of the way towards 1/3 and entries far below the last shown
    /// one are dropped, as varnishtop does once a second.
    pub fn refresh(
        &mut self,
        cols: usize,
        lines: usize,
        n: u64,
        ident: &str,
        eof: bool,
    ) -> Vec<String> {
        let mut screen = Vec::with_capacity(lines);
        let right = if eof {
            format!("{ident} (EOF)")
        } else {
            ident.to_string()
        };
        let head = format!("list length {}", self.entries.len());
        let pad = cols
            .saturating_sub(right.len() + 1)
            .saturating_sub(head.len());
        screen.push(format!("{head}{}{right}", " ".repeat(pad)));
        screen.push(String::new());
        let mut last_shown = 0.0;
        let mut drop = Vec::new();
        for (pos, i) in self.ordered().into_iter().enumerate() {
            let l = pos + 2;
            let e = &mut self.entries[i];
            if l < lines {
                let len = e.key.len().min(cols.saturating_sub(20));
                screen.push(format!(
                    "{:9.2} {:<14.14} {}",
                    e.count,
                    e.tag.name(),
                    String::from_utf8_lossy(&e.key[..len])
                ));
                last_shown = e.count;
            }
            if eof {
                continue;
            }
            e.count += (1.0 / 3.0 - e.count) / n.max(1) as f64;
            if e.count * 10.0 < last_shown || l > lines * 10 {
                drop.push(i);
            }
        }
        if !drop.is_empty() {
            drop.sort_unstable();
            for i in drop.into_iter().rev() {
                self.entries.swap_remove(i);
            }
            self.index = self
                .entries
                .iter()
                .enumerate()
                .map(|(i, e)| ((e.tag, e.key.clone()), i))
                .collect();
        }
        screen
    }
}

/// Runs `lacquer top` as `name`; returns the process exit code.
pub fn main(name: &str, args: &[String]) -> i32 {
    let p = prog(name);
    let a = match TopArgs::parse(&p, args) {
        Ok(a) => a,
        Err(e) => return e.report(),
    };
    let result = if a.once {
        count(&a).and_then(|top| {
            let mut out = std::io::stdout();
            out.write_all(&top.dump())
                .and_then(|()| out.flush())
                .map_err(|e| e.to_string())
        })
    } else {
        live(&a)
    };
    match result {
        Ok(()) => 0,
        Err(e) => Exit::error(e).report(),
    }
}

/// Reads the log to its end as the options say and counts it (what `-1`
/// prints).
pub fn count(a: &TopArgs) -> Result<Top, String> {
    let filter = a.common.record_filter()?;
    let mut reader = Reader::open(&a.common)?;
    let mut top = Top::new(a.first_field);
    read_all(&mut reader, &mut top, &filter)?;
    Ok(top)
}

fn read_all(reader: &mut Reader, top: &mut Top, filter: &RecordFilter) -> Result<(), String> {
    let signals = Signals::install();
    while !signals.stopping() {
        match reader.step()? {
            Step::Group(g) => top.accumulate(&g, filter),
            Step::Overrun => {}
            Step::Idle => std::thread::sleep(Duration::from_millis(10)),
            Step::End => break,
        }
    }
    Ok(())
}

fn live(a: &TopArgs) -> Result<(), String> {
    let filter = a.common.record_filter()?;
    let mut reader = Reader::open(&a.common)?;
    let mut top = Top::new(a.first_field);
    let ident = if a.common.read_file.is_some() {
        String::new()
    } else {
        crate::hostname()
    };
    let signals = Signals::install();
    let mut screen = Screen::open("use -1 for output to a pipe")?;
    let mut eof = false;
    let mut n = 0u64;
    let mut last: Option<Instant> = None;
    while !signals.stopping() && !signals.take_hup() {
        // Read what is there, for at most a tenth of a second.
        let started = Instant::now();
        while !eof && started.elapsed() < Duration::from_millis(100) {
            match reader.step()? {
                Step::Group(g) => top.accumulate(&g, &filter),
                Step::Overrun => {}
                Step::Idle => break,
                Step::End => eof = true,
            }
        }
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            last = Some(Instant::now());
            if n < a.period {
                n += 1;
            }
            let (cols, lines) = screen.size()?;
            screen.show(top.refresh(cols, lines, n, &ident, eof))?;
        }
        match screen.input(Duration::from_millis(50))? {
            Some(Input::Quit) => break,
            Some(Input::Redraw) => last = None,
            Some(Input::Char(_)) => screen.beep(),
            None => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lacquer_vsl::{Grouper, Grouping, Record, Vxid};

    fn counted(first_field: bool) -> Top {
        let mut top = Top::new(first_field);
        let mut g = Grouper::new(Grouping::Vxid);
        let filter = RecordFilter::new();
        for id in [1001, 1002] {
            let c = |tag, data: &str| Record::new(tag, Vxid::client(id), data);
            for r in [
                c(Tag::Begin, "req 1000 rxreq"),
                c(Tag::ReqURL, "/"),
                c(Tag::ReqHeader, &format!("Host: h{id}")),
                c(Tag::End, ""),
            ] {
                for grp in g.push(r) {
                    top.accumulate(&grp, &filter);
                }
            }
        }
        top
    }

    #[test]
    fn counts_and_decay() {
        let mut top = counted(false);
        assert_eq!(top.len(), 4);
        let dump = String::from_utf8(top.dump()).unwrap();
        assert!(dump.starts_with("     2.00 "), "{dump}");
        assert!(dump.contains("     1.00 ReqHeader Host: h1001\n"), "{dump}");
        let f = String::from_utf8(counted(true).dump()).unwrap();
        assert!(f.contains("     2.00 ReqHeader Host\n"), "{f}");
        let screen = top.refresh(40, 10, 1, "box", false);
        assert_eq!(screen[0], "list length 4                       box");
        assert!(screen[2].starts_with("     2.00 "), "{screen:?}");
        // n = 1: every count jumps to 1/3; none is far below the others.
        let screen = top.refresh(40, 10, 1, "box", true);
        assert!(screen[0].ends_with("box (EOF)"), "{screen:?}");
        assert!(screen[2].starts_with("     0.33 "), "{screen:?}");
    }

    #[test]
    fn options() {
        let p = prog("varnishtop");
        let parse =
            |v: &[&str]| TopArgs::parse(&p, &v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let e = parse(&["-p", "60", "-p", "12ABC"]).unwrap_err();
        assert_eq!(e.stderr, "Syntax error, 12ABC is not a number\n");
        let a = parse(&["-1", "-f", "-p", "0x10"]).unwrap();
        assert!(a.once && a.common.dump && a.first_field);
        assert_eq!(a.period, 16);
        assert!(
            parse(&["-K"])
                .unwrap_err()
                .stderr
                .contains("Usage: varnishtop <options>")
        );
    }
}
