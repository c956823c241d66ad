package dashboard

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// DefaultListen is where the dashboard serves its page by default.
const DefaultListen = "127.0.0.1:3100"

// ListenAddr reads a --listen value: HOST:PORT, or :PORT, which is
// loopback (127.0.0.1) like the default. It returns the address to bind
// and whether it is loopback only, so that a dashboard reachable from
// elsewhere can be made to use TLS with client certificates.
func ListenAddr(listen string) (addr string, loopback bool, err error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", false, fmt.Errorf("--listen %q: want HOST:PORT or :PORT, e.g. %s", listen, DefaultListen)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), loopbackHost(host), nil
}

// URL is the page's address for people, from the bound address.
func URL(bound net.Addr, tls bool) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	s := bound.String()
	if h, p, err := net.SplitHostPort(s); err == nil && (h == "::" || h == "0.0.0.0") {
		if host, err := os.Hostname(); err == nil {
			s = net.JoinHostPort(host, p)
		}
	}
	return scheme + "://" + strings.TrimSuffix(s, "/") + "/"
}
