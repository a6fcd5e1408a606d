//! A store-shaped scenario (issue 23): our own VCL written in the shape of
//! the VCL e-commerce platforms such as Magento 2 ship for Varnish 6/7
//! (PURGE by tag pattern behind an ACL, a probed backend with grace,
//! graphql cache keys from `Store`/`Content-Currency`, cookie and
//! marketing-parameter stripping, uncacheable responses remembered as
//! hit-for-miss, an `X-Magento-Cache-Debug` HIT/MISS/UNCACHEABLE header),
//! a store-like scripted origin and a client script of well over a
//! hundred requests: pages, assets, cookies, graphql, purges, ranges,
//! conditional requests, malformed input and an origin that goes down.
//! `lacquer-difftest magento` runs it; `tests/magento.rs` keeps it in CI.

use crate::scenario::{BeResp, Framing, Scenario, Step};

const PROBE: &str = ".probe = {
  .url = \"/health_check.php\";
  .timeout = 2s;
  .interval = 5s;
  .window = 10;
  .threshold = 5;
  .initial = 5;
}
.first_byte_timeout = 2s;";

const ACL: &str = "acl purgers {
  \"localhost\";
  \"127.0.0.1\";
  \"::1\";
}";

/// Query parameters that only feed marketing tools: dropped from the URL so
/// they do not split the cache.
const MARKETING: &str = "(gclid|fbclid|msclkid|mc_[a-z]+|utm_[a-z]+|_ga)";

/// One subroutine's statements, as the scenario keeps them.
fn lines(statements: &[&str]) -> Vec<String> {
    statements.iter().map(|s| s.to_string()).collect()
}

fn vcl_recv() -> Vec<String> {
    lines(&[
        "if (req.restarts > 0) {\n  set req.hash_always_miss = true;\n}",
        "if (req.method == \"PURGE\") {\n  if (client.ip !~ purgers) {\n    return (synth(405, \"Method not allowed\"));\n  }\n  if (!req.http.X-Magento-Tags-Pattern && !req.http.X-Pool) {\n    return (synth(400, \"X-Magento-Tags-Pattern or X-Pool header required\"));\n  }\n  if (req.http.X-Magento-Tags-Pattern) {\n    ban(\"obj.http.X-Magento-Tags ~ \" + req.http.X-Magento-Tags-Pattern);\n  }\n  if (req.http.X-Pool) {\n    ban(\"obj.http.X-Pool ~ \" + req.http.X-Pool);\n  }\n  return (synth(200, \"Purged\"));\n}",
        "if (req.method != \"GET\" && req.method != \"HEAD\" && req.method != \"PUT\" && req.method != \"POST\" && req.method != \"PATCH\" && req.method != \"TRACE\" && req.method != \"OPTIONS\" && req.method != \"DELETE\") {\n  return (pipe);\n}",
        "if (req.method != \"GET\" && req.method != \"HEAD\") {\n  return (pass);\n}",
        "if (req.url ~ \"/checkout\" || req.url ~ \"/customer/section/load\") {\n  return (pass);\n}",
        "set req.http.grace = \"none\";",
        "set req.url = regsub(req.url, \"^https?://[^/]+\", \"\");",
        &format!(
            "if (req.url ~ \"(\\?|&){MARKETING}=\") {{\n  set req.url = regsuball(req.url, \"{MARKETING}=[-_A-Za-z0-9+()%.]+&?\", \"\");\n  set req.url = regsub(req.url, \"[?&]+$\", \"\");\n}}"
        ),
        "if (req.url ~ \"^/(pub/)?(media|static)/\") {\n  unset req.http.Cookie;\n  unset req.http.Https;\n  unset req.http.X-Forwarded-Proto;\n}",
        "if (req.url ~ \"/graphql\" && !req.http.X-Magento-Cache-Id && req.http.Authorization ~ \"^Bearer\") {\n  return (pass);\n}",
        "if (req.http.Cookie) {\n  set req.http.Cookie = regsuball(req.http.Cookie, \"(^|; *)(_ga|_gid|__utm[a-z]+)=[^;]*\", \"\");\n  set req.http.Cookie = regsub(req.http.Cookie, \"^; *\", \"\");\n  if (req.http.Cookie == \"\") {\n    unset req.http.Cookie;\n  }\n}",
        "return (hash);",
    ])
}

