vcl 4.1;
sub a.b {
}
