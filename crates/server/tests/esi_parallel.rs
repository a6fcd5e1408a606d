//! ESI includes fetched in parallel (`esi_parallel`), delivered in
//! document order: speed and byte-identical output against one-by-one
//! delivery, plain and as one stitched gzip stream.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// The parallel form: a cached page with eight uncacheable includes (one
/// of them including a ninth) that each take 100 ms at the backend is
/// delivered in about one include's time, and its body, plain or as one
/// stitched gzip stream, is byte for byte what one-by-one delivery
/// (`esi_parallel=1`) sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_includes_are_fast_and_byte_identical_to_serial() {
    let be = backend(|r| {
        if r.url == "/page" {
            let mut body = String::from("<html>top ");
            for i in 0..8 {
                body.push_str(&format!("[<esi:include src=\"/f{i}\"/>] "));
            }
            body.push_str("bottom</html>");
            (Duration::ZERO, ok(&body, "Cache-Control: max-age=60\r\n"))
        } else {
            let body = if r.url == "/f3" {
                "<b>frag3 <esi:include src=\"/nested\"/> end3</b>".to_string()
            } else {
                format!("{} {}", &r.url[1..], "x".repeat(3000))
            };
            (
                Duration::from_millis(100),
                ok(&body, "Cache-Control: private, max-age=0\r\n"),
            )
        }
    })
    .await;
    let vcl = vcl_with(
        be.addr,
        "sub vcl_backend_response {\n\
           set beresp.do_esi = true;\n\
           set beresp.do_gzip = true;\n\
         }\n",
    );
    let fast = lacquer(&vcl, &[]).await;
    let serial = lacquer(&vcl, &["esi_parallel=1"]).await;
    for (gzip, extra) in [(false, ""), (true, "Accept-Encoding: gzip\r\n")] {
        let req = format!("GET /page HTTP/1.1\r\nHost: t\r\n{extra}\r\n");
        // The page itself is cached by the first request.
        let warm = raw(fast.first_addr().unwrap(), req.as_bytes(), false).await;
        assert_eq!(warm.status, 200);
        let t0 = Instant::now();
        let par = raw(fast.first_addr().unwrap(), req.as_bytes(), false).await;
        let took = t0.elapsed();
        let one = raw(serial.first_addr().unwrap(), req.as_bytes(), false).await;
        let t1 = Instant::now();
        let one_again = raw(serial.first_addr().unwrap(), req.as_bytes(), false).await;
        let took_serial = t1.elapsed();
        assert_eq!(par.status, 200);
        assert_eq!(
            par.header("content-encoding").is_some(),
            gzip,
            "{:?}",
            par.headers
        );
        assert_eq!(
            par.body, one.body,
            "gzip {gzip}: parallel differs from serial"
        );
        assert_eq!(one.body, one_again.body);
        let text = if gzip {
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&par.body[..]), &mut out)
                .unwrap();
            String::from_utf8(out).unwrap()
        } else {
            par.text()
        };
        assert!(text.starts_with("<html>top [f0 xxx"), "{}", &text[..40]);
        assert!(
            text.contains("[<b>frag3 nested xxx"),
            "nested include missing"
        );
        assert!(
            text.contains("x end3</b>] [f4 xxx"),
            "nested include missing"
        );
        assert!(
            text.ends_with("] bottom</html>"),
            "{}",
            &text[text.len() - 40..]
        );
        println!("gzip {gzip}: parallel {took:?}, one by one {took_serial:?}");
        // Eight 100 ms includes plus a nested one: one by one takes 900 ms.
        // In parallel: two levels of 100 ms (f3 then its nested include);
        // judged against the one-by-one time of the same run, as the
        // machine may be loaded.
        assert!(took_serial >= Duration::from_millis(900));
        assert!(
            took * 2 < took_serial,
            "parallel took {took:?}, one by one {took_serial:?}"
        );
    }
}
