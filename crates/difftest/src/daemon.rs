//! Starting varnishd or lacquerd for a batch (foreground, a private `-n`
//! directory, free loopback ports, the same parameters for both), talking
//! to its management CLI (varnishd's framing, `-S none`), loading a VCL per
//! scenario and reading counters with the matching `-1` stat tool.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which implementation a daemon is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Varnish,
    Lacquer,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Varnish => "varnishd",
            Kind::Lacquer => "lacquerd",
        }
    }
}

/// Where the programs are.
#[derive(Clone, Debug)]
pub struct Programs {
    pub varnishd: PathBuf,
    pub varnishstat: PathBuf,
    pub lacquerd: PathBuf,
    pub lacquer: PathBuf,
}

impl Programs {
    /// As [`Programs::find`], after building lacquerd and lacquer with
    /// the cargo that runs the tests (so a fresh checkout's `cargo test`
    /// tests the current sources, not a missing or stale binary).
    pub fn build_and_find() -> Result<Programs, String> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let st = Command::new(&cargo)
            .current_dir(&root)
            .args(["build", "-q", "-p", "lacquerd", "-p", "lacquer"])
            .status()
            .map_err(|e| format!("cannot run cargo to build lacquerd: {e}"))?;
        if !st.success() {
            return Err(format!("cargo build -p lacquerd -p lacquer failed ({st})"));
        }
        Programs::find()
    }

    /// varnishd and varnishstat from `PATH`/`/usr/sbin`, lacquerd and
    /// lacquer next to this executable (or in `target/debug`).
    pub fn find() -> Result<Programs, String> {
        let sys = |n: &str| -> Result<PathBuf, String> {
            for d in ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"] {
                let p = Path::new(d).join(n);
                if p.exists() {
                    return Ok(p);
                }
            }
            Err(format!(
                "{n} not found in /usr/sbin, /usr/bin or /usr/local: install Varnish 7.1 (apt-get install varnish)"
            ))
        };
        let ours = |n: &str| -> Result<PathBuf, String> {
            let mut cands = Vec::new();
            if let Ok(me) = std::env::current_exe() {
                let d = me.parent().map(Path::to_path_buf).unwrap_or_default();
                cands.push(d.join(n));
                if let Some(up) = d.parent() {
                    cands.push(up.join(n));
                }
            }
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug");
            cands.push(root.join(n));
            cands.into_iter().find(|p| p.exists()).ok_or_else(|| {
                format!("{n} not found beside this program or in target/debug: run `cargo build -p lacquerd -p lacquer`")
            })
        };
        Ok(Programs {
            varnishd: sys("varnishd")?,
            varnishstat: sys("varnishstat")?,
            lacquerd: ours("lacquerd")?,
            lacquer: ours("lacquer")?,
        })
    }
}

/// Parameters both daemons run with: short timeouts so that a stalled peer
/// costs seconds, not minutes.
pub const PARAMS: &[(&str, &str)] = &[
    ("first_byte_timeout", "2"),
    ("between_bytes_timeout", "2"),
    ("connect_timeout", "1"),
    ("timeout_idle", "5"),
    ("send_timeout", "10"),
    ("backend_idle_timeout", "3"),
    ("thread_pool_min", "10"),
    ("max_restarts", "3"),
    ("max_retries", "2"),
];

