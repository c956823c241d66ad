package cli

import (
	"fmt"
	"net"
	"strings"
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
