vcl 4.1;
sub vcl_recv {
	C{
		printf("hi");
	}C
}
