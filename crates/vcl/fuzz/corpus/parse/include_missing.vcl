vcl 4.1;
include "/nonexistent/lacquer-golden.vcl";
