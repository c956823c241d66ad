package chainsync

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// Tasks run where their turn ran (inline.go): on the reader that read
// the COMPLETE that started them, not on a goroutine of their own: many
// rounds in a row take a few goroutines, not one per task, and once the
// nodes are closed none is left (the draft's "Phase 3 -- Execution
// Trigger Propagation": each node runs its task once the COMPLETE from
// its predecessor arrives, one task per node per round).
func TestTasksRunOnTheirReader(t *testing.T) {
	checkNoLeaks(t)
	const n, rounds = 3, 20
	var (
		mu  sync.Mutex
		ran = map[uint64]int{} // goroutine id -> tasks run on it
	)
	cfgs := tcpChainConfigs(t, n)
	for i := range cfgs {
		cfgs[i].MaxRounds = 1 << 10
		cfgs[i].Task = func(context.Context, string) error {
			mu.Lock()
			ran[curGoid()]++
			mu.Unlock()
			return nil
		}
	}
	nodes := startAll(t, cfgs, []int{2, 1, 0})
	for r := range rounds {
		id := fmt.Sprint("r", r)
		for i := n - 1; i >= 0; i-- {
			nodes[i].Ready(id)
		}
		waitDone(t, nodes, id, "")
	}
	mu.Lock()
	total, goroutines := 0, len(ran)
	for _, k := range ran {
		total += k
	}
	mu.Unlock()
	if total != n*rounds {
		t.Fatalf("%d task runs, want %d", total, n*rounds)
	}
	// A node's tasks run on its predecessor link's reader (the Head's on
	// its successor link's), or on its loop goroutine: a few goroutines
	// per node, however many rounds. A task that a loaded machine keeps
	// from ending within inlineGrace moves its reader's reading to a new
	// goroutine, so the bound is half the tasks (one goroutine per task
	// would be all of them).
	if goroutines > total/2 {
		t.Errorf("%d tasks ran on %d goroutines: not on their readers", total, goroutines)
	}
	t.Logf("%d tasks on %d goroutines", total, goroutines)
}

// A task that outlasts inlineGrace on the reader that started it does not
// stop the link's reading: the next round's COMPLETE is read and its task
// starts beside the first (MaxParallelTasks 2), while the first still
// runs (the draft's "Phase 3 -- Execution Trigger Propagation").
func TestLongTaskHandsReadingOn(t *testing.T) { checkLongTaskHandsReadingOn(t, false) }

// The same after a streak of quick tasks, when the node's seats run
// without their timer and its watch hands the reading on (inline.go):
// r2's task still starts beside r1's while r1's runs, and the streak ends.
func TestLongTaskAfterQuickStreakHandsReadingOn(t *testing.T) {
	checkLongTaskHandsReadingOn(t, true)
}

// checkLongTaskHandsReadingOn runs r1, whose task at the Tail of a
// two-node chain runs until r2's has started beside it; with streak,
// quick rounds first, until the Tail's seats run without their timer.
func checkLongTaskHandsReadingOn(t *testing.T, streak bool) {
	checkNoLeaks(t)
	release := make(chan struct{})
	started := make(chan string, 2)
	cfgs := tcpChainConfigs(t, 2)
	cfgs[1].MaxParallelTasks = 2
	cfgs[1].Task = func(ctx context.Context, round string) error {
		if round != "r1" && round != "r2" {
			return nil // quick
		}
		started <- round
		if round == "r1" {
			select { // runs until r2's task has started beside it
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}
	nodes := startAll(t, cfgs, []int{1, 0})
	ready := func(id string) {
		for i := 1; i >= 0; i-- {
			if err := nodes[i].Ready(id); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Quick rounds until the streak is in force (a task held up by a
	// loaded machine starts it again).
	for i := 0; streak && nodes[1].lp.watch.quick.Load() < quickStreak; i++ {
		if i == 20*quickStreak {
			t.Fatalf("no streak of %d quick tasks in %d rounds", quickStreak, i)
		}
		id := fmt.Sprint("q", i)
		ready(id)
		waitDone(t, nodes, id, "")
	}
	ready("r1")
	if got := recvWithin(t, started, 10*time.Second, "r1's task to start"); got != "r1" {
		t.Fatalf("first task started: %s, want r1", got)
	}
	ready("r2") // its lines come while the reader that read r1's is in r1's task
	if got := recvWithin(t, started, 10*time.Second, "r2's task to start while r1's runs"); got != "r2" {
		t.Fatalf("second task started: %s, want r2", got)
	}
	if q := nodes[1].lp.watch.quick.Load(); streak && q >= quickStreak {
		t.Errorf("%d quick tasks counted in a row after r1's ran long: the streak should have ended", q)
	}
	close(release)
	waitDone(t, nodes, "r1", "")
	waitDone(t, nodes, "r2", "")
}

// A task that the loop goroutine started (a one-node chain's, on Ready)
// and that outlasts inlineGrace does not stop the node's loop: Snapshot
// answers while it runs, and Close ends it.
func TestLongTaskOnTheLoopHandsTheLoopOn(t *testing.T) {
	checkNoLeaks(t)
	started := make(chan struct{})
	cfgs := tcpChainConfigs(t, 1)
	cfgs[0].Task = func(ctx context.Context, round string) error {
		close(started)
		<-ctx.Done() // until the node is closed
		return ctx.Err()
	}
	nodes := startAll(t, cfgs, []int{0})
	if err := nodes[0].Ready("r"); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, started, 10*time.Second, "the task to start")
	snap := make(chan Snapshot, 1)
	go func() { snap <- nodes[0].Snapshot() }()
	s := recvWithin(t, snap, 10*time.Second, "Snapshot while the task runs")
	if len(s.Rounds) != 1 || s.Rounds[0].State != protocol.StateStart {
		t.Errorf("Snapshot while the task runs: rounds %+v, want r in START", s.Rounds)
	}
	closed := make(chan error, 1)
	go func() { closed <- nodes[0].Close() }()
	recvWithin(t, closed, 10*time.Second, "Close while the task runs")
}
