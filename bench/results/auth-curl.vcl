vcl 4.1;
import curl;
backend default {
    .host = "127.0.0.1";
    .port = "34931";
}

sub vcl_recv {
    if (req.url == "/oauth/token_validation") {
        # The token service, cached per token.
        return (hash);
    }
    curl.header_add("OAuth-Ip: " + req.http.X-Forwarded-For);
    curl.header_add("OAuth-Token: " + regsub(req.http.Authorization, "^Bearer ", ""));
    curl.fetch("http://127.0.0.1:48663/oauth/token_validation");

    if (curl.status() == 200) {
        set req.http.OAuth-Country = curl.header("OAuth-Country");
        set req.http.OAuth-User-Id = curl.header("OAuth-User-Id");
        set req.http.OAuth-User-Scope = curl.header("OAuth-User-Scope");
    } else if (curl.status() == 0) {
        return (synth(502, "Bad Gateway"));
    } else {
        return (synth(401, "Unauthorized"));
    }
}

sub vcl_recv {
    # As the restart VCL: the protected page is looked up in the cache.
    return (hash);
}

sub vcl_hash {
    if (req.url == "/oauth/token_validation") {
        hash_data(req.http.OAuth-Token);
    }
}

sub vcl_backend_response {
    set beresp.ttl = 1h;
    set beresp.grace = 1h;
}
