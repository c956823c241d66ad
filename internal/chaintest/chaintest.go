// Package chaintest starts real chains of chainsync nodes, in one process
// over loopback TCP, for the tests of tools built on the library (status,
// metrics, traces).
package chaintest

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync"
)

// Names returns the names of an n-node chain: A, B, C, ... (N1, N2, ...
// past 26).
func Names(n int) []string {
	names := make([]string, n)
	for i := range names {
		if n <= 26 {
			names[i] = string(rune('A' + i))
		} else {
			names[i] = fmt.Sprintf("N%d", i+1)
		}
	}
	return names
}

// Start starts an n-node chain named by Names. Every node but the Head
// gets a loopback listener, and its neighbours' names and addresses; hook,
// if not nil, adjusts each node's configuration (i is its position)
// before it starts. The nodes are closed when the test ends.
func Start(t testing.TB, n int, hook func(i int, cfg *chainsync.Config)) []*chainsync.Node {
	t.Helper()
	names := Names(n)
	lns := make([]net.Listener, n)
	for i := 1; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
	}
	nodes := make([]*chainsync.Node, n)
	t.Cleanup(func() {
		for _, nd := range nodes {
			if nd != nil {
				nd.Close()
			}
		}
	})
	for i := range nodes {
		cfg := chainsync.Config{Name: names[i], BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}
		if i > 0 {
			cfg.Listener = lns[i]
			cfg.Listen = lns[i].Addr().String()
			cfg.PrevName = names[i-1]
		}
		if i < n-1 {
			cfg.Next = lns[i+1].Addr().String()
			cfg.NextName = names[i+1]
		}
		if hook != nil {
			hook(i, &cfg)
		}
		nd, err := chainsync.Start(cfg)
		if err != nil {
			for _, l := range lns[i:] {
				if l != nil {
					l.Close()
				}
			}
			t.Fatalf("start %s: %v", names[i], err)
		}
		nodes[i] = nd
	}
	return nodes
}
