//! The management CLI before and after `-S` authentication, as varnishd's
//! (vcli_serve.c, mgt_cli.c): before it only `help`, `ping`, `auth` and
//! `quit` exist and any answer but 200 closes the connection; a wrong
//! response closes it with an empty 500; once authenticated, `auth`
//! checks again, and without a secret it cannot be configured.

mod common;

use lacquer_server::mgt::daemon::{self, Config};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

fn config(tag: &str) -> Config {
    common::bare_config(&format!("cli-auth-{tag}"))
}

/// One reply: status and body; `None` once the connection is closed.
async fn reply(c: &mut DuplexStream) -> Option<(u16, String)> {
    let mut head = [0u8; 13];
    c.read_exact(&mut head).await.ok()?;
    let h = String::from_utf8_lossy(&head).to_string();
    let mut f = h.split_whitespace();
    let st: u16 = f.next()?.parse().ok()?;
    let len: usize = f.next()?.parse().ok()?;
    let mut body = vec![0u8; len + 1];
    c.read_exact(&mut body).await.ok()?;
    body.pop();
    Some((st, String::from_utf8(body).ok()?))
}

async fn ask(c: &mut DuplexStream, cmd: &str) -> Option<(u16, String)> {
    c.write_all(format!("{cmd}\n").as_bytes()).await.ok()?;
    reply(c).await
}

/// A CLI connection to `sh` served with `secret`; the first reply read.
async fn connect(
    sh: &std::sync::Arc<lacquer_server::runtime::state::Shared>,
    secret: Option<&[u8]>,
) -> (DuplexStream, (u16, String)) {
    let (mut c, s) = tokio::io::duplex(1 << 16);
    let (r, w) = tokio::io::split(s);
    tokio::spawn(daemon::serve_cli(
        sh.clone(),
        r,
        w,
        secret.map(<[u8]>::to_vec),
    ));
    let first = reply(&mut c).await.expect("first reply");
    (c, first)
}

#[tokio::test]
async fn authentication_as_varnishd() {
    let r = daemon::start(config("a")).await.expect("starts");
    let sh = r.shared.clone();
    let secret: &[u8] = b"foo\n";

    // Before auth: help and ping answer, anything else is unknown and
    // closes the connection.
    let (mut c, (st, body)) = connect(&sh, Some(secret)).await;
    assert_eq!(st, 107);
    let challenge = body.lines().next().unwrap().to_string();
    assert_eq!(ask(&mut c, "ping").await.unwrap().0, 200);
    assert!(ask(&mut c, "help").await.unwrap().1.contains("vcl.load "));
    let (st, body) = ask(&mut c, "vcl.list").await.unwrap();
    assert_eq!(
        (st, body.as_str()),
        (101, "Unknown request.\nType 'help' for more info.\n")
    );
    assert!(
        ask(&mut c, "ping").await.is_none(),
        "closed after a refusal"
    );

    // A missing response is a 104 that closes too.
    let (mut c, _) = connect(&sh, Some(secret)).await;
    assert_eq!(
        ask(&mut c, "auth").await.unwrap(),
        (104, "Too few parameters\n".into())
    );
    assert!(ask(&mut c, "ping").await.is_none());

    // A wrong response: an empty 500, then closed.
    let (mut c, _) = connect(&sh, Some(secret)).await;
    assert_eq!(
        ask(&mut c, "auth nope").await.unwrap(),
        (500, String::new())
    );
    assert!(ask(&mut c, "ping").await.is_none());

    // The right one: the banner; then errors no longer close.
    let (mut c, (_, body)) = connect(&sh, Some(secret)).await;
    let ch = body.lines().next().unwrap().to_string();
    assert_ne!(ch, challenge, "each connection has its own challenge");
    let good = lacquer_cli::auth_response(&ch, secret);
    let (st, body) = ask(&mut c, &format!("auth {good}")).await.unwrap();
    assert_eq!(st, 200);
    assert!(body.contains("Type 'help' for command list."));
    assert_eq!(ask(&mut c, "nope").await.unwrap().0, 101);
    assert_eq!(ask(&mut c, "vcl.list").await.unwrap().0, 200);
    // auth checks again once authenticated: a wrong answer still closes.
    assert_eq!(
        ask(&mut c, "auth nope").await.unwrap(),
        (500, String::new())
    );
    assert!(ask(&mut c, "ping").await.is_none());

    // Without -S there is no secret to check against.
    let (mut c, (st, _)) = connect(&sh, None).await;
    assert_eq!(st, 200);
    assert_eq!(
        ask(&mut c, "auth x").await.unwrap(),
        (300, "Secret file not configured\n".into())
    );
    assert_eq!(ask(&mut c, "ping").await.unwrap().0, 200);
}
