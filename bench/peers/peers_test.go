package main

// A short run of each comparison, checked for sane output (not timed).
// The Python reference runs only when CHAINSYNC_REFERENCE names a checkout.

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestEtcdRounds(t *testing.T) {
	srv, err := startEtcd(true)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close()
	for _, db := range []bool{false, true} {
		lat, err := etcdRounds(context.Background(), srv.url, 3, 1, 3, db)
		if err != nil {
			t.Fatalf("double barrier %v: %v", db, err)
		}
		if len(lat) != 3 {
			t.Fatalf("double barrier %v: %d latencies, want 3", db, len(lat))
		}
		for _, d := range lat {
			if d <= 0 || d > time.Minute {
				t.Errorf("double barrier %v: implausible latency %v", db, d)
			}
		}
	}
}

func TestPythonReference(t *testing.T) {
	ref := os.Getenv("CHAINSYNC_REFERENCE")
	if ref == "" {
		t.Skip("set CHAINSYNC_REFERENCE to a checkout of the Python reference implementation")
	}
	dir, err := findReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	lat, err := pythonRounds(context.Background(), "python3", dir, 3, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) != 3 || lat[0] <= 0 {
		t.Errorf("latencies %v", lat)
	}
}
