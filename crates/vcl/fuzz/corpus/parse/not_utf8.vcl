vcl 4.1;
# café in Latin-1
sub vcl_recv { }
