vcl 4.1;
# The one VCL that both lacquerd and varnishd run in the benchmarks.
backend default {
    .host = "127.0.0.1";
    .port = "34931";
}

sub vcl_recv {
    if (req.url ~ "^/synth") {
        return (synth(200, "OK"));
    }
    if (req.url ~ "^/pass/") {
        return (pass);
    }
    # Auth offload with restarts: first validate the token through a cached
    # subrequest, then restart with the original URL.
    if (req.url ~ "^/auth/" && req.restarts == 0) {
        set req.http.Orig-Url = req.url;
        set req.http.Oauth-Token = regsub(req.http.Authorization, "^Bearer ", "");
        set req.url = "/oauth/token_validation";
        return (hash);
    }
    return (hash);
}

sub vcl_hash {
    if (req.restarts == 0 && req.http.Oauth-Token) {
        hash_data(req.http.Oauth-Token);
    }
}

sub vcl_backend_response {
    set beresp.ttl = 1h;
    set beresp.grace = 1h;
}

sub vcl_deliver {
    if (req.restarts == 0 && req.http.Orig-Url) {
        if (resp.status == 200) {
            set req.url = req.http.Orig-Url;
            unset req.http.Orig-Url;
            unset req.http.Oauth-Token;
            set req.http.OAuth-User-Id = resp.http.OAuth-User-Id;
            set req.http.OAuth-Country = resp.http.OAuth-Country;
            return (restart);
        }
        return (synth(401, "Unauthorized"));
    }
}

sub vcl_synth {
    if (resp.status == 200) {
        set resp.http.Content-Type = "text/plain";
        synthetic("OK");
        return (deliver);
    }
}
