//! The shared-memory directories of a working directory, in varnishd's
//! layout: `_.vsm_mgt/` for what the manager publishes, each with an
//! `_.index` naming its segments.
//!
//! A segment is a file of its own (`_.<class>.<16 hex digits>`); the index
//! is a text log that readers replay: a `# <pid> <seconds>` head line,
//! then `+ <file> <offset> <length> <class> <ident>` when a segment is
//! published and `- ...` (the same fields) when it is withdrawn. Once
//! withdrawals pile up (at least ten, and half as many as the live
//! segments), the index is rewritten with the live segments only, as
//! varnishd's writer does. The manager publishes its `Arg` segments
//! (`-T`, the CLI address; `-S`, the secret file) here, and `lacquer adm`
//! finds the daemon through them.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The manager's directory, under the working directory.
pub const MGT_DIR: &str = "_.vsm_mgt";
/// The index file of a directory.
pub const INDEX: &str = "_.index";

/// A published segment.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Segment {
    file: String,
    len: usize,
    class: String,
    ident: String,
}

impl Segment {
    fn line(&self, sign: char) -> String {
        format!(
            "{sign} {} 0 {} {} {}\n",
            self.file, self.len, self.class, self.ident
        )
    }
}

/// The writer of one directory.
#[derive(Debug)]
pub struct VsmDir {
    dir: PathBuf,
    head: String,
    live: Vec<Segment>,
    /// `-` lines in the index since it was last written whole.
    withdrawn: usize,
    next: u64,
}

/// A handle to a published segment, for [`VsmDir::withdraw`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentId(String);

impl VsmDir {
    /// Creates `dir` afresh (what an earlier run left is removed) with an
    /// index holding only its head line.
    pub fn create(dir: &Path) -> io::Result<VsmDir> {
        match fs::remove_dir_all(dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        fs::create_dir_all(dir)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut v = VsmDir {
            dir: dir.to_path_buf(),
            head: format!("# {} {now}\n", std::process::id()),
            live: Vec::new(),
            withdrawn: 0,
            // Distinct names across runs in the same directory.
            next: now.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        };
        v.rewrite()?;
        Ok(v)
    }

    /// Publishes `data` as a segment of `class` (`Arg`, `Stat`, ...) named
    /// `ident`; the index line comes after the file is complete.
    pub fn publish(&mut self, class: &str, ident: &str, data: &[u8]) -> io::Result<SegmentId> {
        self.next = self.next.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let file = format!("_.{class}.{:016x}", self.next);
        fs::write(self.dir.join(&file), data)?;
        let seg = Segment {
            file: file.clone(),
            len: data.len(),
            class: class.to_string(),
            ident: ident.to_string(),
        };
        self.append(&seg.line('+'))?;
        self.live.push(seg);
        Ok(SegmentId(file))
    }

    /// Withdraws a segment: its `-` line is logged (or the index rewritten)
    /// before the file goes.
    pub fn withdraw(&mut self, id: &SegmentId) -> io::Result<()> {
        let Some(i) = self.live.iter().position(|s| s.file == id.0) else {
            return Ok(());
        };
        let seg = self.live.remove(i);
        if self.withdrawn < 10 || self.withdrawn * 2 < self.live.len() {
            self.append(&seg.line('-'))?;
            self.withdrawn += 1;
        } else {
            self.rewrite()?;
        }
        fs::remove_file(self.dir.join(&seg.file))
    }

    fn append(&self, line: &str) -> io::Result<()> {
        fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join(INDEX))?
            .write_all(line.as_bytes())
    }

    /// Writes the index whole (head and live segments) under a temporary
    /// name and renames it into place, so readers never see half of it.
    fn rewrite(&mut self) -> io::Result<()> {
        let mut text = self.head.clone();
        for s in &self.live {
            text.push_str(&s.line('+'));
        }
        let tmp = self.dir.join("_.index.new");
        fs::write(&tmp, text)?;
        fs::rename(&tmp, self.dir.join(INDEX))?;
        self.withdrawn = 0;
        Ok(())
    }
}

/// Reads the live segment of `class` named `ident` in `dir`, replaying
/// its index; `None` if the directory, the index or the segment is
/// missing.
pub fn read_segment(dir: &Path, class: &str, ident: &str) -> Option<Vec<u8>> {
    let index = fs::read_to_string(dir.join(INDEX)).ok()?;
    let mut live: Vec<&str> = Vec::new();
    for line in index.lines() {
        let mut f = line.splitn(6, ' ');
        let (Some(sign), Some(file), Some(_), Some(_), Some(c), id) =
            (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if c != class || id.unwrap_or("") != ident {
            continue;
        }
        match sign {
            "+" => live.push(file),
            "-" => live.retain(|x| *x != file),
            _ => {}
        }
    }
    fs::read(dir.join(live.last()?)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("lq-vsm-{name}-{}", std::process::id()))
    }

    #[test]
    fn publish_read_withdraw() {
        let dir = tmp("a");
        let mut v = VsmDir::create(&dir).unwrap();
        let t = v.publish("Arg", "-T", b"127.0.0.1:1234").unwrap();
        v.publish("Arg", "-S", b"/x/_.secret").unwrap();
        assert_eq!(
            read_segment(&dir, "Arg", "-T").as_deref(),
            Some(&b"127.0.0.1:1234"[..])
        );
        let index = fs::read_to_string(dir.join(INDEX)).unwrap();
        let lines: Vec<&str> = index.lines().collect();
        assert!(lines[0].starts_with("# "));
        assert!(lines[1].starts_with("+ _.Arg.") && lines[1].ends_with(" 0 14 Arg -T"));
        v.withdraw(&t).unwrap();
        assert_eq!(read_segment(&dir, "Arg", "-T"), None);
        let index = fs::read_to_string(dir.join(INDEX)).unwrap();
        assert!(index.lines().last().unwrap().starts_with("- _.Arg."));
        assert!(read_segment(&dir, "Arg", "-S").is_some());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn many_withdrawals_rewrite_the_index() {
        let dir = tmp("b");
        let mut v = VsmDir::create(&dir).unwrap();
        let ids: Vec<SegmentId> = (0..30)
            .map(|i| v.publish("Stat", &format!("S{i}"), b"x").unwrap())
            .collect();
        for id in &ids[..25] {
            v.withdraw(id).unwrap();
        }
        let index = fs::read_to_string(dir.join(INDEX)).unwrap();
        let minus = index.lines().filter(|l| l.starts_with('-')).count();
        assert!(minus < 25, "index was never rewritten: {minus} withdrawals");
        let plus = index.lines().filter(|l| l.starts_with('+')).count();
        assert!(plus - minus == 5);
        assert!(read_segment(&dir, "Stat", "S29").is_some());
        assert!(read_segment(&dir, "Stat", "S0").is_none());
        fs::remove_dir_all(&dir).unwrap();
    }
}
