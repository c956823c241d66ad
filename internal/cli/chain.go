package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// member is one entry of --chain.
type member struct{ Name, Addr string }

// parseChain reads --chain NAME=HOST:PORT,NAME=HOST:PORT,... (the same
// string on every node, like etcd's --initial-cluster).
func parseChain(s string) ([]member, error) {
	var ms []member
	seen := map[string]bool{}
	seenAddr := map[string]string{}
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		name, addr, ok := strings.Cut(part, "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("--chain entry %d %q: want NAME=HOST:PORT", i+1, part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("--chain entry %q: %q is not HOST:PORT", part, addr)
		}
		if err := checkHostPort(fmt.Sprintf("--chain entry %q:", part), addr, false); err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fmt.Errorf("--chain: name %q appears twice", name)
		}
		if other, dup := seenAddr[addr]; dup {
			return nil, fmt.Errorf("--chain: %s and %s have the same address %s", other, name, addr)
		}
		seen[name], seenAddr[addr] = true, name
		ms = append(ms, member{name, addr})
	}
	return ms, nil
}

// checkHostPort checks an address flag's value: HOST:PORT with a port
// number (or service name) this machine knows, 1-65535, or 0 too where
// zero says "any free port". A bad one is a usage error naming the flag,
// instead of a failure to listen or dial later.
func checkHostPort(flag, addr string, zeroOK bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("%s %q: want HOST:PORT, e.g. 127.0.0.1:7001 or [::1]:7001 (%v)", flag, addr, errText(err))
	}
	if strings.ContainsAny(host, " /") {
		return usagef("%s %q: %q is not a host name or IP address", flag, addr, host)
	}
	n, err := net.LookupPort("tcp", port)
	if err != nil || n == 0 && !zeroOK {
		want := "1-65535"
		if zeroOK {
			want = "0-65535"
		}
		return usagef("%s %q: port %q is not a port number %s (e.g. 127.0.0.1:7001)", flag, addr, port, want)
	}
	return nil
}

// resolvesPrev checks that --prev's host resolves: only connections from
// it are accepted as the predecessor's.
func resolvesPrev(addr string) error {
	host, _, _ := net.SplitHostPort(addr)
	if net.ParseIP(host) != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := net.DefaultResolver.LookupIPAddr(ctx, host); err != nil {
		return usagef("--prev %q: cannot resolve the host %q (%v): --prev names the predecessor's host, and only connections from it are accepted", addr, host, errText(err))
	}
	return nil
}

// errText is err's message without the address net repeats in it.
func errText(err error) string {
	var ae *net.AddrError
	var de *net.DNSError
	switch {
	case errors.As(err, &ae):
		return ae.Err
	case errors.As(err, &de):
		return de.Err
	}
	return err.Error()
}

// place derives a node's listen address, predecessor and successor from
// the chain. The Head listens nowhere (it has no predecessor); every other
// node listens on its own chain address.
func place(ms []member, name string) (listen, prev, next string, err error) {
	for i, m := range ms {
		if m.Name != name {
			continue
		}
		if i > 0 {
			listen, prev = m.Addr, ms[i-1].Addr
		}
		if i < len(ms)-1 {
			next = ms[i+1].Addr
		}
		return listen, prev, next, nil
	}
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name
	}
	return "", "", "", fmt.Errorf("--name %q is not in --chain (names: %s)", name, strings.Join(names, ", "))
}
