package chainsync

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// prevHost checks where a would-be predecessor's connection comes from,
// before it may say anything. Two checks:
//
//   - Config.PrevHostOnly: only from an address Prev's host resolves to,
//     exactly (127.0.0.12 is not 127.0.0.11).
//   - On the draft's wire over plain TCP (no extension lines, no Secure),
//     a node placed by Config.Chain and ChainAddrs refuses a connection
//     from the address the chain gives another node (not the
//     predecessor's): that node dials this one as its successor, so its
//     chain differs from this one's (docs/PROTOCOL.md, "The identity
//     line"). A connection from an address the chain does not name (a
//     predecessor with several addresses, or behind NAT) passes.
//
// Resolved addresses are kept for prevHostTTL, so a flood of connections
// makes one lookup, and a name that moves to a new address (a
// rescheduled pod) is found again.
type prevHost struct {
	host string // PrevHostOnly's host; "" when that check is off
	// The chain's other nodes, by name, and their hosts, for the second
	// check (strays) and to name the node a refused connection came from.
	names, hosts []string
	predHost     string // the predecessor's host in the chain
	strays       bool   // the second check is on

	lookup func(ctx context.Context, host string) ([]net.IPAddr, error)

	mu    sync.Mutex // guards cache; never held while resolving
	cache map[string]resolved
}

type resolved struct {
	ips   []net.IP
	until time.Time
}

const prevHostTTL = 10 * time.Second

func newPrevHost(cfg *Config) *prevHost {
	p := &prevHost{cache: make(map[string]resolved), lookup: cfg.lookupHost}
	if p.lookup == nil {
		p.lookup = net.DefaultResolver.LookupIPAddr
	}
	if cfg.PrevHostOnly {
		p.host, _, _ = net.SplitHostPort(cfg.Prev)
	}
	if len(cfg.ChainAddrs) == len(cfg.Chain) {
		at := slices.Index(cfg.Chain, cfg.Name)
		for i, name := range cfg.Chain {
			h, _, err := net.SplitHostPort(cfg.ChainAddrs[i])
			switch {
			case err != nil || i == at:
			case i == at-1:
				p.predHost = h
			default:
				p.names, p.hosts = append(p.names, name), append(p.hosts, h)
			}
		}
		p.strays = at > 0 && cfg.Heartbeat <= 0 && cfg.Secure == nil && len(p.names) > 0
	}
	return p
}

// on reports whether connections are checked at all.
func (p *prevHost) on() bool { return p != nil && (p.host != "" || p.strays) }

// check reports why a connection from remote is not the predecessor's,
// or nil. Called on a goroutine of the connection's own, off the loop.
func (p *prevHost) check(ctx context.Context, remote net.Addr) error {
	if !p.on() {
		return nil
	}
	if p == nil || p.host == "" && !p.strays {
		return nil
	}
	ta, ok := remote.(*net.TCPAddr)
	if !ok {
		return nil
	}
	if p.host != "" {
		ips, err := p.addrs(ctx, p.host)
		if err != nil {
			return fmt.Errorf("the predecessor's host %s (--prev) does not resolve, so no connection can be checked against it: %v", p.host, err)
		}
		// Exactly its addresses: on one machine a chain may use
		// 127.0.0.11, 127.0.0.12, ... (the predecessor dials from its
		// own address: Config.DialFrom).
		if slices.ContainsFunc(ips, ta.IP.Equal) {
			return nil
		}
		if err := p.stray(ctx, ta.IP, p.host); err != nil {
			return err
		}
		return fmt.Errorf("connection from %s, which is not the predecessor's host %s (--prev, or its --chain entry; addresses %v): another node dials this one as its successor, or the predecessor dials from another address (give it its own address to dial from: --chain does on loopback)", ta.IP, p.host, ips)
	}
	if ips, err := p.addrs(ctx, p.predHost); err == nil && slices.ContainsFunc(ips, ta.IP.Equal) {
		return nil // the predecessor's address, even if another node shares it
	}
	return p.stray(ctx, ta.IP, p.predHost)
}

// stray returns the error for a connection from ip, the address the chain
// gives another node, or nil if it is none of theirs.
func (p *prevHost) stray(ctx context.Context, ip net.IP, predHost string) error {
	for i, h := range p.hosts {
		if ips, err := p.addrs(ctx, h); err == nil && slices.ContainsFunc(ips, ip.Equal) {
			return &strayError{node: p.names[i], from: ip.String(), host: predHost}
		}
	}
	return nil
}

// addrs resolves host (an IP address or a name), from the cache while it
// is fresh; through a resolver hiccup the last answer stands.
func (p *prevHost) addrs(ctx context.Context, host string) ([]net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}, nil
	}
	p.mu.Lock()
	r, ok := p.cache[host]
	p.mu.Unlock()
	if ok && time.Now().Before(r.until) {
		return r.ips, nil
	}
	// Resolved without the lock: a slow resolver holds up only the
	// connections that wait for this answer.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	as, err := p.lookup(ctx, host)
	if err != nil {
		if len(r.ips) > 0 {
			return r.ips, nil
		}
		return nil, err
	}
	ips := make([]net.IP, 0, len(as))
	for _, a := range as {
		if !slices.ContainsFunc(ips, a.IP.Equal) {
			ips = append(ips, a.IP)
		}
	}
	p.mu.Lock()
	p.cache[host] = resolved{ips: ips, until: time.Now().Add(prevHostTTL)}
	p.mu.Unlock()
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
