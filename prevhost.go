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
	for _, ip := range ips {
		if ip.Equal(ta.IP) || ip.IsLoopback() && ta.IP.IsLoopback() {
			return nil
		}
	}
	return fmt.Errorf("connection from %s, which is not the predecessor's host %s (--prev; addresses %v)", ta.IP, p.host, ips)
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
