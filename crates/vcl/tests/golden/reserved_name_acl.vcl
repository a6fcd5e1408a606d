vcl 4.1;
backend be { .host = "127.0.0.1"; }
acl BAN { "1.2.3.4"; }
