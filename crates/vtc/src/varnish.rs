//! `varnish vN`: drives the daemon under test exactly like varnishtest 7.1
//! drives varnishd: same command line (`-d -n DIR ... -M 'ADDR PORT'`), the
//! daemon calls back on the `-M` socket, the runner answers the CLI
//! authentication challenge with the `_.secret` file, then loads VCL
//! (`vcl.inline`/`vcl.use`), starts and stops the child, and polls counters.

use crate::ctx::{Ctx, R, lock, send_signal};
use crate::script::{self, Cmd};
use crate::sources::{CounterSource, LogQuery};
use crate::text::{bytes, latin1};
use crate::{bail, fail};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The delimiter varnishtest uses for `vcl.inline` here-documents.
const NONSENSE: &str = "%XJEIFLH|)Xspa8P";

/// CLI status codes used here.
/// Status of a failed VCL compilation.
const CLIS_VCL_FAIL: u32 = 106;
const CLIS_OK: u32 = 200;
const CLIS_AUTH: u32 = 107;

/// One daemon instance.
pub struct Varnish {
    /// `vN`.
    pub name: String,
    workdir: PathBuf,
    args: Vec<String>,
    proto: Option<String>,
    syntax: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    cli: Option<TcpStream>,
    vcl_nbr: u32,
    expect_exit: i32,
    counters: Option<Box<dyn CounterSource>>,
    /// The `vsl|` printer (`-v`): its stop flag and thread.
    vsl: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl std::fmt::Debug for Varnish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Varnish").field("name", &self.name).finish()
    }
}

/// Read one CLI response: `STATUS LEN\n` + LEN bytes + `\n`; the body as
/// Latin-1 text.
pub fn read_cli_response(r: &mut impl Read) -> Result<(u16, String), String> {
    let (status, body) = lacquer_cli::read_reply(r).map_err(|e| e.to_string())?;
    Ok((status, latin1(&body)))
}

impl Varnish {
    fn new(ctx: &Ctx, name: &str) -> R<Self> {
        let workdir = ctx.tmpdir.join(name);
        let _ = std::fs::remove_dir_all(&workdir);
        std::fs::create_dir_all(&workdir)
            .map_err(|e| fail!("cannot create {}: {e}", workdir.display()))?;
        Ok(Varnish {
            name: name.to_string(),
            workdir,
            args: Vec::new(),
            proto: None,
            syntax: "4.1".into(),
            child: None,
            stdin: None,
            cli: None,
            vcl_nbr: 0,
            expect_exit: 0,
            counters: None,
            vsl: None,
        })
    }

    fn ask(&mut self, ctx: &Ctx, cmd: Option<&str>) -> R<(u32, String)> {
        let cli = self
            .cli
            .as_mut()
            .ok_or_else(|| fail!("CLI connection is not open"))?;
        if let Some(c) = cmd {
            ctx.dump(4, &self.name, "CLI TX", c);
            let mut b = bytes(c);
            b.push(b'\n');
            cli.write_all(&b)
                .map_err(|e| fail!("CLI write failed ({c}): {e}"))?;
        }
        let _ = cli.set_read_timeout(Some(ctx.cfg.timeout.max(Duration::from_secs(20))));
        let (st, body) = read_cli_response(cli).map_err(|e| {
            fail!(
                "CLI failed: {e} (command: {})",
                cmd.unwrap_or("").lines().next().unwrap_or("")
            )
        })?;
        ctx.log(3, &self.name, &format!("CLI RX  {st}"));
        ctx.dump(4, &self.name, "CLI RX", &body);
        Ok((u32::from(st), body))
    }

