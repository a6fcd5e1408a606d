vcl 4.1;
sub vcl_fetch {
}
