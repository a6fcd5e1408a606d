# Authentication offload with restarts (see shared/seeds/000): every API
# request is first turned into a cached token-validation subrequest; when
# the token is good, the request is restarted towards the real backend with
# the user's identity added as headers.
vcl 4.1;

backend api {
    .host = "127.0.0.1";
    .port = "8081";
}

backend oauth {
    .host = "127.0.0.1";
    .port = "8082";
    .first_byte_timeout = 2s;
}

sub vcl_recv {
    if (req.restarts == 0) {
        if (!req.http.Authorization) {
            return (synth(401, "Unauthorized"));
        }
        set req.http.Orig-Method = req.method;
        set req.http.Orig-Url = req.url;
        set req.http.OAuth-Token = regsub(req.http.Authorization, "^Bearer ", "");
        set req.method = "GET";
        set req.url = "/oauth/token_validation";
        set req.backend_hint = oauth;
        return (hash);
    }
    set req.backend_hint = api;
    return (pass);
}

sub vcl_hash {
    if (req.restarts == 0) {
        # Validation results are cached per token.
        hash_data(req.http.OAuth-Token);
        return (lookup);
    }
}

sub vcl_backend_fetch {
    if (bereq.url == "/oauth/token_validation") {
        unset bereq.body;
    }
}

sub vcl_deliver {
    if (req.restarts == 0) {
        if (resp.status == 200) {
            set req.method = req.http.Orig-Method;
            set req.url = req.http.Orig-Url;
            unset req.http.Orig-Method;
            unset req.http.Orig-Url;
            unset req.http.OAuth-Token;
            set req.http.OAuth-User-Id = resp.http.OAuth-User-Id;
            set req.http.OAuth-User-Scope = resp.http.OAuth-User-Scope;
            return (restart);
        } elsif (resp.status == 503) {
            return (synth(502, "Bad Gateway"));
        }
        return (synth(401, "Unauthorized"));
    }
}
