vcl 4.1;
backend b none;
sub vcl_recv {
	set req.http.x = "a"
}
