vcl 4.1;
acl local {
	"192.168.1.7"/24;
}
