vcl 4.1;
backend default { .host = "127.0.0.1"; .port = "59227"; }
sub vcl_backend_response {
    if (bereq.url == "/esi/page") {
        set beresp.do_esi = true;
    }
}
