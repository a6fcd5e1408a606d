vcl 4.1;
sub vcl_recv {
	set req.http.x = "abc
	";
}
