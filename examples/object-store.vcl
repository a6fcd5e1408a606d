# Caching an S3-compatible object store (see shared/seeds/004): GET and HEAD
# of objects are cached; writes and signed listing requests go straight through.
vcl 4.1;

backend s3 {
    .host = "127.0.0.1";
    .port = "9000";
    .connect_timeout = 1s;
    .first_byte_timeout = 10s;
    .probe = {
        .url = "/minio/health/live";
        .interval = 5s;
        .timeout = 1s;
        .window = 5;
        .threshold = 3;
    }
}

sub vcl_recv {
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    # Query-string requests (listings, multipart uploads) are not cached.
    if (req.url ~ "\?") {
        return (pass);
    }
    # Objects are public in this setup: credentials do not vary the object.
    unset req.http.Authorization;
    unset req.http.Cookie;
    return (hash);
}

sub vcl_backend_response {
    if (beresp.status == 200 || beresp.status == 404) {
        set beresp.ttl = 1h;
        set beresp.grace = 24h;
        set beresp.keep = 7d;
    }
}
