# A cached page assembled with Edge Side Includes (see shared/seeds/002).
vcl 4.1;

backend app {
    .host = "127.0.0.1";
    .port = "3000";
    .first_byte_timeout = 5s;
    .between_bytes_timeout = 2s;
}

sub vcl_backend_fetch {
    # Announce ESI support to the application.
    set bereq.http.Surrogate-Capability = "lacquer=ESI/1.0";
}

sub vcl_backend_response {
    if (beresp.http.Surrogate-Control ~ "ESI/1.0") {
        unset beresp.http.Surrogate-Control;
        set beresp.do_esi = true;
        set beresp.do_gzip = true;
    }
    # Serve stale pages for a while if the application is slow or down.
    set beresp.grace = 1h;
}