fn vcl_hash() -> Vec<String> {
    lines(&[
        "if (req.http.Cookie ~ \"X-Magento-Vary=\") {\n  hash_data(regsub(req.http.Cookie, \"^.*?X-Magento-Vary=([^;]+);*.*$\", \"\\1\"));\n}",
        "hash_data(req.url);",
        "if (req.http.host) {\n  hash_data(req.http.host);\n} else {\n  hash_data(server.ip);\n}",
        "if (req.url ~ \"/graphql\") {\n  if (req.http.X-Magento-Cache-Id) {\n    hash_data(req.http.X-Magento-Cache-Id);\n  } else {\n    hash_data(req.http.Store);\n    hash_data(req.http.Content-Currency);\n  }\n}",
        "return (lookup);",
    ])
}

fn vcl_hit() -> Vec<String> {
    lines(&[
        "if (obj.ttl >= 0s) {\n  return (deliver);\n}",
        "if (std.healthy(req.backend_hint)) {\n  if (obj.ttl + 300s > 0s) {\n    set req.http.grace = \"normal\";\n    return (deliver);\n  }\n  return (restart);\n}",
        "set req.http.grace = \"unlimited\";",
        "return (deliver);",
    ])
}

fn vcl_backend_response() -> Vec<String> {
    lines(&[
        "set beresp.grace = 3d;",
        "if (beresp.http.Content-Type ~ \"text\") {\n  set beresp.do_esi = true;\n}",
        "if (bereq.url ~ \"\\.js$\" || beresp.http.Content-Type ~ \"text\") {\n  set beresp.do_gzip = true;\n}",
        "if (beresp.http.X-Magento-Debug) {\n  set beresp.http.X-Magento-Cache-Control = beresp.http.Cache-Control;\n}",
        "if (beresp.status != 200 && beresp.status != 404) {\n  set beresp.ttl = 120s;\n  set beresp.uncacheable = true;\n  return (deliver);\n} elsif (beresp.http.Cache-Control ~ \"private\") {\n  set beresp.uncacheable = true;\n  set beresp.ttl = 86400s;\n  return (deliver);\n}",
        "if (bereq.url !~ \"\\.(ico|css|js|jpg|jpeg|png|gif|svg|woff2?)(\\?|$)\") {\n  unset beresp.http.Set-Cookie;\n}",
        "if (beresp.ttl <= 0s || beresp.http.Surrogate-Control ~ \"no-store\" || (!beresp.http.Surrogate-Control && beresp.http.Cache-Control ~ \"no-cache|no-store\") || beresp.http.Vary == \"*\") {\n  set beresp.ttl = 120s;\n  set beresp.uncacheable = true;\n}",
        "return (deliver);",
    ])
}

fn vcl_deliver() -> Vec<String> {
    lines(&[
        "if (obj.uncacheable) {\n  set resp.http.X-Magento-Cache-Debug = \"UNCACHEABLE\";\n} elsif (obj.hits > 0) {\n  set resp.http.X-Magento-Cache-Debug = \"HIT\";\n  set resp.http.Grace = req.http.grace;\n} else {\n  set resp.http.X-Magento-Cache-Debug = \"MISS\";\n}",
        "if (resp.http.Cache-Control !~ \"private\" && req.url !~ \"^/(pub/)?(media|static)/\") {\n  set resp.http.Pragma = \"no-cache\";\n  set resp.http.Expires = \"-1\";\n  set resp.http.Cache-Control = \"no-store, no-cache, must-revalidate, max-age=0\";\n}",
        "if (!resp.http.X-Magento-Debug) {\n  unset resp.http.Age;\n}",
        "unset resp.http.X-Magento-Debug;",
        "unset resp.http.X-Magento-Tags;",
        "unset resp.http.X-Powered-By;",
        "unset resp.http.Server;",
        "unset resp.http.Via;",
        "unset resp.http.Link;",
    ])
}

