package chainsync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
	"github.com/chainsync-go/chainsync/protocol"
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
		select { // the task's work takes d
		case <-time.After(d):
		case <-ctx.Done():
		}
		r.mu.Lock()
		r.running[round] = -1
		r.mu.Unlock()
		return nil
	}
}

// freeAddrs reserves n loopback ports and releases them, so that nodes can
// be started in any order (a node may dial before its successor listens).
func freeAddrs(t testing.TB, n int) []string {
	return testnet.FreeAddrs(t, n)
}

// chainConfigs and startAll are the in-process chain builder of the tests
// inside this package. The one for everything else is
// internal/chaintest.Build; tests here cannot use it, since chaintest
// imports this package (an import cycle), and tests that need no
// unexported name use chaintest from package chainsync_test
// (scale_test.go, scale10k_test.go). This one also gives each node an
// address to bind rather than a bound listener, so that nodes can start
// in any order (a dial before the successor is up is refused and
// retried).

// chainConfigs returns configs for an n-node chain on a simulated network
// of its own (simChain): no ports, no sockets, and tests that use it may
// run in parallel or in a synctest bubble.
func chainConfigs(t testing.TB, n int) []Config {
	return simChain(t, testnet.NewNetwork(), n)
}

// tcpChainConfigs returns configs for an n-node chain on loopback TCP,
// for the tests of what only real sockets show.
func tcpChainConfigs(t testing.TB, n int) []Config {
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

// countSent makes every node count the messages it puts on the wire.
func countSent(cfgs []Config) *atomic.Int64 {
	var sent atomic.Int64
	for i := range cfgs {
		cfgs[i].Trace = func(ev TraceEvent) {
			if ev.Kind == TraceSent && !ev.Queued {
				sent.Add(1)
			}
		}
	}
	return &sent
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

// waitDone waits until round is done at every node; what prefixes a
// failure message (the seed, say).
func waitDone(t testing.TB, nodes []*Node, round string, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, nd := range nodes {
		if res, err := nd.Wait(ctx, round); err != nil || res.Status != StatusDone {
			t.Fatalf("%snode %d round %q: %+v %v", what, i, round, res, err)
		}
	}
}

// Draft: Protocol Operation (all four phases) over real TCP, with nodes
// started in random order and ready at random moments.
func TestChainTCP(t *testing.T) {
	for _, n := range []int{1, 2, 5, 50} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) { checkChain(t, tcpChainConfigs(t, n)) })
	}
}

// checkChain runs one unnamed round on the chain cfgs configure, its nodes
// started in a random order and ready at random moments, and checks the
// draft's promises: tasks one at a time in chain order, each once, after
// every node was ready, in exactly 4(n-1) messages (Introduction). The
// seed is logged and named in every failure.
func checkChain(t *testing.T, cfgs []Config) {
	n := len(cfgs)
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	rec := newRecorder(n)
	for i := range cfgs {
		cfgs[i].Task = rec.task(i, time.Duration(rng.IntN(2000))*time.Microsecond)
	}
	sent := countSent(cfgs)
	nodes := startAll(t, cfgs, rng.Perm(n))
	for _, i := range rng.Perm(n) {
		after(time.Duration(rng.IntN(3000)) * time.Microsecond)
		rec.markReady("", i)
		if err := nodes[i].Ready(""); err != nil {
			t.Fatal(err)
		}
	}
	waitDone(t, nodes, "", fmt.Sprintf("seed %d: ", seed))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.errs {
		t.Errorf("seed %d: %s", seed, e)
	}
	if got := len(rec.started[""]); got != n {
		t.Errorf("seed %d: %d tasks ran, want %d", seed, got, n)
	}
	if got := sent.Load(); got != int64(4*(n-1)) {
		t.Errorf("seed %d: %d messages on the wire, want 4(n-1) = %d", seed, got, 4*(n-1))
	}
}

