// Package testnet gives tests loopback addresses that are free to bind,
// and Peer: a neighbour played byte for byte over plain TCP (or TLS) by a
// test. It does not import the library, so the library's own tests can
// use it as well as the command's.
package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// Ports below Linux's ephemeral range (32768-60999 by default) are never
// taken as the source port of an outgoing connection, so a reserved port
// cannot be stolen by one between its reservation and its bind, as a port
// from "127.0.0.1:0" can when many tests dial at once.
const lowPort, highPort = 20000, 32767

// FreeAddrs reserves n loopback addresses, free at the time of the call,
// and releases them, so that nodes can be given each other's addresses
// before any of them is up (a node may dial before its successor
// listens).
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, 0, n)
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for tries := 0; len(addrs) < n; tries++ {
		if tries > 100*n {
			t.Fatalf("no free loopback port in %d-%d after %d tries", lowPort, highPort, tries)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", lowPort+rand.IntN(highPort-lowPort+1))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken; try another
		}
		lns = append(lns, ln)
		addrs = append(addrs, addr)
	}
	return addrs
}
