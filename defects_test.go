package chainsync

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
)

// Close releases a node whose loop died of a panic (SetPanicHandler kept
// the process alive): the listener is closed and the state directory is
// free again, so that a command that reports the panic can still shut
// down cleanly (docs/OPERATIONS.md, exit status; the draft's node runs
// until it is stopped).
func TestCloseAfterLoopPanic(t *testing.T) {
	panicked := make(chan any, 1)
	SetPanicHandler(func(v any, _ []byte) { panicked <- v })
	t.Cleanup(func() { SetPanicHandler(nil) })
	dir := t.TempDir()
	var once sync.Once
	cfg := Config{Name: "B", Listen: "127.0.0.1:0", Prev: "127.0.0.1:1", StateDir: dir,
		Trace: func(TraceEvent) { once.Do(func() { panic("seeded bug on the loop") }) }}
	nd, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := nd.Addr().String()
	// A stranger's junk line is traced (a violation): on the loop, which
	// the Trace callback makes panic.
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("JUNK\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-panicked:
		if v != "seeded bug on the loop" {
			t.Fatalf("handler got %v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the loop's panic did not reach the handler")
	}
	closed := make(chan error, 1)
	go func() { closed <- nd.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close after the loop's panic did not return")
	}
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Error("the listener still accepts after Close")
	}
	j, _, err := journal.Open(dir, journal.Header{Role: nd.Role().String(), Name: "B"})
	if err != nil {
		t.Fatalf("the state directory is still held after Close: %v", err)
	}
	j.Close()
}

// A Trace callback may hand work to a goroutine of its own and wait for
// it; that goroutine may read the node (Snapshot) while the loop waits in
// the callback, as the callback itself may.
func TestSnapshotFromCallbackHelper(t *testing.T) {
	cfgs := chainConfigs(t, 1)
	var (
		mu    sync.Mutex
		nd    *Node
		reads int
	)
	cfgs[0].Trace = func(ev TraceEvent) {
		mu.Lock()
		n := nd
		mu.Unlock()
		if ev.Kind != TraceRoundDone || n == nil {
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if st := n.Snapshot(); st.Name == cfgs[0].Name {
				mu.Lock()
				reads++
				mu.Unlock()
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("a Snapshot asked by the callback's helper goroutine was not answered")
		}
	}
	n := startAll(t, cfgs, []int{0})[0]
	mu.Lock()
	nd = n
	mu.Unlock()
	if err := n.Ready(""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.Wait(ctx, ""); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if reads != 1 {
		t.Fatalf("the helper read the node %d times, want 1", reads)
	}
}
