//! The shared-memory directories of a working directory, in varnishd's
//! layout: `_.vsm_mgt/` for what the manager publishes, `_.vsm_child/` for
//! the cache's segments (the log, the counters), each with an `_.index`
//! naming its segments.
//!
//! A segment is a file of its own (`_.<class>.<16 hex digits>`) or a part
//! of a file shared by several (the counters file holds one `Stat` segment
//! per section); the index is a text log that readers replay: a
//! `# <pid> <seconds>` head line, then `+ <file> <offset> <length> <class>
//! <ident>` when a segment is published and `- ...` (the same fields) when
//! it is withdrawn. As varnishd's, an index that has collected many
//! withdrawals is rewritten with only the live segments. The manager
//! publishes its `Arg` segments (`-T`, the CLI address; `-S`, the secret
//! file) here, and `lacquer adm` finds the daemon through them.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The manager's directory, under the working directory.
pub const MGT_DIR: &str = "_.vsm_mgt";
/// The cache's directory, under the working directory: where the log and
/// the counters files live.
pub const CHILD_DIR: &str = "_.vsm_child";
/// The index file of a directory.
pub const INDEX: &str = "_.index";

/// One live segment of a directory.
#[derive(Debug)]
struct Segment {
    file: String,
    off: u64,
    len: u64,
    class: String,
    ident: String,
    /// The file was written for this segment alone (and goes with it).
    owned: bool,
}

impl Segment {
    fn line(&self, sign: char) -> String {
        format!(
            "{sign} {} {} {} {} {}\n",
            self.file, self.off, self.len, self.class, self.ident
        )
    }
}

/// Names a published segment, to withdraw it: its file and offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentId {
    file: String,
    off: u64,
}

impl SegmentId {
    /// The segment at `off` in `file`.
    pub fn new(file: String, off: u64) -> SegmentId {
        SegmentId { file, off }
    }
}