// Draft: Message Types (ROUND-ID "to support multiple concurrent rounds on
// the same connection"): 20 named rounds at once on one chain, each ready at
// random moments at every node, do not interfere.
func TestConcurrentRoundsTCP(t *testing.T) {
	const n, rounds = 4, 20
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 2))
	rec := newRecorder(n)
	cfgs := chainConfigs(t, n)
	for i := range cfgs {
		cfgs[i].Task = rec.task(i, time.Duration(rng.IntN(500))*time.Microsecond)
	}
	sent := countSent(cfgs)
	nodes := startAll(t, cfgs, rng.Perm(n))
	type ev struct{ node, round int }
	var evs []ev
	for i := range n {
		for r := range rounds {
			evs = append(evs, ev{i, r})
		}
	}
	rng.Shuffle(len(evs), func(a, b int) { evs[a], evs[b] = evs[b], evs[a] })
	for _, e := range evs {
		id := fmt.Sprintf("r%d", e.round)
		rec.markReady(id, e.node)
		if err := nodes[e.node].Ready(id); err != nil {
			t.Fatal(err)
		}
	}
	for r := range rounds {
		waitDone(t, nodes, fmt.Sprintf("r%d", r), fmt.Sprintf("seed %d: ", seed))
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, e := range rec.errs {
		t.Errorf("seed %d: %s", seed, e)
	}
	if got := sent.Load(); got != 4*(n-1)*rounds {
		t.Errorf("seed %d: %d messages on the wire, want 4(n-1) per round = %d", seed, got, 4*(n-1)*rounds)
	}
	for r := range rounds {
		if got := rec.started[fmt.Sprintf("r%d", r)]; len(got) != n {
			t.Errorf("seed %d: round r%d ran %v", seed, r, got)
		}
	}
}

// docs/DESIGN.md "Reconnects": a link dropped mid-round is re-established, the
// last message on it is re-sent, duplicates are no-ops, and every task runs
// exactly once.
func TestLinkDropMidRoundTCP(t *testing.T) {
	for _, cutAt := range []int{0, 1, 2, 3} { // cut the B-C link while node cutAt runs its task
		t.Run(fmt.Sprint("cut-during-", cutAt), func(t *testing.T) {
			const n = 4
			rec := newRecorder(n)
			cfgs := tcpChainConfigs(t, n)
			p := newResetProxy(t, cfgs[2].Listen)
			cfgs[1].Next = p.Addr()
			var once sync.Once
			for i := range cfgs {
				task := rec.task(i, 20*time.Millisecond)
				cfgs[i].Task = func(ctx context.Context, r string) error {
					if i == cutAt {
						once.Do(p.Reset)
					}
					return task(ctx, r)
				}
			}
			nodes := startAll(t, cfgs, []int{0, 1, 2, 3})
			for i, nd := range nodes {
				rec.markReady("", i)
				nd.Ready("")
			}
			waitDone(t, nodes, "", "")
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, e := range rec.errs {
				t.Error(e)
			}
			if got := rec.started[""]; len(got) != n {
				t.Errorf("tasks ran %v, want each once in order", got)
			}
		})
	}
}

// A task error halts the chain at that node: no COMPLETE is sent on, so the
// successor never runs its task (docs/DESIGN.md "Faults").
func TestTaskFailureHaltsTCP(t *testing.T) {
	const n = 3
	cfgs := chainConfigs(t, n)
	var ran [n]bool
	for i := range cfgs {
		cfgs[i].Task = func(context.Context, string) error {
			ran[i] = true
			if i == 1 {
				return fmt.Errorf("disk full")
			}
			return nil
		}
		cfgs[i].PhaseTimeout = 300 * time.Millisecond
	}
	nodes := startAll(t, cfgs, []int{2, 1, 0})
	for _, nd := range nodes {
		nd.Ready("")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, _ := nodes[1].Wait(ctx, "")
	if res.Status != StatusTaskFailed || res.Err == nil {
		t.Fatalf("middle: %+v", res)
	}
	res, _ = nodes[2].Wait(ctx, "")
	if res.Status != StatusFault {
		t.Fatalf("tail: %+v, want a fault (timed out in WATCH)", res)
	}
	if ran[2] {
		t.Fatal("the tail ran its task after its predecessor failed")
	}
	// Without fault notices the Head cannot know B's task failed: its
	// COMPLETE went on and no exit wave came back, so the tasks after it
	// may have run (docs/FAULTS.md, "Undelivered rounds").
	res, _ = nodes[0].Wait(ctx, "")
	var ue *UndeliveredError
	if res.Status != StatusUndelivered || !errors.As(res.Err, &ue) || faultKindOf(res.Err) != FaultPhaseTimeout {
		t.Fatalf("head: %+v, want undelivered (no exit wave) after a phase timeout", res)
	}
}

// Close stops everything: no goroutine outlives the nodes.
func TestCloseNoLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	cfgs := chainConfigs(t, 3)
	running := make(chan int, len(cfgs))
	for i := range cfgs {
		cfgs[i].Task = func(ctx context.Context, _ string) error { running <- i; <-ctx.Done(); return ctx.Err() }
	}
	var nodes []*Node
	for _, c := range cfgs {
		nd, err := Start(c)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, nd)
		nd.Ready("")
	}
	if i := recvWithin(t, running, 10*time.Second, "the Head's task to run"); i != 0 {
		t.Fatalf("node %d's task ran first", i)
	}
	for _, nd := range nodes {
		nd.Close()
	}
	for i, nd := range nodes {
		if res, _ := nd.Wait(context.Background(), ""); res.Status != StatusStopped {
			t.Errorf("node %d: %+v, want stopped", i, res)
		}
	}
	poll(5*time.Second, 10*time.Millisecond, func() bool { return runtime.NumGoroutine() <= before })
	if after := runtime.NumGoroutine(); after > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after Close:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// docs/DESIGN.md "Reconnects", and the model's finding on the draft's "MAY
