// Package chaintest starts real chains of chainsync nodes in one process,
// over loopback TCP: for the tests of tools built on the library (status,
// metrics, traces), the library's scale tests, and chainsync demo.
//
// It is the one in-process chain builder outside the library package. The
// library's internal tests (package chainsync) cannot import it, since it
// imports the library; they have their own, in chain_test.go.
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

// Options adjust the chain Build starts. The zero value starts nodes named
// by Names, each but the Head on a listener at 127.0.0.1 port 0.
type Options struct {
	// Listen binds node i's listener (1 <= i < n); nil binds 127.0.0.1:0.
	// Build binds every listener before it configures any node.
	Listen func(i int) (net.Listener, error)
	// Configure, if not nil, adjusts node i's configuration before the
	// node starts (in chain order, Head first). It starts out with the
	// node's name, its listener, its neighbours' names and its
	// successor's address, and a reconnect backoff of 5 to 50 ms.
	Configure func(i int, cfg *chainsync.Config)
}

// Build starts an n-node chain. Every node but the Head gets a listener;
// every node but the Tail dials its successor's. On an error it closes
// whatever it had started and returns the error; otherwise the caller
// closes the nodes.
func Build(n int, o Options) ([]*chainsync.Node, error) {
	names := Names(n)
	listen := o.Listen
	if listen == nil {
		listen = func(int) (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
	}
	lns := make([]net.Listener, n)
	nodes := make([]*chainsync.Node, n)
	fail := func(err error) ([]*chainsync.Node, error) {
		for i, nd := range nodes {
			if nd != nil {
				nd.Close() // closes its listener too
			} else if lns[i] != nil {
				lns[i].Close()
			}
		}
		return nil, err
	}
	for i := 1; i < n; i++ {
		ln, err := listen(i)
		if err != nil {
			return fail(fmt.Errorf("listener of %s (node %d of %d): %w", names[i], i+1, n, err))
		}
		lns[i] = ln
	}
	for i := range nodes {
		cfg := chainsync.Config{Name: names[i], BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond}
		if i > 0 {
			cfg.Listener = lns[i]
			cfg.PrevName = names[i-1]
		}
		if i < n-1 {
			cfg.Next = lns[i+1].Addr().String()
			cfg.NextName = names[i+1]
		}
		if o.Configure != nil {
			o.Configure(i, &cfg)
		}
		nd, err := chainsync.Start(cfg)
		if err != nil {
			return fail(fmt.Errorf("start %s (node %d of %d): %w", names[i], i+1, n, err))
		}
		nodes[i] = nd
	}
	return nodes, nil
}

// Start builds an n-node chain for a test: hook, if not nil, adjusts each
// node's configuration as Options.Configure does. A failure to start fails
// the test; the nodes are closed when the test ends.
func Start(t testing.TB, n int, hook func(i int, cfg *chainsync.Config)) []*chainsync.Node {
	t.Helper()
	nodes, err := Build(n, Options{Configure: hook})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Close(nodes) })
	return nodes
}

// Close closes every node of a chain.
func Close(nodes []*chainsync.Node) {
	for _, nd := range nodes {
		if nd != nil {
			nd.Close()
		}
	}
}