    fn launch(&mut self, ctx: &Arc<Ctx>) -> R<()> {
        if self.cli.is_some() {
            return Ok(());
        }
        let l = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| fail!("cannot open CLI listen socket: {e}"))?;
        let la = l.local_addr().map_err(|e| fail!("{e}"))?;
        ctx.log(2, &self.name, "Launch");
        let wd = self.workdir.display().to_string();
        // Like varnishtest: no default listen address when -arg gave one.
        let user_a = self.args.iter().any(|x| x.contains("-a "));
        let a = match (&self.proto, user_a) {
            (_, true) => String::new(),
            (Some(p), false) => format!(" -a '127.0.0.1:0',{p}"),
            (None, false) => " -a '127.0.0.1:0'".to_string(),
        };
        let mut cmdline = format!(
            "cd {} && exec {} -d -n {wd} -l 2m -p auto_restart=off -p syslog_cli_traffic=off \
             -p thread_pool_min=10 -p debug=+vtc_mode -p vsl_mask=+Debug \
             -p h2_initial_window_size=1m -p h2_rx_window_low_water=64k{a} \
             -M '{} {}' -P {wd}/varnishd.pid",
            ctx.cfg.pwd.display(),
            ctx.cfg.varnishd.display(),
            la.ip(),
            la.port()
        );
        for x in &self.args {
            cmdline.push(' ');
            cmdline.push_str(x);
        }
        cmdline.push(' ');
        ctx.log(3, &self.name, &format!("CMD: {cmdline}"));
        let mut c = ctx.shell_command(&cmdline);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = c
            .spawn()
            .map_err(|e| fail!("cannot start {}: {e}", ctx.cfg.varnishd.display()))?;
        let pid = child.id();
        ctx.track_pid(pid, true);
        ctx.log(3, &self.name, &format!("PID: {pid}"));
        ctx.define(&self.name, &format!("{}_pid", self.name), &pid.to_string());
        ctx.define(&self.name, &format!("{}_name", self.name), &wd);
        for (pipe, _) in [
            (
                child
                    .stdout
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
                0,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|p| Box::new(p) as Box<dyn Read + Send>),
                1,
            ),
        ] {
            if let Some(p) = pipe {
                let (c2, n2) = (ctx.clone(), self.name.clone());
                std::thread::spawn(move || {
                    for line in BufReader::new(p).split(b'\n') {
                        let Ok(line) = line else { break };
                        c2.log(3, &n2, &format!("debug|{}", latin1(&line)));
                    }
                });
            }
        }
        self.stdin = child.stdin.take();
        self.child = Some(child);
        // Wait for the daemon to call home on the -M socket.
        let _ = l.set_nonblocking(true);
        let end = Instant::now() + Duration::from_secs(10);
        let conn = loop {
            match l.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => bail!("FAIL no CLI connection accepted: {e}"),
            }
            if let Some(ch) = self.child.as_mut()
                && let Ok(Some(st)) = ch.try_wait()
            {
                bail!("FAIL daemon exited before connecting to the CLI ({st})");
            }
            if Instant::now() > end {
                bail!("FAIL timeout waiting for CLI connection");
            }
            if ctx.aborted() {
                return Err(ctx.aborted_err());
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let _ = conn.set_nonblocking(false);
        if let Ok(h) = conn.try_clone() {
            ctx.register_socket(crate::ctx::SockHandle::Tcp(h));
        }
        self.cli = Some(conn);
        let (st, body) = self.ask(ctx, None)?;
        if st != CLIS_AUTH {
            bail!("CLI auth demand expected: {st} {}", body);
        }
        let challenge = body.lines().next().unwrap_or("").to_string();
        let sf = self.workdir.join("_.secret");
        let secret = std::fs::read(&sf).map_err(|e| fail!("cannot read {}: {e}", sf.display()))?;
        let resp = lacquer_cli::auth_response(&challenge, &secret);
        let (st, body) = self.ask(ctx, Some(&format!("auth {resp}")))?;
        if st != CLIS_OK {
            bail!("CLI auth command failed: {st} {body}");
        }
        self.counters = Some((ctx.cfg.counters)(&self.workdir));
        if ctx.cfg.print_vsl {
            self.vsl = Some(self.print_vsl(ctx));
        }
        Ok(())
    }

    /// Copy the daemon's log into the test log as varnishtest's `vsl|`
    /// lines, from the head of the log on, until [`Self::stop_vsl`]. The
    /// log exists only once the child runs, so opening it is retried.
    fn print_vsl(&self, ctx: &Arc<Ctx>) -> (Arc<AtomicBool>, JoinHandle<()>) {
        let stop = Arc::new(AtomicBool::new(false));
        let (ctx, name, flag) = (ctx.clone(), self.name.clone(), stop.clone());
        let q = LogQuery {
            workdir: self.workdir.clone(),
            grouping: "raw".into(),
            from_head: true,
            ..LogQuery::default()
        };
        let h = std::thread::spawn(move || {
            let mut src = loop {
                if flag.load(Ordering::Relaxed) || ctx.aborted() {
                    return;
                }
                match (ctx.cfg.logs)(&q) {
                    Ok(s) => break s,
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            };
            loop {
                let stopping = flag.load(Ordering::Relaxed) || ctx.aborted();
                match src.next(Duration::from_millis(100)) {
                    Ok(Some(r)) => ctx.log(
                        4,
                        &name,
                        &format!("vsl| {:>10} {:<15} {} {}", r.vxid, r.tag, r.kind, r.data),
                    ),
                    Ok(None) if !stopping => {}
                    Ok(None) | Err(_) => return,
                }
            }
        });
        (stop, h)
    }

    /// End the `vsl|` printer once it has read what the log holds.
    fn stop_vsl(&mut self) {
        if let Some((stop, h)) = self.vsl.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = h.join();
        }
    }

    fn status_loop(&mut self, ctx: &Ctx, want_running: bool) -> R<()> {
        loop {
            ctx.log(
                3,
                &self.name,
                if want_running {
                    "wait-running"
                } else {
                    "wait-stopped"
                },
            );
            let (st, r) = self.ask(ctx, Some("status"))?;
            if st != CLIS_OK {
                bail!("CLI status command failed: {st} {r}");
            }
            if r == "Child in state stopped" {
                if want_running {
                    bail!("Child stopped before running: {st} {r}");
                }
                return Ok(());
            }
            if want_running && r == "Child in state running" {
                return Ok(());
            }
            ctx.sleep(Duration::from_millis(200))?;
        }
    }

    fn start(&mut self, ctx: &Arc<Ctx>) -> R<()> {
        self.launch(ctx)?;
        ctx.log(2, &self.name, "Start");
        let (st, r) = self.ask(ctx, Some("start"))?;
        if st != CLIS_OK {
            bail!("CLI start command failed: {st} {r}");
        }
        self.status_loop(ctx, true)?;
        let (st, r) = self.ask(ctx, Some("debug.listen_address"))?;
        if st != CLIS_OK {
            bail!("CLI debug.listen_address command failed: {st} {r}");
        }
        let (st, r) = self.ask(ctx, Some("debug.xid 999"))?;
        if st != CLIS_OK {
            bail!("CLI debug.xid command failed: {st} {r}");
        }
        let (st, r) = self.ask(ctx, Some("debug.listen_address"))?;
        if st != CLIS_OK {
            bail!("CLI debug.listen_address command failed: {st} {r}");
        }
        let mut first = true;
        for l in r.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 3 {
                continue;
            }
            let (an, addr, port) = (f[0], f[1], f[2]);
            // Unix sockets are listed as `aN /path -` and published like
            // varnishtest does: addr 0.0.0.0, port 0, sock the path.
            let (addr, port, sock) = if port == "-" {
                ("0.0.0.0", "0", addr.to_string())
            } else if addr.contains(':') {
                (addr, port, format!("[{addr}]:{port}"))
            } else {
                (addr, port, format!("{addr}:{port}"))
            };
            if first {
                ctx.log(2, &self.name, &format!("Listen on {addr} {port}"));
                ctx.define(&self.name, &format!("{}_addr", self.name), addr);
                ctx.define(&self.name, &format!("{}_port", self.name), port);
                ctx.define(&self.name, &format!("{}_sock", self.name), &sock);
                first = false;
            }
            ctx.define(&self.name, &format!("{}_{an}_addr", self.name), addr);
            ctx.define(&self.name, &format!("{}_{an}_port", self.name), port);
            ctx.define(&self.name, &format!("{}_{an}_sock", self.name), &sock);
        }
        if first {
            bail!("debug.listen_address gave no address: {r}");
        }
        Ok(())
    }

    fn stop(&mut self, ctx: &Arc<Ctx>) -> R<()> {
        self.launch(ctx)?;
        // As varnishtest 7.1: `${vN_sock}` and its kin stay defined.
        ctx.log(2, &self.name, "Stop");
        self.ask(ctx, Some("stop"))?;
        self.status_loop(ctx, false)
    }

    /// Close the CLI and stdin, and collect the exit status.
    fn cleanup(&mut self, ctx: &Ctx) -> R<()> {
        self.stop_vsl();
        if let Some(c) = self.cli.take() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        self.stdin = None;
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = child.id();
        let end = Instant::now() + Duration::from_secs(10);
        let st = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) => {}
                Err(e) => bail!("wait for daemon failed: {e}"),
            }
            if Instant::now() > end || ctx.aborted() {
                send_signal(pid, "KILL", true);
                let _ = child.wait();
                ctx.untrack_pid(pid);
                bail!("daemon did not exit after its CLI and stdin were closed");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        ctx.untrack_pid(pid);
        ctx.log(2, &self.name, &format!("WAIT4 pid={pid} status={st}"));
        let code = st.code();
        if code != Some(self.expect_exit) {
            bail!("Bad exit status: {st} (expected exit {})", self.expect_exit);
        }
        Ok(())
    }

    /// Stop the child, check for panics, and let the daemon exit.
    pub fn wait(&mut self, ctx: &Arc<Ctx>) -> R<()> {
        if self.cli.is_none() {
            return Ok(());
        }
        ctx.log(2, &self.name, "Wait");
        let _ = self.ask(ctx, Some("backend.list"))?;
        self.stop(ctx)?;
        let (st, r) = self.ask(ctx, Some("panic.show"))?;
        if st == CLIS_OK {
            bail!("Unexpected panic: {r}");
        }
        self.cleanup(ctx)
    }

    /// Kill the daemon without ceremony (test aborted).
    pub fn kill(&mut self) {
        self.stop_vsl();
        if let Some(c) = self.cli.take() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        self.stdin = None;
        if let Some(mut c) = self.child.take() {
            send_signal(c.id(), "KILL", true);
            let _ = c.wait();
        }
    }

    fn vcl(&mut self, ctx: &Arc<Ctx>, body: &str, backend: bool, expect: u32) -> R<String> {
        self.launch(ctx)?;
        self.vcl_nbr += 1;
        let mut v = format!(
            "vcl.inline vcl{} << {NONSENSE}\nvcl {};\n",
            self.vcl_nbr, self.syntax
        );
        if backend {
            for s in lock(&ctx.servers).iter() {
                v.push_str(&s.genvcl());
            }
            v.push('\n');
        }
        v.push_str(body);
        v.push('\n');
        v.push_str(NONSENSE);
        let (st, r) = self.ask(ctx, Some(&v))?;
        // Like varnishtest: an expected failure may be any non-200 status
        // (106 for a compile error, 300 for a failed vcl_init).
        if (st == CLIS_OK) != (expect == CLIS_OK) {
            if st == CLIS_OK {
                bail!("VCL compilation succeeded expected failure");
            }
            bail!("VCL compilation failed expected success");
        }
        if st == CLIS_OK {
            let (st, r2) = self.ask(ctx, Some(&format!("vcl.use vcl{}", self.vcl_nbr)))?;
            if st != CLIS_OK {
                bail!("vcl.use vcl{} failed: {st} {r2}", self.vcl_nbr);
            }
        } else {
            ctx.log(2, &self.name, "VCL compilation failed (as expected)");
        }
        Ok(r)
    }

    fn counter_values(&mut self) -> R<Vec<(String, u64)>> {
        let c = self
            .counters
            .as_mut()
            .ok_or_else(|| fail!("daemon not launched: no counters"))?;
        c.snapshot().map_err(|e| fail!("cannot read counters: {e}"))
    }

    fn find_counter(all: &[(String, u64)], name: &str) -> Option<u64> {
        if name.contains(['*', '?']) {
            let re = glob_regex(name);
            return all.iter().find(|(n, _)| re.is_match(n)).map(|(_, v)| *v);
        }
        all.iter()
            .find(|(n, _)| n == name || (n.strip_prefix("MAIN.") == Some(name)))
            .map(|(_, v)| *v)
    }

    /// `-expect !NAME`: the counter must (eventually) not exist.
    fn expect_absent(&mut self, ctx: &Arc<Ctx>, name: &str) -> R<()> {
        self.launch(ctx)?;
        for i in 0..50 {
            if i > 0 {
                ctx.sleep(Duration::from_millis(100))?;
            }
            let Ok(all) = self.counter_values() else {
                continue;
            };
            if Self::find_counter(&all, name).is_none() {
                ctx.log(
                    2,
                    &self.name,
                    &format!("as expected: {name} does not exist"),
                );
                return Ok(());
            }
        }
        bail!("Found (not expected): {name}")
    }

    fn expect(&mut self, ctx: &Arc<Ctx>, lhs: &str, op: &str, rhs: &str) -> R<()> {
        self.launch(ctx)?;
        let mut last: Option<(u64, u64)> = None;
        for i in 0..50 {
            if i > 0 {
                ctx.sleep(Duration::from_millis(100))?;
            }
            let all = match self.counter_values() {
                Ok(a) => a,
                Err(_) => continue,
            };
            let Some(l) = Self::find_counter(&all, lhs) else {
                continue;
            };
            let r = match rhs.parse::<u64>() {
                Ok(v) => v,
                Err(_) => match Self::find_counter(&all, rhs) {
                    Some(v) => v,
                    None => {
                        bail!("Bad -expect right hand side: {rhs} (neither a number nor a counter)")
                    }
                },
            };
            let ok = match op {
                "==" => l == r,
                "!=" => l != r,
                ">" => l > r,
                "<" => l < r,
                ">=" => l >= r,
                "<=" => l <= r,
                _ => bail!("comparison {op} unknown"),
            };
            if ok {
                ctx.log(
                    2,
                    &self.name,
                    &format!("as expected: {lhs} ({l}) {op} {rhs} ({r})"),
                );
                return Ok(());
            }
            last = Some((l, r));
        }
        match last {
            Some((l, r)) => bail!("Not true: {lhs} ({l}) {op} {rhs} ({r})"),
            None => bail!("Not found: {lhs}"),
        }
    }
}