fn resp(url: &str, status: u16, headers: &[(&str, &str)], body: &str) -> BeResp {
    BeResp {
        url: url.into(),
        status,
        reason: match status {
            200 => "OK",
            206 => "Partial Content",
            301 => "Moved Permanently",
            404 => "Not Found",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            _ => "Other",
        }
        .into(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        body: body.into(),
        gzip: false,
        framing: Framing::Length,
        delay_ms: 0,
        stall_ms: 0,
        truncate: false,
        raw: None,
    }
}

const PAGE: &str = "<html><head><title>Store</title></head><body><esi:include src=\"/page_cache/block/esi/header\"/><main>Products: shirt, shoes, hat, scarf. Free shipping on orders over 50.</main></body></html>";

fn origin() -> Vec<BeResp> {
    let html = ("Content-Type", "text/html; charset=UTF-8");
    let public = ("Cache-Control", "public, max-age=86400, s-maxage=86400");
    let mut v = vec![
        resp(
            "/",
            200,
            &[
                html,
                public,
                ("X-Magento-Tags", "cms_p_1,cat_c_2,store"),
                ("Set-Cookie", "PHPSESSID=abc; path=/"),
                ("X-Powered-By", "PHP/8.1"),
                ("Last-Modified", "Tue, 01 Jan 2019 00:00:00 GMT"),
            ],
            PAGE,
        ),
        resp(
            "/page_cache/block/esi/header",
            200,
            &[html, public, ("X-Magento-Tags", "cms_b_header")],
            "<header>Welcome, guest <!--esi <b>esi-only</b> --></header>",
        ),
        resp(
            "/catalog/product/view/id/1",
            200,
            &[
                html,
                public,
                ("X-Magento-Tags", "cat_p_1,cat_c_2"),
                ("ETag", "\"p1-v1\""),
                ("X-Pool", "products"),
            ],
            "<html><body>Shirt, size M, blue. <esi:include src=\"/page_cache/block/esi/header\"/></body></html>",
        ),
        resp(
            "/catalog/product/view/id/1",
            200,
            &[
                html,
                public,
                ("X-Magento-Tags", "cat_p_1,cat_c_2"),
                ("ETag", "\"p1-v2\""),
            ],
            "<html><body>Shirt, size M, blue. Now on sale.</body></html>",
        ),
        resp(
            "/static/version1/frontend/theme/en_US/css/styles.css",
            200,
            &[
                ("Content-Type", "text/css"),
                ("Cache-Control", "public, max-age=31536000"),
                ("ETag", "\"css-1\""),
                ("Last-Modified", "Tue, 01 Jan 2019 00:00:00 GMT"),
                ("Set-Cookie", "static=1"),
            ],
            "body { color: #333; margin: 0 auto; } .product { float: left; width: 25%; } .price { font-weight: bold; }",
        ),
        {
            let mut r = resp(
                "/static/version1/frontend/theme/en_US/js/app.js",
                200,
                &[
                    ("Content-Type", "application/javascript"),
                    ("Cache-Control", "public, max-age=31536000"),
                    ("ETag", "\"js-1\""),
                ],
                "require(['jquery'], function ($) { $('.price').each(function () { $(this).addClass('shown'); }); });",
            );
            r.gzip = true;
            r.framing = Framing::Chunked;
            r
        },
        resp(
            "/media/catalog/product/shirt.jpg",
            200,
            &[
                ("Content-Type", "image/jpeg"),
                ("Cache-Control", "public, max-age=31536000"),
                ("ETag", "\"img-1\""),
                ("Last-Modified", "Tue, 01 Jan 2019 00:00:00 GMT"),
            ],
            "JFIF0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
        ),
        resp(
            "/graphql",
            200,
            &[
                ("Content-Type", "application/json"),
                ("Cache-Control", "public, max-age=3600"),
                ("X-Magento-Tags", "cat_p_1,gql"),
                ("Vary", "Store, Content-Currency"),
            ],
            "{\"data\":{\"products\":{\"items\":[{\"sku\":\"shirt\",\"price\":10}]}}}",
        ),
        resp(
            "/checkout/cart",
            200,
            &[
                html,
                ("Cache-Control", "private, no-cache, no-store"),
                ("Set-Cookie", "cart=1; path=/"),
            ],
            "<html>your cart is empty</html>",
        ),
        resp(
            "/customer/section/load",
            200,
            &[
                ("Content-Type", "application/json"),
                ("Cache-Control", "private, max-age=0"),
            ],
            "{\"cart\":{\"summary_count\":0}}",
        ),
        resp(
            "/customer/account",
            200,
            &[html, ("Cache-Control", "private, max-age=0")],
            "<html>login first</html>",
        ),
        resp(
            "/nocache",
            200,
            &[html, ("Cache-Control", "no-cache, must-revalidate")],
            "<html>fresh each time</html>",
        ),
        resp(
            "/search",
            404,
            &[html, ("Cache-Control", "public, max-age=60")],
            "<html>no results</html>",
        ),
        resp("/broken", 500, &[html], "<html>exception</html>"),
        resp(
            "/old-category.html",
            301,
            &[
                ("Location", "/new-category.html"),
                ("Cache-Control", "public, max-age=600"),
            ],
            "",
        ),
        resp(
            "/grace",
            200,
            &[html, ("Cache-Control", "public, max-age=1")],
            "<html>first version</html>",
        ),
    ];
    // The origin goes down: the connection closes without an answer.
    let mut down = resp("/grace", 0, &[], "");
    down.raw = Some(String::new());
    v.push(down.clone());
    down.url = "/down".into();
    v.push(down);
    // What any other path gets (`*`): a cacheable page.
    v.push(resp(
        "*",
        200,
        &[html, public, ("X-Magento-Tags", "cms_p_other")],
        "<html>another page</html>",
    ));
    v
}

fn get(path: &str, extra: &[&str]) -> String {
    let mut s = format!("GET {path} HTTP/1.1\r\nHost: shop.example\r\n");
    for h in extra {
        s.push_str(h);
        s.push_str("\r\n");
    }
    s.push_str("\r\n");
    s
}

fn method(m: &str, path: &str, extra: &[&str]) -> String {
    get(path, extra).replacen("GET", m, 1)
}

fn steps() -> Vec<Step> {
    let gz = "Accept-Encoding: gzip, deflate";
    let product = "/catalog/product/view/id/1";
    let css = "/static/version1/frontend/theme/en_US/css/styles.css";
    let js = "/static/version1/frontend/theme/en_US/js/app.js";
    let img = "/media/catalog/product/shirt.jpg";
    let gql = "/graphql?query=%7Bproducts%7Bitems%7Bsku%7D%7D%7D";
    let mut s: Vec<(usize, String)> = Vec::new();
    let mut add = |conn: usize, raw: String| s.push((conn, raw));
    // Browsing: the home page with its ESI block, gzip and plain.
    add(0, get("/", &[gz]));
    add(0, get("/", &[gz]));
    add(0, get("/", &[]));
    add(0, method("HEAD", "/", &[gz]));
    add(0, get("/?utm_source=news&utm_medium=mail", &[gz]));
    add(0, get("/?gclid=abc123", &[]));
    add(0, get("/?page=2&utm_campaign=x", &[gz]));
    add(0, get("/?page=2", &[gz]));
    add(0, get("http://shop.example/", &[gz]));
    // Cookies: a session cookie does not split the cache; the vary cookie
    // does; analytics cookies are stripped.
    add(1, get("/", &[gz, "Cookie: PHPSESSID=abc"]));
    add(1, get("/", &[gz, "Cookie: _ga=GA1.2.3; _gid=x"]));
    add(
        1,
        get("/", &[gz, "Cookie: X-Magento-Vary=v1; PHPSESSID=abc"]),
    );
    add(1, get("/", &[gz, "Cookie: X-Magento-Vary=v1"]));
    add(1, get("/", &[gz, "Cookie: X-Magento-Vary=v2"]));
    // A product page, conditional requests on it (gzipped and ESI-processed
    // in the cache).
    add(2, get(product, &[gz]));
    add(2, get(product, &[gz]));
    add(2, get(product, &[gz, "If-None-Match: \"p1-v1\""]));
    add(2, get(product, &[gz, "If-None-Match: W/\"p1-v1\""]));
    add(2, get(product, &[gz, "If-None-Match: \"nope\""]));
    add(2, get(product, &["If-None-Match: W/\"p1-v1\""]));
    add(2, get(product, &[gz, "If-None-Match: *"]));
    add(
        2,
        get(
            product,
            &[gz, "If-Modified-Since: Tue, 01 Jan 2030 00:00:00 GMT"],
        ),
    );
    add(2, get(product, &[gz, "Range: bytes=0-9"]));
    // Static assets: cookies stripped, conditional, ranges.
    add(3, get(css, &[gz, "Cookie: PHPSESSID=abc"]));
    add(3, get(css, &[gz]));
    add(3, get(css, &[]));
    add(3, get(css, &[gz, "If-None-Match: W/\"css-1\""]));
    add(3, get(css, &[gz, "If-None-Match: \"css-1\""]));
    add(
        3,
        get(css, &["If-Modified-Since: Tue, 01 Jan 2019 00:00:00 GMT"]),
    );
    add(
        3,
        get(css, &["If-Modified-Since: Mon, 31 Dec 2018 00:00:00 GMT"]),
    );
    add(3, get(css, &["Range: bytes=0-15"]));
    add(3, get(css, &[gz, "Range: bytes=0-15"]));
    add(3, get(js, &[gz]));
    add(3, get(js, &[]));
    add(3, get(js, &["Range: bytes=0-7"]));
    add(3, get(js, &[gz, "If-None-Match: \"js-1\""]));
    add(3, get(img, &[]));
    add(3, get(img, &["Range: bytes=0-3"]));
    add(3, get(img, &["Range: bytes=-5"]));
    add(3, get(img, &["Range: bytes=70-"]));
    add(3, get(img, &["Range: bytes=500-600"]));
    add(3, get(img, &["Range: bytes=5-2"]));
    add(3, get(img, &["Range: bytes=0-1,4-5"]));
    add(3, get(img, &["Range: items=0-1"]));
    add(3, get(img, &["Range: bytes=0-3", "If-Range: \"img-1\""]));
    add(3, get(img, &["Range: bytes=0-3", "If-Range: \"other\""]));
    add(3, method("HEAD", img, &[]));
    add(3, get(img, &["If-None-Match: \"img-1\""]));
    // GraphQL: the store and currency headers key the cache.
    add(4, get(gql, &[gz]));
    add(4, get(gql, &[gz]));
    add(4, get(gql, &[gz, "Store: default"]));
    add(4, get(gql, &[gz, "Store: default"]));
    add(4, get(gql, &[gz, "Store: de", "Content-Currency: EUR"]));
    add(4, get(gql, &[gz, "Store: de", "Content-Currency: EUR"]));
    add(4, get(gql, &[gz, "Store: de", "Content-Currency: USD"]));
    add(4, get(gql, &[gz, "X-Magento-Cache-Id: abc"]));
    add(4, get(gql, &[gz, "X-Magento-Cache-Id: abc"]));
    add(4, get(gql, &[gz, "Authorization: Bearer token"]));
    add(
        4,
        get(
            gql,
            &[gz, "Authorization: Bearer token", "X-Magento-Cache-Id: abc"],
        ),
    );
    add(
        4,
        format!(
            "POST /graphql HTTP/1.1\r\nHost: shop.example\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{}",
            "{\"query\":\"{cart{items}}\"}\r\n"
        ),
    );
    // Private and uncacheable responses: hit-for-miss, passes.
    add(5, get("/checkout/cart", &[gz, "Cookie: PHPSESSID=abc"]));
    add(5, get("/checkout/cart", &[gz]));
    add(5, get("/customer/section/load?sections=cart", &[]));
    add(5, get("/customer/account", &[gz]));
    add(5, get("/customer/account", &[gz]));
    add(5, get("/nocache", &[gz]));
    add(5, get("/nocache", &[gz]));
    add(5, get("/search?q=none", &[gz]));
    add(5, get("/search?q=none", &[gz]));
    add(5, get("/broken", &[]));
    add(5, get("/broken", &[]));
    add(5, get("/old-category.html", &[]));
    add(5, get("/old-category.html", &[]));
    add(
        5,
        "POST /checkout/cart/add HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 9\r\n\r\nproduct=1".to_string(),
    );
    add(
        5,
        "PUT /rest/V1/carts HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 2\r\n\r\n{}"
            .to_string(),
    );
    add(5, method("DELETE", "/rest/V1/carts/1", &[]));
    add(5, method("OPTIONS", "/", &[]));
    // Purges by tag pattern and pool, then what they took out.
    add(6, method("PURGE", "/", &[]));
    add(
        6,
        method(
            "PURGE",
            "/",
            &["X-Magento-Tags-Pattern: ((^|,)cat_p_1(,|$))"],
        ),
    );
    add(6, get(product, &[gz]));
    add(6, get(product, &[gz]));
    add(6, get(gql, &[gz]));
    add(6, get("/", &[gz]));
    add(6, method("PURGE", "/", &["X-Magento-Tags-Pattern: .*"]));
    add(6, get("/", &[gz]));
    add(6, get(css, &[gz]));
    add(6, method("PURGE", "/", &["X-Pool: products"]));
    add(6, get("/page_cache/block/esi/header", &[gz]));
    // Other pages, ESI pieces on their own.
    add(7, get("/page_cache/block/esi/header", &[]));
    add(7, get("/cms/about-us", &[gz]));
    add(7, get("/cms/about-us", &[gz]));
    add(7, get("/cms/about-us?fbclid=zz&mc_cid=1", &[gz]));
    add(7, method("HEAD", "/cms/about-us", &[]));
    // The origin goes down: a miss fails, a stale object is served in
    // grace while its background refresh fails.
    add(8, get("/down", &[gz]));
    add(8, get("/down", &[gz]));
    add(8, get("/grace", &[gz]));
    add(8, get("/grace", &[gz]));
    add(9, get("/grace", &[gz]));
    add(9, get("/grace", &[gz]));
    // Malformed and hostile input, each on its own connection.
    add(10, "GET / HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".into());
    add(11, "GET / HTTP/1.1\r\nHost shop.example\r\n\r\n".into());
    add(12, "GET / HTTP/9.9\r\nHost: shop.example\r\n\r\n".into());
    add(13, "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".into());
    add(14, "GET /\r\n\r\n".into());
    add(
        15,
        "GET / HTTP/1.1\r\nHost: shop.example\r\nContent-Length: abc\r\n\r\n".into(),
    );
    add(
        16,
        format!(
            "GET /{} HTTP/1.1\r\nHost: shop.example\r\n\r\n",
            "a".repeat(9000)
        ),
    );
    add(
        17,
        "BREW /pot HTTP/1.1\r\nHost: shop.example\r\n\r\n".into(),
    );
    add(18, "GET / HTTP/1.0\r\n\r\n".into());
    add(
        18,
        "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".into(),
    );
    add(19, get("/", &[gz, "Connection: close"]));
    add(19, get("/", &[gz]));
    // Keep-alive to the end, pipelined.
    add(20, get(css, &[gz]));
    add(20, get(img, &[]));
    add(20, get("/", &[gz]));
    add(20, get(product, &[gz]));
    add(20, method("HEAD", js, &[gz]));
    add(20, get("/cms/about-us", &[]));
    add(20, get("/checkout/cart", &[]));
    add(20, get("/search?q=none", &[]));
    add(20, get(gql, &["Store: de", "Content-Currency: EUR"]));
    add(20, get("/customer/section/load", &[]));
    let n = s.len();
    let mut steps: Vec<Step> = s
        .into_iter()
        .enumerate()
        .map(|(i, (conn, raw))| Step {
            conn,
            // The last connection pipelines its requests in pairs.
            pipeline: conn == 20 && i % 2 == 0 && i + 1 < n,
            close_early: false,
            wait_ms: 0,
            raw,
        })
        .collect();
    // Let /grace's one-second TTL run out before its second round.
    if let Some(st) = steps.iter_mut().find(|st| st.conn == 9) {
        st.wait_ms = 1500;
    }
    steps
}

/// The scenario.
pub fn scenario() -> Scenario {
    Scenario {
        seed: 0,
        subs: vec![
            ("vcl_recv".into(), vcl_recv()),
            ("vcl_hash".into(), vcl_hash()),
            ("vcl_hit".into(), vcl_hit()),
            ("vcl_backend_response".into(), vcl_backend_response()),
            ("vcl_deliver".into(), vcl_deliver()),
        ],
        backend: origin(),
        steps: steps(),
        backend_attrs: vec![PROBE.into()],
        decls: vec![ACL.into()],
        params: Vec::new(),
    }
}
