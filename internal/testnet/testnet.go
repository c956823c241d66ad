// Package testnet gives tests loopback addresses that are free to bind,
// and Peer: a neighbour played byte for byte over plain TCP (or TLS) by a
// test. It does not import the library, so the library's own tests can
// use it as well as the command's.
package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// Ports below Linux's ephemeral range (32768-60999 by default) are never
// taken as the source port of an outgoing connection, so a reserved port
// cannot be stolen by one between its reservation and its bind, as a port
// from "127.0.0.1:0" can when many tests dial at once.
const lowPort, highPort = 20000, 32767

// FreeAddrs reserves n loopback addresses, free at the time of the call,
// and releases the sockets, so that nodes can be given each other's
// addresses before any of them is up (a node may dial before its
// successor listens).
//
// Between the release and the node's bind, another test binary running
// at the same time (go test runs packages in parallel) could draw the
// same port and bind it first. So each port also takes an exclusive lock
// on a file named after it, in a directory shared by all of this user's
// test processes, held until the test ends; FreeAddrs in any process
// skips a port whose lock is held.
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
		port := lowPort + rand.IntN(highPort-lowPort+1)
		if !reservePort(t, port) {
			continue // held by a test in this or another process
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken; try another
		}
		lns = append(lns, ln)
		addrs = append(addrs, addr)
	}
	return addrs
}

// portLockDir is the directory of the port locks: one per user, so that
// another user's directory never stops a run (the ports themselves are
// shared, but two users testing at the same moment are rare).
func portLockDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("chainsync-test-ports-%d", os.Getuid()))
}

// reservePort takes the cross-process lock on port for the rest of the
// test; it reports false if a test (in any process) holds it.
func reservePort(t testing.TB, port int) bool {
	dir := portLockDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatalf("reserving test ports: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(port)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		t.Fatalf("reserving test ports: %v", err)
	}
	if err := flock(f); err != nil {
		f.Close()
		return false
	}
	t.Cleanup(func() { f.Close() }) // closing the file releases the lock
	return true
}
