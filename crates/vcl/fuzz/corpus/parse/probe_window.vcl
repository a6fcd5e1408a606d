vcl 4.1;
probe p {
	.url = "/";
	.threshold = 8;
	.window = 4;
}
