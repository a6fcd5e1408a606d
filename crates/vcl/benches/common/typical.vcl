vcl 4.1;

# A production-style VCL of the kind news, shop and blog sites run: host and
# URL normalisation, tracking-parameter and cookie stripping, a cookie
# whitelist, device detection on User-Agent, backend selection by host and
# path, a purge/ban ACL, TTL tweaks on backend responses and header
# clean-up on delivery.

probe healthcheck {
    .url = "/health";
    .timeout = 2s;
    .interval = 5s;
    .window = 5;
    .threshold = 3;
}

backend default {
    .host = "127.0.0.1";
    .port = "8080";
    .probe = healthcheck;
    .connect_timeout = 1s;
    .first_byte_timeout = 30s;
}

backend api {
    .host = "127.0.0.1";
    .port = "8081";
    .probe = healthcheck;
}

backend media {
    .host = "127.0.0.1";
    .port = "8082";
}

backend shop {
    .host = "127.0.0.1";
    .port = "8083";
}

acl purgers {
    "127.0.0.1";
    "10.0.0.0"/8;
    "192.168.0.0"/16;
    ! "10.66.0.0"/16;
}

acl internal {
    "172.16.0.0"/12;
    "10.0.0.0"/8;
}

sub pick_backend {
    if (req.http.host ~ "^(shop|store)\.") {
        set req.backend_hint = shop;
    } elseif (req.url ~ "^/api/") {
        set req.backend_hint = api;
    } elseif (req.url ~ "^/(media|images|video)/") {
        set req.backend_hint = media;
    } else {
        set req.backend_hint = default;
    }
}

sub normalize_host {
    if (req.http.host ~ ":[0-9]+$") {
        set req.http.host = regsub(req.http.host, ":[0-9]+$", "");
    }
    if (req.http.host ~ "^www\.") {
        set req.http.host = regsub(req.http.host, "^www\.", "");
    }
}

sub normalize_url {
    # Strip tracking parameters and empty query strings.
    if (req.url ~ "[?&](utm_[a-z]+|gclid|fbclid|mc_[a-z]+)=") {
        set req.url = regsuball(req.url, "(utm_[a-z]+|gclid|fbclid|mc_[a-z]+)=[^&]*&?", "");
        set req.url = regsub(req.url, "[?&]+$", "");
    }
    if (req.url ~ "\?$") {
        set req.url = regsub(req.url, "\?$", "");
    }
    if (req.url ~ "#") {
        set req.url = regsub(req.url, "#.*$", "");
    }
    if (req.url ~ "^/index\.html?$") {
        set req.url = "/";
    }
}

sub normalize_encoding {
    if (req.http.Accept-Encoding) {
        if (req.url ~ "\.(jpg|jpeg|png|gif|webp|gz|tgz|bz2|mp3|mp4|ogg|woff2)$") {
            unset req.http.Accept-Encoding;
        } elseif (req.http.Accept-Encoding ~ "br") {
            set req.http.Accept-Encoding = "br";
        } elseif (req.http.Accept-Encoding ~ "gzip") {
            set req.http.Accept-Encoding = "gzip";
        } else {
            unset req.http.Accept-Encoding;
        }
    }
}

sub clean_cookies {
    if (req.http.Cookie) {
        # Drop analytics cookies, then keep only the ones the origin reads.
        set req.http.Cookie = regsuball(req.http.Cookie, "(^|;\s*)(_ga|_gid|_gat|__utm[a-z]+|_fbp|_hj[a-zA-Z_0-9]+)=[^;]*", "");
        set req.http.Cookie = regsub(req.http.Cookie, "^;\s*", "");
        set req.http.Cookie = ";" + req.http.Cookie;
        set req.http.Cookie = regsuball(req.http.Cookie, "; +", ";");
        set req.http.Cookie = regsuball(req.http.Cookie, ";(session|lang|cart_id)=", "; \1=");
        set req.http.Cookie = regsuball(req.http.Cookie, ";[^ ][^;]*", "");
        set req.http.Cookie = regsuball(req.http.Cookie, "^[; ]+|[; ]+$", "");
        if (req.http.Cookie == "") {
            unset req.http.Cookie;
        }
    }
}

sub device_detect {
    set req.http.X-Device = "desktop";
    if (req.http.User-Agent ~ "(?i)ipad|tablet|kindle|playbook") {
        set req.http.X-Device = "tablet";
    } elseif (req.http.User-Agent ~ "(?i)mobile|android|iphone|ipod|blackberry|opera mini") {
        set req.http.X-Device = "mobile";
    } elseif (req.http.User-Agent ~ "(?i)bot|crawl|spider|slurp") {
        set req.http.X-Device = "bot";
    }
}

