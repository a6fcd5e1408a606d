# The VCL that `lacquerd --demo` runs in front of its built-in demo origin.
# It is ordinary VCL 4.1: everything here works unchanged in varnishd.
vcl 4.1;

# The demo origin listens on a loopback port chosen at startup; lacquerd
# replaces this address before compiling when it runs with --demo.
backend default {
    .host = "127.0.0.1";
    .port = "8080";
}

sub vcl_recv {
    # Anything under /private/ bypasses the cache entirely.
    if (req.url ~ "^/private/") {
        return (pass);
    }
    # Cookies make a request uncacheable in the builtin logic; the demo
    # pages do not use them, so drop them for everything else.
    unset req.http.Cookie;
}

sub vcl_backend_response {
    # Cache pages for a minute unless the origin says otherwise, and keep
    # serving them for ten more minutes while a fresh copy is fetched.
    if (!beresp.http.Cache-Control) {
        set beresp.ttl = 1m;
    }
    set beresp.grace = 10m;
}

sub vcl_deliver {
    # Show whether this response came from the cache: a pass leaves an
    # uncacheable object behind, a hit has been delivered before.
    if (obj.uncacheable) {
        set resp.http.X-Cache = "PASS";
    } elsif (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
