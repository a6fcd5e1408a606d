vcl 4.0;
backend b none;
vcl 4.1;