fn get_varnish(ctx: &Ctx, name: &str) -> R<Arc<std::sync::Mutex<Varnish>>> {
    if let Some(v) = lock(&ctx.varnishes).iter().find(|v| lock(v).name == name) {
        return Ok(v.clone());
    }
    let v = Arc::new(std::sync::Mutex::new(Varnish::new(ctx, name)?));
    lock(&ctx.varnishes).push(v.clone());
    Ok(v)
}

/// The `varnish` command.
pub fn cmd_varnish(ctx: &Arc<Ctx>, cmd: &Cmd) -> R<()> {
    let name = cmd.arg(1)?.to_string();
    if !name.starts_with('v') {
        bail!("Varnish name must start with 'v' ({name})");
    }
    let vm = get_varnish(ctx, &name)?;
    let mut v = lock(&vm);
    // -syntax only applies to the VCL of the same command.
    v.syntax = "4.1".into();
    let av = &cmd.args;
    let mut i = 2;
    while i < av.len() {
        if ctx.aborted() {
            return Err(ctx.aborted_err());
        }
        let a = av[i].as_str();
        match a {
            "-arg" => {
                if v.cli.is_some() {
                    bail!("-arg: varnishd already launched");
                }
                v.args.push(cmd.arg(i + 1)?.to_string());
                i += 1;
            }
            "-jail" => {
                // varnishtest passes -jail through to varnishd's -j.
                if v.cli.is_some() {
                    bail!("-jail: varnishd already launched");
                }
                let j = cmd.arg(i + 1)?.to_string();
                v.args.push(j);
                i += 1;
            }
            "-proto" => {
                v.proto = Some(cmd.arg(i + 1)?.to_string());
                i += 1;
            }
            "-syntax" => {
                v.syntax = cmd.arg(i + 1)?.to_string();
                i += 1;
            }
            "-cli" | "-cliok" | "-clijson" => {
                let c = cmd.arg(i + 1)?.to_string();
                v.launch(ctx)?;
                let (st, r) = v.ask(ctx, Some(&c))?;
                ctx.log(2, &name, &format!("CLI {st:03} <{c}>"));
                if a != "-cli" && st != CLIS_OK {
                    bail!("FAIL CLI response {st} expected {CLIS_OK}");
                }
                if a == "-clijson" && serde_json::from_str::<serde_json::Value>(&r).is_err() {
                    bail!("FAIL CLI response is not JSON: {r}");
                }
                i += 1;
            }
            "-clierr" => {
                let want: u32 = script::parse_int(cmd.arg(i + 1)?)? as u32;
                let c = cmd.arg(i + 2)?.to_string();
                v.launch(ctx)?;
                let (st, _) = v.ask(ctx, Some(&c))?;
                ctx.log(2, &name, &format!("CLI {st:03} <{c}>"));
                if st != want {
                    bail!("FAIL CLI response {st} expected {want}");
                }
                i += 2;
            }
            "-cliexpect" => {
                let re = cmd.arg(i + 1)?.to_string();
                let c = cmd.arg(i + 2)?.to_string();
                v.launch(ctx)?;
                let (st, r) = v.ask(ctx, Some(&c))?;
                ctx.log(2, &name, &format!("CLI {st:03} <{c}>"));
                let rx = crate::text::compile_regex(&re)
                    .map_err(|e| fail!("Illegal regexp ({re}): {e}"))?;
                if !crate::text::re_match(&rx, &r) {
                    bail!("Expect failed (no match): {re}");
                }
                ctx.log(4, &name, &format!("Expect match ({re})"));
                i += 2;
            }
            "-vcl" | "-vcl+backend" => {
                let body = cmd.arg(i + 1)?.to_string();
                v.vcl(ctx, &body, a == "-vcl+backend", CLIS_OK)?;
                i += 1;
            }
            "-errvcl" => {
                let msg = cmd.arg(i + 1)?.to_string();
                let body = cmd.arg(i + 2)?.to_string();
                let r = v.vcl(ctx, &body, false, CLIS_VCL_FAIL)?;
                if !r.contains(&msg) {
                    bail!("Did not find expected string: (\"{msg}\")");
                }
                ctx.log(3, &name, &format!("Found expected string: (\"{msg}\")"));
                i += 2;
            }
            "-start" => v.start(ctx)?,
            "-stop" => v.stop(ctx)?,
            "-wait" => v.wait(ctx)?,
            "-cleanup" => {
                ctx.log(2, &name, "Cleanup");
                v.cleanup(ctx)?;
            }
            "-wait-running" => {
                v.launch(ctx)?;
                v.status_loop(ctx, true)?;
            }
            "-wait-stopped" => {
                v.launch(ctx)?;
                v.status_loop(ctx, false)?;
            }
            "-expectexit" => {
                v.expect_exit = script::parse_int(cmd.arg(i + 1)?)? as i32;
                i += 1;
            }
            "-expect" if cmd.arg(i + 1)?.starts_with('!') => {
                let name = &cmd.arg(i + 1)?[1..];
                v.expect_absent(ctx, name)?;
                i += 1;
            }
            "-expect" => {
                let (l, op, r) = (cmd.arg(i + 1)?, cmd.arg(i + 2)?, cmd.arg(i + 3)?);
                v.expect(ctx, l, op, r)?;
                i += 3;
            }
            "-vsl_catchup" => {
                // The runner keeps no background log reader per instance
                // (logexpect attaches its own before returning), so there
                // is no reader that could lag behind.
                v.launch(ctx)?;
            }
            "-vsc" => {
                let pat = cmd.arg(i + 1)?.to_string();
                v.launch(ctx)?;
                let re = glob_regex(&pat);
                for (n, val) in v.counter_values()? {
                    if re.is_match(&n) {
                        ctx.log(4, &name, &format!("VSC {n} {val}"));
                    }
                }
                i += 1;
            }
            _ => bail!("Unknown varnish argument: {a}"),
        }
        i += 1;
    }
    Ok(())
}

