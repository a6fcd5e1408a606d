//! The shared-memory directories of a working directory, in varnishd's
//! layout: `_.vsm_mgt/` for what the manager publishes, each with an
//! `_.index` naming its segments.
//!
//! A segment is a file of its own (`_.<class>.<16 hex digits>`); the index
//! is a text log that readers replay: a `# <pid> <seconds>` head line,
//! then `+ <file> <offset> <length> <class> <ident>` when a segment is
//! published and `- ...` (the same fields) when it is withdrawn (readers
//! replay both). The manager publishes its `Arg` segments
//! (`-T`, the CLI address; `-S`, the secret file) here, and `lacquer adm`
//! finds the daemon through them.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The manager's directory, under the working directory.
pub const MGT_DIR: &str = "_.vsm_mgt";
/// The index file of a directory.
pub const INDEX: &str = "_.index";

/// The writer of one directory.
#[derive(Debug)]
pub struct VsmDir {
    dir: PathBuf,
    next: u64,
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
        // Written under another name and renamed, so a reader never sees
        // an index without its head.
        let tmp = dir.join("_.index.new");
        fs::write(&tmp, format!("# {} {now}\n", std::process::id()))?;
        fs::rename(&tmp, dir.join(INDEX))?;
        Ok(VsmDir {
            dir: dir.to_path_buf(),
            // Distinct names across runs in the same directory.
            next: now.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        })
    }

    /// Publishes `data` as a segment of `class` (`Arg`, `Stat`, ...) named
    /// `ident`; the index line comes after the file is complete.
    pub fn publish(&mut self, class: &str, ident: &str, data: &[u8]) -> io::Result<()> {
        self.next = self.next.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let file = format!("_.{class}.{:016x}", self.next);
        fs::write(self.dir.join(&file), data)?;
        let line = format!("+ {file} 0 {} {class} {ident}\n", data.len());
        fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join(INDEX))?
            .write_all(line.as_bytes())
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
    fn index_lines_are_replayed_and_checked() {
        let index = "# 1 2\n+ _.Arg.1 0 3 Arg -T\n+ _.Arg.2 0 3 Arg -T\n- _.Arg.2 0 3 Arg -T\n\
                     + ../x 0 1 Arg -S\n+ _.Arg.3 0 1 Arg\ngarbage\n";
        assert_eq!(live_segment(index, "Arg", "-T"), Some("_.Arg.1"));
        assert_eq!(live_segment(index, "Arg", "-S"), None);
        assert_eq!(live_segment(index, "Arg", ""), Some("_.Arg.3"));
    }
}
