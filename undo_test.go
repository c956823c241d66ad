package chainsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/internal/testnet"
)

// exitErr is a task error with an exit status (ExitCoder).
type exitErr int

func (e exitErr) Error() string { return "exited" }
func (e exitErr) ExitCode() int { return int(e) }

// TestUndoLibrarySimulated: Config.Undo on a 4-node chain on the
// simulated network, N2's task failing with status 1: N1's undo, then
// N0's, each once and told where and why the round failed; every node's
// Result carries the outcome; N2's result is its task's failure, the
// others' a fault. docs/UNDO.md, "The wave" and "Outcomes".
func TestUndoLibrarySimulated(t *testing.T) {
	simulated(t, func(t *testing.T) {
		cfgs := simChain(t, testnet.NewNetwork(), 4)
		var mu sync.Mutex
		var undos []string
		for i := range cfgs {
			cfgs[i].Task = func(ctx context.Context, round string) error {
				if i == 2 {
					return exitErr(1)
				}
				return nil
			}
			cfgs[i].Undo = func(ctx context.Context, round string, u UndoInfo) error {
				mu.Lock()
				defer mu.Unlock()
				undos = append(undos, cfgs[i].Name+" "+u.FailedNode+" "+u.Fault)
				return nil
			}
		}
		nodes := startAll(t, cfgs, []int{3, 2, 1, 0})
		for _, n := range nodes {
			if err := n.Ready(""); err != nil {
				t.Fatal(err)
			}
		}
		for i, n := range nodes {
			res, err := n.Wait(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			want := StatusFault
			if i == 2 {
				want = StatusTaskFailed
			}
			if res.Status != want || res.Undo != "failed at N2 (task exited 1); undone by N1, N0" {
				t.Errorf("N%d: %v %q (%v), want %v and the outcome", i, res.Status, res.Undo, res.Err, want)
			}
			var te *TaskError
			if i == 2 && !errors.As(res.Err, &te) {
				t.Errorf("N2's error %v is not its task's", res.Err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"N1 N2 task-failed", "N0 N2 task-failed"}; !slices.Equal(undos, want) {
			t.Errorf("undos %q, want %q", undos, want)
		}
		for _, n := range nodes {
			for _, f := range n.Snapshot().Finished {
				if !strings.Contains(f.Undo, "undone by N1, N0") {
					t.Errorf("%s's Snapshot: %+v, want the outcome", n.cfg.Name, f)
				}
			}
		}
	})
}

// TestUndoFailsLibrarySimulated: N1's undo fails with status 2: N0's never
// runs; every node's Result says the undo failed at N1, and Snapshot
// keeps an undo-failed fault naming N1. docs/UNDO.md, "When an undo fails".
func TestUndoFailsLibrarySimulated(t *testing.T) {
	simulated(t, func(t *testing.T) {
		cfgs := simChain(t, testnet.NewNetwork(), 4)
		var mu sync.Mutex
		var undos []string
		for i := range cfgs {
			cfgs[i].Task = func(ctx context.Context, round string) error {
				if i == 2 {
					return exitErr(1)
				}
				return nil
			}
			cfgs[i].Undo = func(ctx context.Context, round string, u UndoInfo) error {
				mu.Lock()
				defer mu.Unlock()
				undos = append(undos, cfgs[i].Name)
				if i == 1 {
					return exitErr(2)
				}
				return nil
			}
		}
		nodes := startAll(t, cfgs, []int{3, 2, 1, 0})
		for _, n := range nodes {
			if err := n.Ready(""); err != nil {
				t.Fatal(err)
			}
		}
		for i, n := range nodes {
			res, err := n.Wait(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res.Undo, "undo failed at N1 (exit 2)") {
				t.Errorf("N%d: outcome %q, want the undo failed at N1", i, res.Undo)
			}
			if i == 0 && res.Undo != "failed at N2; undo failed at N1 (exit 2); N0 not undone" {
				t.Errorf("N0: outcome %q", res.Undo)
			}
			found := false
			for _, f := range n.Snapshot().Faults {
				found = found || f.Kind == FaultUndoFailed && f.Peer == "N1"
			}
			if !found {
				t.Errorf("N%d keeps no undo-failed fault naming N1: %+v", i, n.Snapshot().Faults)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(undos, []string{"N1"}) {
			t.Errorf("undos %q, want N1's only", undos)
		}
	})
}

// TestUndoSnapshotSimulated: while N1's undo runs, Snapshot (and so
// /status) says so at N1, and that N0 waits for UNDO from its successor.
// docs/UNDO.md, "Outcomes".
func TestUndoSnapshotSimulated(t *testing.T) {
	simulated(t, func(t *testing.T) {
		cfgs := simChain(t, testnet.NewNetwork(), 3)
		started, release := make(chan struct{}), make(chan struct{})
		for i := range cfgs {
			cfgs[i].Task = func(ctx context.Context, round string) error {
				if i == 2 {
					return exitErr(1)
				}
				return nil
			}
			cfgs[i].Undo = func(ctx context.Context, round string, u UndoInfo) error {
				if i == 1 {
					close(started)
					<-release
				}
				return nil
			}
		}
		nodes := startAll(t, cfgs, []int{2, 1, 0})
		for _, n := range nodes {
			if err := n.Ready(""); err != nil {
				t.Fatal(err)
			}
		}
		<-started
		after(10 * time.Millisecond) // the notice reaches N0
		doing := func(n *Node) string {
			rs := n.Snapshot().Rounds
			if len(rs) != 1 {
				return fmt.Sprint(rs)
			}
			return rs[0].Doing()
		}
		if d := doing(nodes[1]); !strings.Contains(d, "running its undo") {
			t.Errorf("N1 during its undo: %q", d)
		}
		if d := doing(nodes[0]); !strings.Contains(d, "waiting for UNDO from the successor") {
			t.Errorf("N0 during N1's undo: %q", d)
		}
		close(release)
		if res, _ := nodes[0].Wait(context.Background(), ""); res.Undo != "failed at N2 (task exited 1); undone by N1, N0" {
			t.Errorf("N0: %q", res.Undo)
		}
	})
}

// TestUndoJournalsEveryFault: with a state directory, every node's journal
// records the fault its round ended with, whichever way the node learned
// it (issue: after an undo wave, `chainsync journal` showed FAULT "-" at
// the nodes that undid, and at the node whose task failed): the failing
// node task-failed, the others a fault of their own kind. docs/UNDO.md,
// "Outcomes"; docs/JOURNAL.md.
func TestUndoJournalsEveryFault(t *testing.T) {
	simulated(t, func(t *testing.T) {
		cfgs := simChain(t, testnet.NewNetwork(), 4)
		for i := range cfgs {
			cfgs[i].StateDir = t.TempDir()
			cfgs[i].Task = func(ctx context.Context, round string) error {
				if i == 2 {
					return exitErr(1)
				}
				return nil
			}
			cfgs[i].Undo = func(ctx context.Context, round string, u UndoInfo) error { return nil }
		}
		nodes := startAll(t, cfgs, []int{3, 2, 1, 0})
		for _, n := range nodes {
			if err := n.Ready(""); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range nodes {
			if _, err := n.Wait(context.Background(), ""); err != nil {
				t.Fatal(err)
			}
		}
		for i, n := range nodes {
			n.Close()
			snap, err := journal.Read(cfgs[i].StateDir)
			if err != nil {
				t.Fatal(err)
			}
			kind := snap.State.Faults[""]
			switch {
			case i == 2 && kind != string(FaultTaskFailed):
				t.Errorf("N2's journal: fault %q, want task-failed", kind)
			case kind == "":
				t.Errorf("N%d's journal records no fault for the round that failed at N2", i)
			}
		}
	})
}
