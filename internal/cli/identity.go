package cli

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// identify fills in what a node says of itself and checks of its
// neighbours (docs/PROTOCOL.md, "The identity line"). With --chain and
// --heartbeat its first line on each link names it, its place and digests
// of its --chain and round settings. On the draft's wire (no --heartbeat)
// over plain TCP, a node whose predecessor's --chain host is a loopback
// address accepts it only from exactly that host, as --prev does (a chain
// on 127.0.0.11, 127.0.0.12, ... on one machine); elsewhere the node
// refuses a connection from the address --chain gives another node (the
// library's check), and one from an address --chain does not name (a
// multi-homed predecessor, NAT) passes. A node on a loopback host dials
// its successor from it, since the system would pick 127.0.0.1; off
// loopback the route picks the source.
func (o *runOpts) identify(cfg *chainsync.Config) {
	if o.chain == "" {
		// A node with --listen on a loopback address dials from it too,
		// so that a successor whose --prev names it sees it.
		if h, _, _ := net.SplitHostPort(cfg.Listen); loopbackHost(h) {
			cfg.DialFrom = h
		}
		return
	}
	ms, err := parseChain(o.chain)
	if err != nil {
		return // config has refused it already
	}
	cfg.Chain, cfg.ChainAddrs = nil, nil
	predHost := ""
	for i, m := range ms {
		cfg.Chain = append(cfg.Chain, m.Name)
		cfg.ChainAddrs = append(cfg.ChainAddrs, m.Addr)
		if m.Name != o.name {
			continue
		}
		if h, _, _ := net.SplitHostPort(m.Addr); loopbackHost(h) {
			cfg.DialFrom = h
		}
		if i > 0 {
			predHost, _, _ = net.SplitHostPort(ms[i-1].Addr)
		}
	}
	cfg.RoundSettings = o.roundSettings()
	if cfg.Heartbeat == 0 && loopbackHost(predHost) && !o.tls.Enabled() {
		// Plain TCP on the draft's wire: the source address is the only
		// hint (TLS and pre-shared keys prove the place themselves).
		cfg.PrevHostOnly = true
	}
}

// loopbackHost reports whether host is a loopback address or localhost.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// roundSettings sums up the round flags that must be the same on every
// node, for the identity line's digest and its mismatch message: the
// rounds, --undo and --heartbeat. A served chain learns its rounds from
// the Head: only --serve counts there.
func (o *runOpts) roundSettings() string {
	s := "the unnamed round"
	switch {
	case o.serving():
		s = "--serve"
	case o.rounds > 0:
		s = "--rounds " + strconv.Itoa(o.rounds)
	case o.round != "":
		s = "--round " + o.round
	}
	if o.undoCmd != "" {
		s += " with --undo" // a chain setting too (docs/UNDO.md)
	}
	if o.heartbeat > 0 {
		// Also said on its own in the line (hb=), to name both values.
		s += " with --heartbeat " + o.heartbeat.String()
	}
	if o.receipts {
		s += " with --receipts" // a chain setting too (docs/RECEIPTS.md)
	}
	return s
}

// whoami is what chainsync check tells a neighbour that runs check too,
// besides its settings: its name and its --chain (names and a digest), so
// that a mis-ordered --chain is named ("C's --chain is A,C,B; this node's
// is A,B,C"); and what it knows to judge where its predecessor's
// connection comes from (not sent).
type whoami struct {
	name   string // --name, as a notice would carry it
	names  string // the --chain names, comma-joined; "" without --chain or if too long
	digest string // the digest of --chain; "" without it

	members []member // --chain
	prev    string   // the predecessor's address
	strict  bool     // run accepts the predecessor only from its host
}

func (o *runOpts) whoami() whoami {
	w := whoami{name: protocol.NoticeName(o.name), prev: o.prev, strict: o.prev != ""}
	if o.chain == "" {
		return w
	}
	ms, err := parseChain(o.chain)
	if err != nil {
		return w
	}
	w.members = ms
	names, addrs := make([]string, len(ms)), make([]string, len(ms))
	for i, m := range ms {
		names[i], addrs[i] = protocol.NoticeName(m.Name), m.Addr
		if m.Name == o.name && i > 0 {
			w.prev = ms[i-1].Addr
		}
	}
	if s := strings.Join(names, ","); len(s) <= 200 {
		w.names = s
	}
	var b strings.Builder
	for _, m := range ms {
		b.WriteString(m.Name + "=" + m.Addr + "\n")
	}
	w.digest = wire.Digest(b.String())
	if h, _, _ := net.SplitHostPort(w.prev); w.prev != "" {
		w.strict = o.heartbeat == 0 && loopbackHost(h) && !o.tls.Enabled()
	}
	return w
}

// fields is w in the settings line: " name=B chain=A,B,C digest=HEX".
func (w whoami) fields() string {
	s := ""
	if w.name != "" {
		s += " name=" + w.name
	}
	if w.names != "" {
		s += " chain=" + w.names
	}
	if w.digest != "" {
		s += " digest=" + w.digest
	}
	return s
}

// readWhoami reads the fields after a settings line's first three: each
// KEY=VALUE; others are ignored.
func readWhoami(f []string) whoami {
	var w whoami
	for _, kv := range f {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "name":
			w.name = v
		case "chain":
			w.names = v
		case "digest":
			w.digest = v
		}
	}
	return w
}

// chainDiff says how theirs, a neighbour's --chain, differs from this
// node's, or "" if it does not (or either has none).
func (w whoami) chainDiff(theirs whoami) string {
	if w.digest == "" || theirs.digest == "" || w.digest == theirs.digest {
		return ""
	}
	who := theirs.name
	if who == "" {
		who = "the neighbour"
	}
	if theirs.names != "" && w.names != "" && theirs.names != w.names {
		return fmt.Sprintf("%s's --chain is %s; this node's is %s", who, theirs.names, w.names)
	}
	return fmt.Sprintf("%s's --chain differs from this node's (%s): the same names in the same order, other addresses; give every node the same --chain", who, w.names)
}

// wrongSource says why a predecessor connection from a is not the
// predecessor's, or "": it came from the address --chain gives another
// node (so that node's --chain differs), or, where run checks the
// predecessor's host, from any other host.
func (w whoami) wrongSource(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok || w.prev == "" {
		return ""
	}
	host, _, _ := net.SplitHostPort(w.prev)
	if slices.ContainsFunc(hostIPs(host), ta.IP.Equal) {
		return ""
	}
	predName := ""
	var who []string
	for _, m := range w.members {
		mh, _, _ := net.SplitHostPort(m.Addr)
		if m.Addr == w.prev {
			predName = m.Name + " "
		} else if m.Name != w.name && slices.ContainsFunc(hostIPs(mh), ta.IP.Equal) {
			who = append(who, m.Name)
		}
	}
	switch {
	case len(who) > 0:
		return fmt.Sprintf("the connection came from %s, the address of %s in --chain, not from the predecessor %s(%s): %s dials this node as its successor, so its --chain differs from this node's (run would refuse it)",
			ta.IP, strings.Join(who, " or "), predName, host, strings.Join(who, " or "))
	case w.strict:
		return fmt.Sprintf("the connection came from %s, not from the predecessor %s(%s): run would refuse it (without --heartbeat it accepts the predecessor only from its host)",
			ta.IP, predName, host)
	}
	return ""
}

// hostIPs resolves host (an IP address or a name) briefly; nil if it
// does not resolve.
func hostIPs(host string) []net.IP {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	as, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil
	}
	ips := make([]net.IP, len(as))
	for i, a := range as {
		ips[i] = a.IP
	}
	return ips
}
