vcl 4.1;

sub vcl_recv {
	if (req.url ~ "x") {
		return (lookup);
	}
	if (req.url) { return (nonsense); }
}

backend b {
	.host = "a";
	.port = "1";
	.port = "2";
}

sub vcl_deliver {
	set resp.http.x = ;
}
