package chainsync_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/chaintest"
)

// A real-TCP chain of 1,000 nodes in one process completes a round
// (draft: Protocol Operation; issue "scale"). It logs the round's time and
// the memory and goroutines per node.
func TestScaleThousandNodesTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000-node chain skipped with -short")
	}
	const n = 1000
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()

	done := make([]atomic.Bool, n)
	nodes, err := chaintest.Build(n, chaintest.Options{Configure: func(i int, cfg *chainsync.Config) {
		cfg.Task = func(context.Context, string) error { done[i].Store(true); return nil }
	}})
	if err != nil {
		t.Fatalf("%v (raise ulimit -n: the test needs about %d descriptors)", err, 4*n)
	}
	defer chaintest.Close(nodes)
	t0 := time.Now()
	for i := n - 1; i >= 0; i-- {
		nodes[i].Ready("")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if res, err := nodes[0].Wait(ctx, ""); err != nil || res.Status != chainsync.StatusDone {
		t.Fatalf("head: %+v %v", res, err)
	}
	elapsed := time.Since(t0)
	for i := range done {
		if !done[i].Load() {
			t.Fatalf("node %d never ran its task", i)
		}
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	g := runtime.NumGoroutine() - g0
	t.Logf("%d nodes: round %v (%v per hop over %d messages); heap %.1f KiB/node; %.1f goroutines/node",
		n, elapsed.Round(time.Millisecond), (elapsed / time.Duration(4*(n-1))).Round(time.Microsecond), 4*(n-1),
		float64(after.HeapInuse-before.HeapInuse)/1024/n, float64(g)/n)
}
