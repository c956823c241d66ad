package testnet

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestFreeAddrsHeldUntilTestEnds: a reserved port is locked for the rest
// of the test, so no other FreeAddrs call (here or in another test
// binary) hands it out again, and the lock goes when the test ends.
func TestFreeAddrsHeldUntilTestEnds(t *testing.T) {
	if !portLocks {
		t.Skip("no flock(2) here: ports are not locked")
	}
	var first []string
	t.Run("reserve", func(t *testing.T) {
		first = FreeAddrs(t, 20)
		again := FreeAddrs(t, 200)
		seen := map[string]bool{}
		for _, a := range first {
			seen[a] = true
		}
		for _, a := range again {
			if seen[a] {
				t.Fatalf("%s handed out twice within one test", a)
			}
			seen[a] = true
		}
		if locked(t, first[0]) != syscall.EWOULDBLOCK {
			t.Fatalf("%s is not locked while its test runs", first[0])
		}
	})
	if err := locked(t, first[0]); err != nil {
		t.Fatalf("%s still locked after its test ended: %v", first[0], err)
	}
}

// locked tries the port's lock from a new open file and releases it at
// once; it returns the error flock gave.
func locked(t *testing.T, addr string) error {
	var port int
	if _, err := fmt.Sscanf(addr, "127.0.0.1:%d", &port); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(portLockDir(), fmt.Sprint(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return flock(f)
}