// terminate": B's exit-wave COMPLETE to the Head is lost in a link cut.
// The Head reconnects and re-sends its COMPLETE; B, done but lingering,
// answers the duplicate with its final COMPLETE again, so the Head
// finishes.
func TestExitWaveSurvivesLostCompleteTCP(t *testing.T) {
	cfgs := tcpChainConfigs(t, 3)
	p := newResetProxy(t, cfgs[1].Listen)
	cfgs[0].Next = p.Addr()
	var once sync.Once
	cfgs[1].Trace = func(ev TraceEvent) {
		if ev.Kind == TraceSent && ev.Side == 1 && ev.Msg.Cmd == 3 { // COMPLETE to pred
			once.Do(p.Reset) // before the write: the message is lost
		}
	}
	nodes := startAll(t, cfgs, []int{0, 1, 2})
	for _, nd := range nodes {
		nd.Ready("")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 2; i >= 0; i-- {
		if res, err := nodes[i].Wait(ctx, ""); err != nil || res.Status != StatusDone {
			t.Fatalf("node %d: %+v %v", i, res, err)
		}
	}
	// The Head is done, so B's predecessor hangs up once A closes: Linger returns.
	nodes[0].Close()
	if err := nodes[1].Linger(ctx, 50*time.Millisecond); err != nil {
		t.Fatalf("linger: %v", err)
	}
}

// Snapshot tells an operator what a waiting round waits for.
func TestSnapshotSaysWhatARoundWaitsFor(t *testing.T) {
	cfgs := chainConfigs(t, 2)
	nodes := startAll(t, cfgs[1:], []int{0}) // the Tail only: its predecessor never comes
	tail := nodes[0]
	if err := tail.Ready("r1"); err != nil {
		t.Fatal(err)
	}
	snap := tail.Snapshot()
	if snap.PredUp || len(snap.Rounds) != 1 {
		t.Fatalf("snapshot %+v", snap)
	}
	r := snap.Rounds[0]
	if r.Round != "r1" || r.State != protocol.StateSync || !r.Ready || r.WaitingFor != protocol.WaitReady ||
		!strings.Contains(r.Doing(), "waiting for READY from the predecessor") {
		t.Errorf("round %+v: %q", r, r.Doing())
	}
	if time.Since(r.Since) > time.Minute {
		t.Errorf("since %v", r.Since)
	}
}

// One round table (docs/DESIGN.md, "The shape of the code"): a node remembers the rounds
// its machine remembers, the last Config.KeepFinished finished ones, and
// nothing else.
func TestDriverForgetsWhatTheMachineForgets(t *testing.T) {
	const n, keep, rounds = 3, 4, 12
	cfgs := chainConfigs(t, n)
	for i := range cfgs {
		cfgs[i].KeepFinished = keep
	}
	nodes := startAll(t, cfgs, []int{2, 1, 0})
	for r := range rounds {
		id := fmt.Sprintf("r%d", r)
		for _, nd := range nodes {
			if err := nd.Ready(id); err != nil {
				t.Fatal(err)
			}
		}
		waitDone(t, nodes, id, "")
	}
	for i, nd := range nodes {
		var kept, machine []string
		nd.call(func() {
			for _, e := range nd.d.book.all() {
				kept = append(kept, e.id)
			}
			for r := range rounds {
				if _, ok := nd.d.view.State(fmt.Sprintf("r%d", r)); ok {
					machine = append(machine, fmt.Sprintf("r%d", r))
				}
			}
		})
		slices.Sort(kept)
		slices.Sort(machine)
		want := []string{"r10", "r11", "r8", "r9"}
		if !slices.Equal(kept, want) || !slices.Equal(machine, want) {
			t.Errorf("node %d keeps %v, its machine %v; want both %v", i, kept, machine, want)
		}
	}
}
