backend default { .host = "127.0.0.1"; }