sub vcl_recv {
    if (req.restarts == 0) {
        if (req.http.X-Forwarded-For) {
            set req.http.X-Forwarded-For = req.http.X-Forwarded-For + ", " + client.ip;
        } else {
            set req.http.X-Forwarded-For = client.ip;
        }
    }

    call normalize_host;
    call normalize_url;
    call pick_backend;

    if (req.method == "PURGE") {
        if (client.ip !~ purgers) {
            return (synth(405, "Purging not allowed for " + client.ip));
        }
        return (purge);
    }
    if (req.method == "BAN") {
        if (client.ip !~ purgers) {
            return (synth(405, "Banning not allowed"));
        }
        ban("obj.http.x-url ~ " + req.url);
        return (synth(200, "Ban added"));
    }

    if (req.http.Upgrade ~ "(?i)websocket") {
        return (pipe);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }

    if (req.url ~ "^/(admin|login|logout|cart|checkout|account)") {
        return (pass);
    }
    if (req.url ~ "^/internal/" && client.ip !~ internal) {
        return (synth(403, "Forbidden"));
    }

    if (req.http.Authorization && req.url !~ "^/public/") {
        return (pass);
    }

    call normalize_encoding;

    if (req.url ~ "\.(css|js|jpg|jpeg|png|gif|ico|svg|webp|woff|woff2|ttf|eot|mp4|mp3|pdf)(\?.*)?$") {
        unset req.http.Cookie;
        set req.http.X-Static = "1";
        return (hash);
    }

    call clean_cookies;
    call device_detect;

    if (req.http.Cache-Control ~ "no-cache" && client.ip ~ internal) {
        set req.hash_always_miss = true;
    }

    set req.http.X-Request-Start = "t=" + now;
    set req.grace = 10s;
    return (hash);
}

sub vcl_hash {
    hash_data(req.url);
    if (req.http.host) {
        hash_data(req.http.host);
    } else {
        hash_data(server.ip);
    }
    if (req.http.X-Device) {
        hash_data(req.http.X-Device);
    }
    if (req.http.X-Forwarded-Proto) {
        hash_data(req.http.X-Forwarded-Proto);
    }
    return (lookup);
}

sub vcl_hit {
    if (obj.ttl >= 0s) {
        return (deliver);
    }
    if (obj.ttl + obj.grace > 0s) {
        return (deliver);
    }
    return (pass);
}

sub vcl_miss {
    if (req.http.X-Static) {
        unset req.http.Cookie;
    }
    return (fetch);
}

sub vcl_pass {
    return (fetch);
}

sub vcl_backend_fetch {
    if (bereq.http.X-Static) {
        unset bereq.http.Cookie;
    }
    set bereq.http.X-Varnish-Backend = bereq.backend;
    unset bereq.http.X-Request-Start;
    return (fetch);
}

sub vcl_backend_response {
    set beresp.http.X-Url = bereq.url;
    set beresp.http.X-Host = bereq.http.host;

    if (beresp.status >= 500 && bereq.retries < 2 && bereq.method == "GET") {
        return (retry);
    }
    if (beresp.status == 404) {
        set beresp.ttl = 60s;
    }
    if (bereq.url ~ "\.(css|js|jpg|jpeg|png|gif|ico|svg|webp|woff|woff2)(\?.*)?$") {
        unset beresp.http.Set-Cookie;
        set beresp.ttl = 7d;
        set beresp.http.Cache-Control = "public, max-age=604800";
    }
    if (beresp.http.Content-Type ~ "^(text/|application/(json|javascript|xml))") {
        set beresp.do_gzip = true;
    }
    if (beresp.http.Surrogate-Control ~ "ESI/1.0") {
        unset beresp.http.Surrogate-Control;
        set beresp.do_esi = true;
    }
    if (beresp.http.Cache-Control ~ "(private|no-store)") {
        set beresp.uncacheable = true;
        set beresp.ttl = 120s;
        return (deliver);
    }
    if (beresp.ttl <= 0s || beresp.http.Set-Cookie || beresp.http.Vary == "*") {
        set beresp.ttl = 120s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    set beresp.grace = 6h;
    set beresp.keep = 1d;
    set beresp.http.X-TTL = beresp.ttl;
    return (deliver);
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
        set resp.http.X-Cache-Hits = obj.hits;
    } else {
        set resp.http.X-Cache = "MISS";
    }
    if (client.ip !~ internal) {
        unset resp.http.X-Url;
        unset resp.http.X-Host;
        unset resp.http.X-TTL;
        unset resp.http.X-Varnish-Backend;
        unset resp.http.Via;
        unset resp.http.Server;
        unset resp.http.X-Powered-By;
    }
    if (resp.http.Content-Type ~ "^text/html") {
        set resp.http.X-Frame-Options = "SAMEORIGIN";
        set resp.http.X-Content-Type-Options = "nosniff";
        set resp.http.Referrer-Policy = "strict-origin-when-cross-origin";
    }
    return (deliver);
}

sub vcl_purge {
    return (synth(200, "Purged " + req.url));
}

sub vcl_synth {
    if (resp.status == 720) {
        set resp.http.Location = resp.reason;
        set resp.status = 301;
        return (deliver);
    }
    set resp.http.Content-Type = "text/plain; charset=utf-8";
    synthetic("Error " + resp.status + ": " + resp.reason);
    return (deliver);
}

sub vcl_backend_error {
    set beresp.http.Content-Type = "text/plain; charset=utf-8";
    synthetic("Backend fetch failed");
    return (deliver);
}
