package chainsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// runLog records task runs across a node's restarts and checks the
// draft's promises at every start: every node was ready, no other task
// runs, the predecessors have run and no successor has, and a node whose
// task finished never runs it again. An interrupted run (the node was
// closed in it) and its re-run, or the restart taken as the task
// (ResumeDone), are that node's one run.
type runLog struct {
	mu          sync.Mutex
	n           int
	ready       map[int]bool
	starts      []int       // node of each task start, in order
	completed   map[int]int // runs that returned nil
	interrupted map[int]int // runs ended by the node closing
	running     int
	gate        map[int]chan struct{} // a node's first run waits for it
	started     chan int
	errs        []string
}

func newRunLog(n int) *runLog {
	return &runLog{n: n, ready: map[int]bool{}, completed: map[int]int{}, interrupted: map[int]int{},
		running: -1, gate: map[int]chan struct{}{}, started: make(chan int, 16)}
}

func (l *runLog) markReady(i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ready[i] = true
}

func (l *runLog) task(i int) func(context.Context, string) error {
	return func(ctx context.Context, round string) error {
		l.mu.Lock()
		switch {
		case len(l.ready) != l.n:
			l.errs = append(l.errs, fmt.Sprintf("node %d started with %d of %d nodes ready", i, len(l.ready), l.n))
		case l.running >= 0:
			l.errs = append(l.errs, fmt.Sprintf("node %d started while node %d runs", i, l.running))
		case l.completed[i] > 0:
			l.errs = append(l.errs, fmt.Sprintf("node %d ran its task again after it finished", i))
		}
		for j := range l.n {
			if j < i && !slices.Contains(l.starts, j) || j > i && slices.Contains(l.starts, j) {
				l.errs = append(l.errs, fmt.Sprintf("node %d started out of chain order after %v", i, l.starts))
			}
		}
		first := !slices.Contains(l.starts, i)
		l.starts = append(l.starts, i)
		l.running = i
		gate := l.gate[i]
		l.mu.Unlock()
		l.started <- i
		var err error
		if gate != nil && first {
			select {
			case <-gate:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		l.mu.Lock()
		l.running = -1
		if err != nil {
			l.interrupted[i]++
		} else {
			l.completed[i]++
		}
		l.mu.Unlock()
		return err
	}
}

func (l *runLog) check(t *testing.T, starts []int, completed, interrupted map[int]int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs {
		t.Error(e)
	}
	if !slices.Equal(l.starts, starts) {
		t.Errorf("task starts %v, want %v", l.starts, starts)
	}
	for i := range l.n {
		if l.completed[i] != completed[i] || l.interrupted[i] != interrupted[i] {
			t.Errorf("node %d: %d runs finished, %d interrupted; want %d and %d", i, l.completed[i], l.interrupted[i], completed[i], interrupted[i])
		}
	}
}

// docs/DESIGN.md, "Restarts and durable state", on real TCP: a 3-node chain
// whose middle node is closed in each phase of a round and started again
// from the same StateDir. The chain completes with each task once, in
// chain order; a task interrupted by the restart follows ResumeTask (done:
// the restart was the task; rerun: it runs again, still before the Tail's;
// fail: the chain halts at the middle node, the Tail never runs). The
// neighbours never see a violation or a restarted peer: the restarted node
// is where they last saw it.
func TestMiddleRestartTCP(t *testing.T) {
	const round = "r"
	for _, tc := range []struct {
		phase  string
		policy ResumeTask
	}{
		{"before READY reached it", ResumeRerun},
		{"after READY, before START", ResumeDone},
		{"in its task", ResumeDone},
		{"in its task", ResumeRerun},
		{"in its task", ResumeFail},
		{"after its task, before the exit wave", ResumeFail},
		{"after the exit wave", ResumeRerun},
	} {
		t.Run(fmt.Sprintf("%s/resume-%v", tc.phase, tc.policy), func(t *testing.T) {
			log := newRunLog(3)
			cfgs := chainConfigs(t, 3)
			for i := range cfgs {
				cfgs[i].Task = log.task(i)
				cfgs[i].StateDir = t.TempDir()
				cfgs[i].ResumeTask = tc.policy
			}
			nodes := make([]*watched, 3)
			for i := range nodes {
				nodes[i] = startWatched(t, cfgs[i])
			}
			ready := func(i int) {
				t.Helper()
				log.markReady(i)
				if err := nodes[i].Ready(round); err != nil {
					t.Fatalf("node %d Ready: %v", i, err)
				}
			}
			restartB := func() {
				t.Helper()
				if err := nodes[1].Close(); err != nil {
					t.Fatal(err)
				}
				nodes[1] = startWatched(t, cfgs[1])
			}
			wantStarts := []int{0, 1, 2}
			wantDone := map[int]int{0: 1, 1: 1, 2: 1}
			wantIntr := map[int]int{}
			switch tc.phase {
			case "before READY reached it":
				ready(2)
				restartB()
				ready(0)
				ready(1)
			case "after READY, before START":
				ready(0)
				ready(1)
				nodes[1].waitState(t, round, protocol.StateReady)
				nodes[2].waitState(t, round, protocol.StateSync)
				restartB()
				if st := nodes[1].state(round); st != protocol.StateReady {
					t.Fatalf("restarted in state %v, want READY", st)
				}
				if err := nodes[1].Ready(round); err != nil { // a supervisor says it again: a no-op
					t.Fatalf("Ready again after the restart: %v", err)
				}
				ready(2)
			case "in its task":
				log.gate[1] = make(chan struct{}) // never opened: the restart ends the run
				for i := range 3 {
					ready(i)
				}
				recvWithin(t, log.started, 5*time.Second, "A's task")
				recvWithin(t, log.started, 5*time.Second, "B's task")
				restartB()
				wantIntr[1] = 1
				switch tc.policy {
				case ResumeDone:
					wantDone[1] = 0
				case ResumeRerun:
					wantStarts = []int{0, 1, 1, 2}
				case ResumeFail:
					res := waitResult(t, nodes[1], round, 5*time.Second)
					var te *TaskError
					if res.Status != StatusTaskFailed || !errors.As(res.Err, &te) {
						t.Fatalf("B after a restart in its task with resume fail: %v %v", res.Status, res.Err)
					}
					// The chain halts at B: A waits for the exit wave, C
					// for the COMPLETE that never comes.
					nodes[0].waitState(t, round, protocol.StateComplete)
					nodes[2].waitState(t, round, protocol.StateWatch)
					log.check(t, []int{0, 1}, map[int]int{0: 1}, wantIntr)
					return
				}
			case "after its task, before the exit wave":
				log.gate[2] = make(chan struct{})
				for i := range 3 {
					ready(i)
				}
				for range 3 {
					recvWithin(t, log.started, 5*time.Second, "the tasks up to C's")
				}
				nodes[1].waitState(t, round, protocol.StateComplete)
				restartB()
				close(log.gate[2])
			case "after the exit wave":
				for i := range 3 {
					ready(i)
				}
				nodes[1].waitDone(t, round)
				restartB()
				if rs := nodes[1].Snapshot().Rounds; len(rs) != 0 {
					t.Fatalf("restarted after its round: unfinished rounds %+v", rs)
				}
			}
			for _, w := range nodes {
				w.waitDone(t, round)
			}
			log.check(t, wantStarts, wantDone, wantIntr)
			for i, w := range []*watched{nodes[0], nodes[2]} {
				if v := w.violations(); v != 0 {
					t.Errorf("neighbour %d saw %d violations", 2*i, v)
				}
				for _, f := range w.Snapshot().Faults {
					t.Errorf("neighbour %d reported a fault: %+v", 2*i, f)
				}
			}
		})
	}
}