pub struct Daemon {
    pub kind: Kind,
    pub dir: PathBuf,
    pub http_port: u16,
    cli: TcpStream,
    child: Child,
    vcl_seq: usize,
    stat: PathBuf,
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn cli_read(s: &mut TcpStream) -> std::io::Result<(u32, String)> {
    let mut head = [0u8; 13];
    s.read_exact(&mut head)?;
    let h = String::from_utf8_lossy(&head);
    let mut it = h.split_whitespace();
    let bad = || std::io::Error::other(format!("bad CLI reply header {h:?}"));
    let status: u32 = it.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
    let len: usize = it.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
    let mut body = vec![0u8; len + 1];
    s.read_exact(&mut body)?;
    body.pop();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

impl Daemon {
    /// Starts one daemon in a fresh directory under `root` and waits until
    /// its CLI answers and its listener accepts.
    pub fn start(
        kind: Kind,
        progs: &Programs,
        root: &Path,
        extra: &[String],
    ) -> Result<Daemon, String> {
        let dir = root.join(kind.name());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let vcl = dir.join("boot.vcl");
        std::fs::write(
            &vcl,
            "vcl 4.1;\nbackend default { .host = \"127.0.0.1\"; .port = \"9\"; }\n",
        )
        .map_err(|e| format!("cannot write {}: {e}", vcl.display()))?;
        let http_port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let cli_port = free_port().map_err(|e| format!("no free port: {e}"))?;
        let (bin, stat) = match kind {
            Kind::Varnish => (progs.varnishd.clone(), progs.varnishstat.clone()),
            Kind::Lacquer => (progs.lacquerd.clone(), progs.lacquer.clone()),
        };
        let mut c = Command::new(&bin);
        c.arg("-F")
            .arg("-n")
            .arg(dir.join("n"))
            .arg("-a")
            .arg(format!("127.0.0.1:{http_port}"))
            .arg("-T")
            .arg(format!("127.0.0.1:{cli_port}"))
            .arg("-S")
            .arg("none")
            .arg("-f")
            .arg(&vcl)
            .arg("-s")
            .arg("malloc,64m")
            .arg("-j")
            .arg("none");
        for (k, v) in PARAMS {
            c.arg("-p").arg(format!("{k}={v}"));
        }
        c.args(extra);
        let log = std::fs::File::create(dir.join("daemon.log"))
            .map_err(|e| format!("cannot create the daemon log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| format!("{e}"))?;
        c.stdin(Stdio::null()).stdout(log).stderr(log2);
        let mut child = c
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let end = Instant::now() + Duration::from_secs(30);
        let cli = loop {
            if let Ok(Some(st)) = child.try_wait() {
                let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
                return Err(format!("{} exited at startup ({st}): {log}", kind.name()));
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", cli_port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
                if cli_read(&mut s).is_ok() {
                    break s;
                }
            }
            if Instant::now() > end {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} did not answer on its CLI within 30 s",
                    kind.name()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut d = Daemon {
            kind,
            dir,
            http_port,
            cli,
            child,
            vcl_seq: 0,
            stat,
        };
        // The child (varnishd's cache process) may still be starting.
        while TcpStream::connect(("127.0.0.1", http_port)).is_err() {
            if Instant::now() > end {
                return Err(format!("{} does not accept on its listener", kind.name()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        d.cli("ping")?;
        Ok(d)
    }

    /// One CLI command; its status and text.
    pub fn cli(&mut self, cmd: &str) -> Result<(u32, String), String> {
        self.cli
            .write_all(format!("{cmd}\n").as_bytes())
            .map_err(|e| format!("{}: CLI write failed: {e}", self.kind.name()))?;
        cli_read(&mut self.cli).map_err(|e| format!("{}: CLI read failed: {e}", self.kind.name()))
    }

    /// Loads and activates `vcl`; the compiler's message when rejected.
    pub fn load_vcl(&mut self, vcl: &str) -> Result<Result<(), String>, String> {
        self.vcl_seq += 1;
        let name = format!("d{}", self.vcl_seq);
        let (st, text) = self.cli(&format!(
            "vcl.inline {name} << DIFFTEST_EOF\n{vcl}\nDIFFTEST_EOF"
        ))?;
        if st != 200 {
            return Ok(Err(text));
        }
        let (st, text) = self.cli(&format!("vcl.use {name}"))?;
        if st != 200 {
            return Err(format!(
                "{}: vcl.use {name} failed: {text}",
                self.kind.name()
            ));
        }
        // Keep the list short: discard what the previous scenarios loaded.
        let (_, list) = self.cli("vcl.list")?;
        for l in list.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.first() == Some(&"available")
                && let Some(n) = f.last()
                && n.starts_with('d')
            {
                let _ = self.cli(&format!("vcl.discard {n}"));
            }
        }
        Ok(Ok(()))
    }

    /// Every counter: `MAIN.*` by its short name, others by full name.
    pub fn counters(&self) -> BTreeMap<String, u64> {
        let mut c = Command::new(&self.stat);
        if self.kind == Kind::Lacquer {
            c.arg("stat");
        }
        let out = c
            .arg("-1")
            .arg("-n")
            .arg(self.dir.join("n"))
            .stderr(Stdio::null())
            .output();
        let mut m = BTreeMap::new();
        if let Ok(o) = out {
            for l in String::from_utf8_lossy(&o.stdout).lines() {
                let mut it = l.split_whitespace();
                if let (Some(n), Some(v)) = (it.next(), it.next())
                    && let Ok(v) = v.parse()
                {
                    m.insert(n.strip_prefix("MAIN.").unwrap_or(n).to_string(), v);
                }
            }
        }
        m
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").arg("-TERM").arg(&pid).status();
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
