package chainsync

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// recorder checks, as tasks run, the draft's promises: no task before every
// node was ready, tasks one at a time in chain order, each exactly once.
type recorder struct {
	mu      sync.Mutex
	n       int
	ready   map[string]map[int]bool // round -> nodes locally ready
	started map[string][]int        // round -> node indexes, in start order
	running map[string]int          // round -> node running, -1 none
	errs    []string
}

func newRecorder(n int) *recorder {
	return &recorder{n: n, ready: map[string]map[int]bool{}, started: map[string][]int{}, running: map[string]int{}}
}

func (r *recorder) fail(format string, a ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}

func (r *recorder) markReady(round string, i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready[round] == nil {
		r.ready[round] = map[int]bool{}
	}
	r.ready[round][i] = true
}

func (r *recorder) task(i int, d time.Duration) func(context.Context, string) error {
	return func(ctx context.Context, round string) error {
		r.mu.Lock()
		if got := len(r.ready[round]); got != r.n {
			r.fail("round %q: node %d started with only %d/%d nodes ready", round, i, got, r.n)
		}
		prev := r.started[round]
		if len(prev) != i {
			r.fail("round %q: node %d started after %v (want chain order)", round, i, prev)
		}
		if cur, ok := r.running[round]; ok && cur >= 0 {
			r.fail("round %q: node %d started while node %d still runs", round, i, cur)
		}
		r.started[round] = append(prev, i)
		r.running[round] = i
		r.mu.Unlock()
		time.Sleep(d)
		r.mu.Lock()
		r.running[round] = -1
		r.mu.Unlock()
		return nil
	}
}

// freeAddrs reserves n loopback ports and releases them, so that nodes can
// be started in any order (a node may dial before its successor listens).
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	var lns []net.Listener
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs[i] = ln.Addr().String()
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
}

// chainConfigs returns configs for an n-node chain on loopback.
func chainConfigs(t testing.TB, n int) []Config {
	addrs := freeAddrs(t, n)
	cfgs := make([]Config, n)
	for i := range cfgs {
		cfgs[i] = Config{Name: fmt.Sprintf("N%d", i), BackoffMin: 5 * time.Millisecond, BackoffMax: 100 * time.Millisecond}
		if i > 0 {
			cfgs[i].Listen = addrs[i]
			cfgs[i].Prev = addrs[i-1]
		}
		if i < n-1 {
			cfgs[i].Next = addrs[i+1]
		}
	}
	return cfgs
}

func startAll(t testing.TB, cfgs []Config, order []int) []*Node {
	t.Helper()
	nodes := make([]*Node, len(cfgs))
	for _, i := range order {
		nd, err := Start(cfgs[i])
		if err != nil {
			t.Fatalf("start node %d: %v", i, err)
		}
		nodes[i] = nd
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			nd.Close()
		}
	})
	return nodes
}

// Draft: Protocol Operation (all four phases) over real TCP, with nodes
// started in random order and ready at random moments.
func TestChainTCP(t *testing.T) {
	for _, n := range []int{1, 2, 5, 50} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			seed := rand.Uint64()
			rng := rand.New(rand.NewPCG(seed, 1))
			t.Logf("seed %d", seed)
			rec := newRecorder(n)
			cfgs := chainConfigs(t, n)
			for i := range cfgs {
				cfgs[i].Task = rec.task(i, time.Duration(rng.IntN(2000))*time.Microsecond)
			}
			nodes := startAll(t, cfgs, rng.Perm(n))
			for _, i := range rng.Perm(n) {
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				rec.markReady("", i)
				if err := nodes[i].Ready(""); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i, nd := range nodes {
				res, err := nd.Wait(ctx, "")
				if err != nil || res.Status != StatusDone {
					t.Fatalf("seed %d: node %d: %v %v", seed, i, res, err)
				}
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, e := range rec.errs {
				t.Errorf("seed %d: %s", seed, e)
			}
			if got := len(rec.started[""]); got != n {
				t.Errorf("seed %d: %d tasks ran, want %d", seed, got, n)
			}
		})
	}
}
