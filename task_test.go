package chainsync

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// taskWorkerCount counts the goroutines that are task workers.
func taskWorkerCount() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "chainsync.(*taskWorker).loop")
}

// Tasks on goroutines (the default) run on reused workers: many rounds in
// a row take a few goroutines, not one per task, and once the nodes are
// closed no worker is left (the draft's "Phase 3 -- Execution Trigger
// Propagation": each node runs its task once the COMPLETE from its
// predecessor arrives, one task per node per round).
func TestTaskWorkersReusedAndGone(t *testing.T) {
	const n, rounds = 3, 20
	var (
		mu  sync.Mutex
		ran = map[uint64]int{} // goroutine id -> tasks run on it
	)
	cfgs := chainConfigs(t, n)
	for i := range cfgs {
		cfgs[i].MaxRounds = 1 << 10
		cfgs[i].Task = func(context.Context, string) error {
			mu.Lock()
			ran[curGoid()]++
			mu.Unlock()
			return nil
		}
	}
	order := []int{2, 1, 0}
	nodes := startAll(t, cfgs, order)
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
	// One worker would do, one at a time; a worker that has not yet put
	// itself back when the next task starts makes another. Half the tasks
	// is a bound no run near reuse comes close to.
	if goroutines > total/2 {
		t.Errorf("%d tasks ran on %d goroutines: workers are not reused", total, goroutines)
	}
	if taskWorkerCount() == 0 {
		t.Errorf("no task worker waits after the rounds")
	}
	for _, nd := range nodes {
		nd.Close()
	}
	// A worker whose last task was one of these nodes' exits when that
	// node closes; any other (an earlier test's) within workerIdle.
	t0 := time.Now()
	if !poll(3*workerIdle, 5*time.Millisecond, func() bool { return taskWorkerCount() == 0 }) {
		t.Fatalf("%d task workers left %v after the nodes closed", taskWorkerCount(), time.Since(t0))
	}
	t.Logf("%d tasks on %d goroutines; no worker left %v after Close", total, goroutines, time.Since(t0).Round(time.Millisecond))
}

// A task worker that waits workerIdle for another task exits, while its
// node stays open: a process whose nodes run no tasks keeps no goroutine
// for them.
func TestTaskWorkerExitsWhenIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the workers' idle time")
	}
	cfgs := chainConfigs(t, 1)
	nodes := startAll(t, cfgs, []int{0})
	nodes[0].Ready("r")
	waitDone(t, nodes, "r", "")
	if taskWorkerCount() == 0 {
		t.Fatalf("no task worker waits after the round")
	}
	t0 := time.Now()
	if !poll(5*workerIdle, 20*time.Millisecond, func() bool { return taskWorkerCount() == 0 }) {
		t.Fatalf("%d task workers left %v after the round, the node open", taskWorkerCount(), time.Since(t0))
	}
	t.Logf("the worker left %v after the round (workerIdle %v)", time.Since(t0).Round(time.Millisecond), workerIdle)
}
