//! The demo setup behind `lacquerd --demo`: a small origin server on a free
//! loopback port, and the example VCL pointed at it, so that a fresh
//! machine can see a miss, a hit and a pass with nothing else installed.
//!
//! The origin answers `/` and any other path with a small HTML page that
//! says when it was generated (so a cached copy is recognisable), with
//! `Cache-Control: max-age=60`; `/private/…` pages carry
//! `Cache-Control: private`.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use lacquer_http::{Limits, parse_request_buf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The demo VCL, with the origin's port still to fill in.
pub const DEMO_VCL: &str = include_str!("../../../../examples/demo.vcl");

/// The demo VCL pointed at an origin on `port`.
pub fn demo_vcl(port: u16) -> String {
    DEMO_VCL.replace(".port = \"8080\";", &format!(".port = \"{port}\";"))
}

/// Starts the origin on 127.0.0.1 with a free port; returns its address.
pub async fn start_origin() -> std::io::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(serve(s));
        }
    });
    Ok(addr)
}

async fn serve(mut s: TcpStream) {
    let mut buf = BytesMut::with_capacity(4096);
    let limits = Limits::request();
    loop {
        let head = loop {
            match parse_request_buf(&mut buf, &limits) {
                Ok(Some(h)) => break h,
                Ok(None) => {}
                Err(_) => return,
            }
            match tokio::time::timeout(Duration::from_secs(30), s.read_buf(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
        };
        let path = String::from_utf8_lossy(&head.target).into_owned();
        let now = lacquer_http::date::format_http_date(lacquer_http::date::now());
        let private = path.starts_with("/private/");
        let body = format!(
            "<!doctype html>\n<title>Lacquer demo</title>\n<h1>Hello from the demo origin</h1>\n\
             <p>Path: {}</p>\n<p>Generated: {now}</p>\n",
            html_escape(&path)
        );
        // `/status/NNN` answers with that status (uncached), to show
        // errors in `lacquer log` and the counters.
        let status = demo_status(&path);
        let cc = if private || status != 200 {
            "private"
        } else {
            "max-age=60"
        };
        let head_only = head.is_head();
        let resp = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: text/html; charset=utf-8\r\n\
             Cache-Control: {cc}\r\nContent-Length: {}\r\nDate: {now}\r\n\r\n",
            crate::runtime::msg::reason(status),
            body.len()
        );
        let mut out = resp.into_bytes();
        if !head_only {
            out.extend_from_slice(body.as_bytes());
        }
        if s.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// The status a demo path asks for: `NNN` of `/status/NNN` when it is a
/// status code from 200 to 599 that carries a body (not 204 or 304), 200
/// otherwise.
fn demo_status(path: &str) -> u16 {
    path.strip_prefix("/status/")
        .and_then(|n| n.parse::<u16>().ok())
        .filter(|n| (200..=599).contains(n) && *n != 204 && *n != 304)
        .unwrap_or(200)
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// What `--demo` prints once it serves.
/// `tool` is how to run the `lacquer` binary on this machine; `workdir_arg`
/// is what the tools need to find the daemon (` -n DIR`, or empty for the
/// default work directory).
pub fn instructions(listen: &str, origin: SocketAddr, tool: &str, workdir_arg: &str) -> String {
    format!(
        "Lacquer demo: cache on http://{listen}/ in front of a demo origin on {origin}\n\
         \n\
         Try these (the first is a miss, the second a hit with Age and two\n\
         ids in X-Varnish, the third a pass that always goes to the origin):\n\
         \n\
         \x20 curl -si http://{listen}/hello | grep -Ei '^(HTTP|Age|X-Varnish|X-Cache)'\n\
         \x20 curl -si http://{listen}/hello | grep -Ei '^(HTTP|Age|X-Varnish|X-Cache)'\n\
         \x20 curl -si http://{listen}/private/page | grep -Ei '^(HTTP|Age|X-Varnish|X-Cache)'\n\
         \n\
         Errors, as operators look for them (the origin answers /status/NNN\n\
         with that status):\n\
         \n\
         \x20 curl -s -o /dev/null http://{listen}/status/503\n\
         \x20 {tool} log{workdir_arg} -d -q '(*Error) or (BerespStatus >= 500)'\n\
         \x20 {tool} stat{workdir_arg} -1 -f 'MAIN.cache_*' -f 'MAIN.client_req'\n\
         \n\
         Press Ctrl-C to stop.\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_tool_commands_name_the_work_directory() {
        let origin: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let text = instructions("127.0.0.1:6081", origin, "lacquer", " -n /tmp/w");
        assert!(
            text.contains("lacquer log -n /tmp/w -d -q '(*Error)"),
            "{text}"
        );
        assert!(text.contains("lacquer stat -n /tmp/w -1 -f"), "{text}");
        let text = instructions("127.0.0.1:6081", origin, "lacquer", "");
        assert!(text.contains("lacquer log -d -q"), "{text}");
    }

    #[test]
    fn status_paths() {
        assert_eq!(demo_status("/status/503"), 503);
        assert_eq!(demo_status("/status/404"), 404);
        assert_eq!(demo_status("/status/204"), 200);
        assert_eq!(demo_status("/status/99"), 200);
        assert_eq!(demo_status("/status/x"), 200);
        assert_eq!(demo_status("/hello"), 200);
    }

    #[test]
    fn vcl_gets_the_port() {
        let v = demo_vcl(4321);
        assert!(v.contains(".port = \"4321\";"));
        assert!(!v.contains("8080"));
    }
}
