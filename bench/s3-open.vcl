# bench/s3.py's varnishd side: the StorageGRID guide's VCL
# (examples/storagegrid.vcl) as close as open-source Varnish 7.1 gets:
# no kvstore hit counter, regsub() for urlplus.url_get(), no
# utils.fast_304() (a 304 remakes the object from the merged headers),
# and the guide's TTL of 1 us through std.duration() (7.1's VCL literals
# take three decimals at most, std.duration() parses more).
vcl 4.1;

import std;

backend default {
    .host = "127.0.0.1";
    .port = "%(origin)d";
}

sub vcl_recv {
    set req.backend_hint = default;
    if (req.method == "GET") {
        if (req.http.Range) {
            set req.http.x-range = req.http.Range;
            unset req.http.Range;
        }
        return (hash);
    } else {
        return (pass);
    }
}

sub vcl_hash {
    if (req.http.x-range) {
        hash_data(req.http.x-range);
    }
    hash_data(regsub(req.url, "\?.*$", ""));
    if (req.http.host) {
        hash_data(req.http.host);
    } else {
        hash_data(server.ip);
    }
    return (lookup);
}

sub vcl_hit {
    return (pass);
}

sub vcl_backend_fetch {
    if (bereq.http.x-range) {
        set bereq.http.Range = bereq.http.x-range;
        unset bereq.http.x-range;
    }
}

sub vcl_backend_response {
    if (beresp.status >= 400 && beresp.status != 404) {
        return (error(beresp.status, beresp.reason));
    }
    if (!beresp.http.etag) {
        set beresp.uncacheable = true;
        return (deliver);
    }
    unset beresp.http.X-206;
    if (beresp.status == 206) {
        set beresp.http.X-206 = "true";
        set beresp.status = 200;
        if (beresp.http.Content-Range) {
            set beresp.http.x-content-range = beresp.http.Content-Range;
            unset beresp.http.Content-Range;
        }
    }
    set beresp.ttl = std.duration("0.000001s", 0.001s);
    set beresp.grace = 0s;
    set beresp.keep = 10y;
    return (deliver);
}

sub vcl_backend_error {
    set beresp.ttl = 0s;
    set beresp.grace = 0s;
    set beresp.keep = 0s;
    set beresp.uncacheable = true;
    return (deliver);
}

sub vcl_deliver {
    if (resp.http.X-206 == "true") {
        set resp.status = 206;
        unset resp.http.X-206;
    }
    if (resp.http.x-content-range) {
        set resp.http.Content-Range = resp.http.x-content-range;
        unset resp.http.x-content-range;
    }
}
