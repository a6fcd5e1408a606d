vcl 4.1;
import std;
import directors as d from "/usr/lib/vmod.so";
include "x.vcl";
include +glob "/a/*.vcl";
probe p { .url = "/health"; .window = 5; .threshold = 3; .interval = 2s; .timeout = 1.5s; .expected_response = 200; }
backend default { .host = "127.0.0.1"; .port = "8080"; .connect_timeout = 500ms; .probe = p; .max_connections = 10; .proxy_header = 2; .preamble = :AAEC:; }
backend b2 { .host = "a"; .probe = { .request = "GET / HTTP/1.1" "Host: x"; } }
backend b3 none;
acl local +log -pedantic +table { "localhost"; !"10.0.0.0"/8; ("example.invalid"); "::1"/128; "10.1"; }
sub vcl_recv {
    set req.http.X-Forwarded-For = client.ip + ", " + req.http."x y";
    unset req.http.Cookie;
    call my_sub;
    if (req.url ~ "^/a" && !(client.ip ~ local) || req.restarts > 1) { return (pass); } elsif (req.method == "PURGE") { return (purge); }
    else if (req.http.x) { return (synth(404, "Not here")); } else { return (hash); }
    std.log("x" + std.integer(s="1", fallback=-5) * 3 % 2);
    hash_data(req.url);
    { ban("obj.status == 200"); }
    set req.ttl = -(1h + 3s);
    set req.http.y = {"long
string"} + """another""" + req.http.host.lower();
}
sub my_sub { return; }
sub vcl_init { new rr = d.round_robin(); rr.add_backend(default); }
sub vcl_backend_response { set beresp.ttl = 1h; set beresp.grace += 10s; return (pass(10s)); }
sub vcl_synth { synthetic("x"); return (deliver); }