/// The writer of one directory.
#[derive(Debug)]
pub struct VsmDir {
    dir: PathBuf,
    next: u64,
    head: String,
    live: Vec<Segment>,
    /// Withdrawals appended since the index was last written whole.
    withdrawn: usize,
}

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
        let v = VsmDir {
            dir: dir.to_path_buf(),
            // Distinct names across runs in the same directory.
            next: now.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            head: format!("# {} {now}\n", std::process::id()),
            live: Vec::new(),
            withdrawn: 0,
        };
        v.rewrite()?;
        Ok(v)
    }

    /// The directory written.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Publishes `data` as a segment of `class` (`Arg`, `Params`, ...) in
    /// a file of its own, named `ident`; the index line comes after the
    /// file is complete.
    pub fn publish(&mut self, class: &str, ident: &str, data: &[u8]) -> io::Result<SegmentId> {
        self.next = self.next.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let file = format!("_.{class}.{:016x}", self.next);
        fs::write(self.dir.join(&file), data)?;
        self.add(Segment {
            file,
            off: 0,
            len: data.len() as u64,
            class: class.to_string(),
            ident: ident.to_string(),
            owned: true,
        })
    }

    /// Publishes `len` bytes at `off` of `file`, a file of this directory
    /// that its writer keeps (the log, the counters), as a segment of
    /// `class` named `ident`.
    pub fn publish_part(
        &mut self,
        file: &str,
        off: u64,
        len: u64,
        class: &str,
        ident: &str,
    ) -> io::Result<SegmentId> {
        self.add(Segment {
            file: file.to_string(),
            off,
            len,
            class: class.to_string(),
            ident: ident.to_string(),
            owned: false,
        })
    }

    /// Writes `data` at the start of a live segment of a file of its own
    /// (a buffer published with [`VsmDir::publish`]), cut to the
    /// segment's length.
    pub fn write(&self, id: &SegmentId, data: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let Some(seg) = self
            .live
            .iter()
            .find(|s| s.owned && s.file == id.file && s.off == id.off)
        else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no live segment {} in {}", id.file, self.dir.display()),
            ));
        };
        let n = data.len().min(seg.len as usize);
        fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join(&seg.file))?
            .write_all_at(&data[..n], seg.off)
    }

    fn add(&mut self, seg: Segment) -> io::Result<SegmentId> {
        self.append(&seg.line('+'))?;
        let id = SegmentId {
            file: seg.file.clone(),
            off: seg.off,
        };
        self.live.push(seg);
        Ok(id)
    }

    /// Withdraws a segment (a file of its own is removed). As varnishd,
    /// the withdrawal is appended to the index, unless at least ten have
    /// been and they reach half the live segments: then the index is
    /// rewritten with only the live ones. Unknown ids are ignored.
    pub fn withdraw(&mut self, id: &SegmentId) -> io::Result<()> {
        let Some(i) = self
            .live
            .iter()
            .position(|s| s.file == id.file && s.off == id.off)
        else {
            return Ok(());
        };
        let seg = self.live.remove(i);
        if self.withdrawn < 10 || self.withdrawn * 2 < self.live.len() {
            self.append(&seg.line('-'))?;
            self.withdrawn += 1;
        } else {
            self.rewrite()?;
            self.withdrawn = 0;
        }
        if seg.owned {
            match fs::remove_file(self.dir.join(&seg.file)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    fn append(&self, line: &str) -> io::Result<()> {
        fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join(INDEX))?
            .write_all(line.as_bytes())
    }

    /// Writes the index whole: its head and the live segments. Written
    /// under another name and renamed, so a reader never sees a partial
    /// index.
    fn rewrite(&self) -> io::Result<()> {
        let mut text = self.head.clone();
        for s in &self.live {
            text.push_str(&s.line('+'));
        }
        let tmp = self.dir.join("_.index.new");
        fs::write(&tmp, text)?;
        fs::rename(&tmp, self.dir.join(INDEX))
    }
}

/// Reads the live segment of `class` named `ident` in `dir`, replaying
/// its index; `None` if the directory, the index or the segment is
/// missing.
pub fn read_segment(dir: &Path, class: &str, ident: &str) -> Option<Vec<u8>> {
    let index = fs::read_to_string(dir.join(INDEX)).ok()?;
    fs::read(dir.join(live_segment(&index, class, ident)?)).ok()
}

/// The file of the live segment of `class` named `ident` in the text of an
/// index: the last one published and not withdrawn. Lines that are not
/// index lines, and file names that would leave the directory, are
/// ignored.
pub fn live_segment<'a>(index: &'a str, class: &str, ident: &str) -> Option<&'a str> {
    let mut live: Vec<&str> = Vec::new();
    for line in index.lines() {
        let mut f = line.splitn(6, ' ');
        let (Some(sign), Some(file), Some(_), Some(_), Some(c)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if c != class
            || f.next().unwrap_or("") != ident
            || !file.starts_with("_.")
            || file.contains('/')
        {
            continue;
        }
        match sign {
            "+" => live.push(file),
            "-" => live.retain(|x| *x != file),
            _ => {}
        }
    }
    live.last().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("lq-vsm-{name}-{}", std::process::id()))
    }

    #[test]
    fn publish_and_read() {
        let dir = tmp("a");
        let mut v = VsmDir::create(&dir).unwrap();
        v.publish("Arg", "-T", b"127.0.0.1:1234").unwrap();
        v.publish("Arg", "-S", b"/x/_.secret").unwrap();
        assert_eq!(
            read_segment(&dir, "Arg", "-T").as_deref(),
            Some(&b"127.0.0.1:1234"[..])
        );
        assert!(read_segment(&dir, "Arg", "-i").is_none());
        let index = fs::read_to_string(dir.join(INDEX)).unwrap();
        let lines: Vec<&str> = index.lines().collect();
        assert!(lines[0].starts_with("# "));
        assert!(lines[1].starts_with("+ _.Arg.") && lines[1].ends_with(" 0 14 Arg -T"));
        // A new run starts the directory afresh.
        VsmDir::create(&dir).unwrap();
        assert!(read_segment(&dir, "Arg", "-T").is_none());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn withdrawals_append_then_compact() {
        let dir = tmp("w");
        let mut v = VsmDir::create(&dir).unwrap();
        let own = v.publish("Params", "", b"p").unwrap();
        let ids: Vec<SegmentId> = (0..30)
            .map(|i| {
                v.publish_part("_.vsc", 64 * i, 64, "Stat", &format!("VBE.x{i}"))
                    .unwrap()
            })
            .collect();
        let index = || fs::read_to_string(dir.join(INDEX)).unwrap();
        let minus = |t: &str| t.lines().filter(|l| l.starts_with('-')).count();
        v.write(&own, b"qq").unwrap();
        assert_eq!(fs::read(dir.join(&own.file)).unwrap(), b"q");
        assert!(v.write(&ids[0], b"x").is_err());
        v.withdraw(&own).unwrap();
        assert!(!dir.join(&own.file).exists());
        assert!(v.write(&own, b"x").is_err());
        assert!(index().ends_with(" 0 1 Params \n"));
        for id in &ids[..9] {
            v.withdraw(id).unwrap();
        }
        // Ten withdrawals so far, all appended; 21 segments live.
        assert_eq!(minus(&index()), 10);
        v.withdraw(&ids[9]).unwrap();
        // Ten appended reach half of the 20 left: rewritten.
        let t = index();
        assert_eq!(minus(&t), 0);
        assert!(t.starts_with("# "));
        assert_eq!(t.lines().count(), 1 + 20);
        assert_eq!(live_segment(&t, "Stat", "VBE.x10"), Some("_.vsc"));
        assert_eq!(live_segment(&t, "Stat", "VBE.x9"), None);
        v.withdraw(&ids[10]).unwrap();
        assert_eq!(minus(&index()), 1);
        // Unknown ids are ignored.
        let t = index();
        v.withdraw(&ids[0]).unwrap();
        assert_eq!(index(), t);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn index_lines_are_replayed_and_checked() {
        let index = "# 1 2\n+ _.Arg.1 0 3 Arg -T\n+ _.Arg.2 0 3 Arg -T\n- _.Arg.2 0 3 Arg -T\n\
                     + ../x 0 1 Arg -S\n+ _.Arg.3 0 1 Arg\ngarbage\n";
        assert_eq!(live_segment(index, "Arg", "-T"), Some("_.Arg.1"));
        assert_eq!(live_segment(index, "Arg", "-S"), None);
        assert_eq!(live_segment(index, "Arg", ""), Some("_.Arg.3"));
    }
}
