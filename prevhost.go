package chainsync

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// prevHost is Config.PrevHostOnly: the addresses a predecessor may connect
// from, resolved from Prev's host and kept for prevHostTTL, so a flood of
// connections makes one lookup, and a predecessor whose name moves to a
// new address (a rescheduled pod) is found again.
type prevHost struct {
	host string // "" when the check is off
	// names and hosts of the chain's other nodes (Config.Chain and
	// ChainAddrs), to name the node a stray connection comes from
	names, hosts []string

	mu    sync.Mutex
	ips   []net.IP
	until time.Time
}

const prevHostTTL = 10 * time.Second

func newPrevHost(cfg *Config) *prevHost {
	p := &prevHost{}
	if cfg.PrevHostOnly {
		p.host, _, _ = net.SplitHostPort(cfg.Prev)
	}
	if len(cfg.ChainAddrs) == len(cfg.Chain) {
		for i, name := range cfg.Chain {
			if h, _, err := net.SplitHostPort(cfg.ChainAddrs[i]); err == nil && name != cfg.Name {
				p.names, p.hosts = append(p.names, name), append(p.hosts, h)
			}
		}
	}
	return p
}

// check reports why a connection from remote is not the predecessor's,
// or nil. Called by the accept loop, without the node's lock.
func (p *prevHost) check(ctx context.Context, remote net.Addr) error {
	if p == nil || p.host == "" {
		return nil
	}
	ta, ok := remote.(*net.TCPAddr)
	if !ok {
		return nil
	}
	ips, err := p.addrs(ctx)
	if err != nil {
		return fmt.Errorf("the predecessor's host %s (--prev) does not resolve, so no connection can be checked against it: %v", p.host, err)
	}
	// Exactly its addresses: on one machine a chain may use 127.0.0.11,
	// 127.0.0.12, ..., and a connection from a neighbour's address is the
	// mis-wiring this check is for (the predecessor dials from its own
	// address: Config.DialFrom).
	for _, ip := range ips {
		if ip.Equal(ta.IP) {
			return nil
		}
	}
	for i, h := range p.hosts {
		if ip := net.ParseIP(h); ip != nil && ip.Equal(ta.IP) {
			return &strayError{node: p.names[i], from: ta.IP.String(), host: p.host}
		}
	}
	return fmt.Errorf("connection from %s, which is not the predecessor's host %s (--prev, or its --chain entry; addresses %v): another node dials this one as its successor, or the predecessor dials from another address (give it its own address to dial from: --chain does)", ta.IP, p.host, ips)
}

func (p *prevHost) addrs(ctx context.Context) ([]net.IP, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.until) {
		return p.ips, nil
	}
	if ip := net.ParseIP(p.host); ip != nil {
		p.ips, p.until = []net.IP{ip}, time.Now().Add(24*time.Hour)
		return p.ips, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	as, err := net.DefaultResolver.LookupIPAddr(ctx, p.host)
	if err != nil {
		if len(p.ips) > 0 {
			return p.ips, nil // keep the last answer through a resolver hiccup
		}
		return nil, err
	}
	ips := make([]net.IP, 0, len(as))
	for _, a := range as {
		if !slices.ContainsFunc(ips, a.IP.Equal) {
			ips = append(ips, a.IP)
		}
	}
	p.ips, p.until = ips, time.Now().Add(prevHostTTL)
	return ips, nil
}

// strayError is a predecessor connection from the address the chain gives
// another node: that node dials this one as its successor, so its chain
// differs from this node's.
type strayError struct{ node, from, host string }

func (e *strayError) Error() string {
	return fmt.Sprintf("connection from %s, the address of %s in --chain, not the predecessor's host %s: %s dials this node as its successor, so its --chain differs from this node's (chainsync check on every node names the difference)",
		e.from, e.node, e.host, e.node)
}
