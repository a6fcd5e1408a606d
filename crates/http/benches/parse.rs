//! Hot-path benchmarks: parsing a typical browser request and serialising a
//! typical cached response (what a cache hit costs in the codec), plus
//! chunked decoding.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use lacquer_http::{
    ChunkedDecoder, ChunkedLimits, Limits, ResponseHead, encode_chunk, encode_last_chunk,
    parse_request, parse_request_buf, parse_response, write_response_head,
};

const BROWSER_REQUEST: &[u8] = b"GET /assets/app.3f9a1c.js?v=12 HTTP/1.1\r\n\
Host: www.example.com\r\n\
Connection: keep-alive\r\n\
sec-ch-ua: \"Chromium\";v=\"124\", \"Google Chrome\";v=\"124\", \"Not-A.Brand\";v=\"99\"\r\n\
sec-ch-ua-mobile: ?0\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36\r\n\
sec-ch-ua-platform: \"Linux\"\r\n\
Accept: */*\r\n\
Sec-Fetch-Site: same-origin\r\n\
Sec-Fetch-Mode: no-cors\r\n\
Sec-Fetch-Dest: script\r\n\
Referer: https://www.example.com/products/widgets?page=2\r\n\
Accept-Encoding: gzip, deflate, br, zstd\r\n\
Accept-Language: en-US,en;q=0.9,fr;q=0.8\r\n\
Cookie: session=9f8e7d6c5b4a39281706; theme=dark; _ga=GA1.2.1234567890.1700000000\r\n\
If-None-Match: \"5f3c-61a2b3c4d5e6f\"\r\n\
If-Modified-Since: Tue, 14 May 2024 10:00:00 GMT\r\n\
\r\n";

const BACKEND_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\n\
Date: Wed, 15 May 2024 12:00:00 GMT\r\n\
Server: Apache/2.4.58 (Unix)\r\n\
Last-Modified: Tue, 14 May 2024 10:00:00 GMT\r\n\
ETag: \"5f3c-61a2b3c4d5e6f\"\r\n\
Accept-Ranges: bytes\r\n\
Content-Length: 24380\r\n\
Cache-Control: public, max-age=31536000, immutable\r\n\
Vary: Accept-Encoding\r\n\
Content-Type: application/javascript; charset=utf-8\r\n\
\r\n";

fn cached_response() -> ResponseHead {
    let (mut resp, _) = parse_response(BACKEND_RESPONSE, &Limits::response())
        .unwrap()
        .unwrap();
    // What delivery adds on a hit.
    resp.headers.append("X-Varnish", "32770 3");
    resp.headers.append("Age", "42");
    resp.headers.append("Via", "1.1 varnish (Varnish/7.1)");
    resp
}

fn bench(c: &mut Criterion) {
    let limits = Limits::request();

    let mut g = c.benchmark_group("request");
    g.throughput(Throughput::Bytes(BROWSER_REQUEST.len() as u64));
    g.bench_function("parse_request (slice, one copy)", |b| {
        b.iter(|| parse_request(black_box(BROWSER_REQUEST), &limits).unwrap())
    });
    g.bench_function("httparse alone (baseline)", |b| {
        b.iter(|| {
            let mut hs = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Request::new(&mut hs);
            black_box(r.parse(black_box(BROWSER_REQUEST)).unwrap().is_complete())
        })
    });
    g.bench_function("parse_request_buf (zero copy)", |b| {
        b.iter_batched(
            || BytesMut::from(BROWSER_REQUEST),
            |mut buf| parse_request_buf(&mut buf, &limits).unwrap(),
            criterion::BatchSize::SmallInput,
        )
    });
    g.bench_function("parse + lookups", |b| {
        b.iter(|| {
            let (h, _) = parse_request(black_box(BROWSER_REQUEST), &limits)
                .unwrap()
                .unwrap();
            black_box((
                h.headers.get("host"),
                h.headers.get("accept-encoding"),
                h.headers.get("cookie"),
                h.headers.has_token("connection", "close"),
            ));
        })
    });
    g.finish();

    let resp = cached_response();
    let mut g = c.benchmark_group("response");
    g.bench_function("write_response_head", |b| {
        let mut out = Vec::with_capacity(1024);
        b.iter(|| {
            out.clear();
            write_response_head(black_box(&resp), &mut out);
            black_box(out.len())
        })
    });
    g.bench_function("clone + write (hit delivery)", |b| {
        let mut out = BytesMut::with_capacity(1024);
        b.iter(|| {
            let mut r = resp.clone();
            r.headers.set("Age", Bytes::from_static(b"43"));
            out.clear();
            write_response_head(&r, &mut out);
            black_box(out.len())
        })
    });
    g.finish();

    let payload = vec![b'x'; 64 * 1024];
    let mut chunked = Vec::new();
    for piece in payload.chunks(8192) {
        encode_chunk(piece, &mut chunked);
    }
    encode_last_chunk(&mut chunked);
    let mut g = c.benchmark_group("chunked");
    g.throughput(Throughput::Bytes(chunked.len() as u64));
    g.bench_function("decode 64k in 8k chunks", |b| {
        b.iter(|| {
            let mut d = ChunkedDecoder::new(ChunkedLimits::default());
            let mut pos = 0;
            let mut total = 0;
            loop {
                let (n, what) = d.decode(&chunked[pos..]).unwrap();
                pos += n;
                match what {
                    lacquer_http::Decoded::Data(r) => total += r.len(),
                    _ => break,
                }
            }
            black_box(total)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