/// Translate a counter glob (`MAIN.*`) into a regex.
fn glob_regex(pat: &str) -> regex::Regex {
    let mut s = String::from("^");
    for c in pat.chars() {
        match c {
            '*' => s.push_str(".*"),
            '?' => s.push('.'),
            c => s.push_str(&regex::escape(&c.to_string())),
        }
    }
    s.push('$');
    regex::Regex::new(&s).unwrap_or_else(|_| regex::Regex::new("^$").expect("static regex"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_response() {
        let mut r: &[u8] = b"200 5       \nhello\n";
        assert_eq!(read_cli_response(&mut r).unwrap(), (200, "hello".into()));
        let mut r: &[u8] = b"garbage\n";
        assert!(read_cli_response(&mut r).is_err());
    }

    #[test]
    fn counters() {
        let all = vec![
            ("MAIN.n_object".to_string(), 3),
            ("VBE.vcl1.s1.req".to_string(), 1),
        ];
        assert_eq!(Varnish::find_counter(&all, "n_object"), Some(3));
        assert_eq!(Varnish::find_counter(&all, "VBE.vcl1.s1.req"), Some(1));
        assert_eq!(Varnish::find_counter(&all, "nope"), None);
        assert_eq!(Varnish::find_counter(&all, "*.s1.req"), Some(1));
        assert!(glob_regex("MAIN.*").is_match("MAIN.x"));
    }
}
