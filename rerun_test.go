package chainsync

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/internal/testnet"
	"github.com/chainsync-go/chainsync/protocol"
)

// docs/DESIGN.md, "Restarts and durable state": a round a node finds
// aborted when it restarts (it died after the abort, before it ended
// normally) reports the fault it really ended with, through the log, the
// trace and so the hook, not an empty kind; the trace marks it Resumed, so
// that counters (docs/OPERATIONS.md, "Counters across restarts") do not
// count it again.
func TestResumeAbortedReportsKind(t *testing.T) {
	dir := t.TempDir()
	j, _, err := journal.Open(dir, journal.Header{Role: "head", Name: "A"})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Save([]protocol.Record{{Round: "r1", State: protocol.StateAborted, LocalReady: true, LastSucc: protocol.Ready}}); err != nil {
		t.Fatal(err)
	}
	if err := j.SaveFault("r1", string(FaultPeerSilent)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	var mu sync.Mutex
	var faults []TraceEvent
	n, err := Start(Config{Name: "A", Next: "127.0.0.1:1", Rounds: []string{"r1"}, StateDir: dir,
		Trace: func(ev TraceEvent) {
			if ev.Kind == TraceFault {
				mu.Lock()
				faults = append(faults, ev)
				mu.Unlock()
			}
		}})
	res, err := resumedResult(t, n, err, "r1")
	var fe *FaultError
	if err != nil || res.Status != StatusFault || !errors.As(res.Err, &fe) || fe.Kind != FaultPeerSilent {
		t.Fatalf("resumed aborted round: %+v, %v; want a peer-silent fault", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(faults) != 1 || faults[0].Fault != FaultPeerSilent || !faults[0].Resumed {
		t.Errorf("traced faults %+v, want one peer-silent (the hook's), marked Resumed (counters skip it)", faults)
	}
}

// docs/FAULTS.md, "Undelivered rounds": a round this node had sent its
// COMPLETE on for, ended by a fault notice that a task failed further
// down the chain, is a fault (no task after that node ran), not
// undelivered; restarted on its journal, the node still knows who found
// what, and says the same.
func TestResumeHaltedElsewhereIsNoUndelivered(t *testing.T) {
	dir := t.TempDir()
	j, _, err := journal.Open(dir, journal.Header{Role: "head", Name: "A"})
	if err != nil {
		t.Fatal(err)
	}
	rec := protocol.Record{Round: "r1", State: protocol.StateAborted, LocalReady: true, Started: true, LastSucc: protocol.Complete}
	if rec.Outcome() != protocol.NoExitWave {
		t.Fatalf("the record's outcome is %v, want NoExitWave", rec.Outcome())
	}
	f := journalFault("r1", FaultChainHalted, &FaultError{Kind: FaultChainHalted, Origin: "C", Cause: FaultTaskFailed})
	if f.Origin != "C" || f.Cause != string(FaultTaskFailed) {
		t.Fatalf("journalFault kept %+v, want C and task-failed", f)
	}
	if err := j.SaveAll([]journal.Fault{f}, []protocol.Record{rec}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	n, err := Start(Config{Name: "A", Next: "127.0.0.1:1", Chain: []string{"A", "B", "C", "D"}, Rounds: []string{"r1"}, StateDir: dir})
	res, err := resumedResult(t, n, err, "r1")
	var fe *FaultError
	if err != nil || res.Status != StatusFault || !errors.As(res.Err, &fe) || fe.Origin != "C" || fe.Cause != FaultTaskFailed {
		t.Fatalf("resumed round: %+v, %v; want a fault C found (task-failed), not undelivered", res, err)
	}
}

// docs/DESIGN.md, "Restarts and durable state": a node that ended
// normally with every round over records it; started again on the same
// state directory for the same rounds it refuses (ErrAlreadyEnded) and
// says what to do; for a new round it starts.
func TestRerunRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Name: "S", Rounds: []string{"r1"}, StateDir: dir,
		Task: func(context.Context, string) error { return nil }}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Ready("r1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if res, err := n.Wait(ctx, "r1"); err != nil || res.Status != StatusDone {
		t.Fatalf("%+v %v", res, err)
	}
	n.Close()
	_, err = Start(cfg)
	if !errors.Is(err, ErrAlreadyEnded) || !strings.Contains(err.Error(), "round r1 already ended (done at ") ||
		!strings.Contains(err.Error(), "a new rollout needs a new --round or a fresh --state-dir") {
		t.Fatalf("rerun: %v, want ErrAlreadyEnded saying what to do", err)
	}
	cfg.Rounds = []string{"r2"}
	n2, err := Start(cfg)
	if err != nil {
		t.Fatalf("a new round on the same directory: %v", err)
	}
	n2.Close()
}

// resumedResult is round's result at n, started (with err) on a journal
// that says the round ended; n is closed when the test ends.
func resumedResult(t *testing.T, n *Node, err error, round string) (Result, error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return n.Wait(ctx, round)
}

// docs/RESTARTS.md with docs/FAULTS.md ("Fault notices"): a node
// restarted while its task ran fails the round (ResumeFail) before its
// links are up; its fault notice is owed to each neighbour
// (Snapshot.NoticesOwed) until that link comes up, and a Close right
// after it went still delivers it: the successor reads the notice, then
// the end of the stream.
func TestResumeFailNoticeOutlivesClose(t *testing.T) {
	for i := range 10 { // Close races the link's first write
		dir := t.TempDir()
		j, _, err := journal.Open(dir, journal.Header{Role: "middle", Name: "B"})
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Save([]protocol.Record{{Round: "r1", State: protocol.StateStart, LocalReady: true, PredReady: true, StartRecv: true,
			LastPred: protocol.Start, LastSucc: protocol.Ready, RecvPred: protocol.Ready, RecvSucc: protocol.Start}}); err != nil {
			t.Fatal(err)
		}
		j.Close()
		succ := testnet.ListenPeer(t)
		n, err := Start(Config{Name: "B", Chain: []string{"A", "B", "C"}, Listen: freeAddrs(t, 1)[0], Prev: "127.0.0.1:1", Next: succ.Addr(),
			Heartbeat: 300 * time.Millisecond, StateDir: dir, Rounds: []string{"r1"}})
		res, err := resumedResult(t, n, err, "r1")
		if err != nil || res.Status != StatusTaskFailed {
			t.Fatalf("run %d: resumed round %+v, %v; want its task failed (ResumeFail)", i, res, err)
		}
		waitCond(t, 5*time.Second, "the notice to the successor to go", func() bool {
			return !slices.Contains(n.Snapshot().NoticesOwed, protocol.Succ)
		})
		if !slices.Contains(n.Snapshot().NoticesOwed, protocol.Pred) {
			t.Errorf("run %d: NoticesOwed %v, want the predecessor's (its link never came up)", i, n.Snapshot().NoticesOwed)
		}
		n.Close()
		p := succ.Accept(t, 5*time.Second)
		_ = p.ExpectErr("EOF", 5*time.Second)
		if got := p.Received(); !strings.Contains(got, "FAULT :r1 task-failed B B") {
			t.Fatalf("run %d: the successor read %q, no fault notice", i, got)
		}
	}
}

// docs/OPERATIONS.md: a node that cannot listen says why; "is another
// process using the port?" only when it is (EADDRINUSE), not for an
// address this machine does not have.
func TestListenFailureHint(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for addr, hint := range map[string]bool{taken.Addr().String(): true, "192.0.2.1:7000": false} {
		n, err := Start(Config{Name: "B", Listen: addr, Prev: "127.0.0.1:1"})
		if err == nil {
			n.Close()
			t.Fatalf("Start listening on %s: no error", addr)
		}
		if got := strings.Contains(err.Error(), "is another process using the port?"); got != hint {
			t.Errorf("listen on %s: %v; want the port hint %v", addr, err, hint)
		}
	}
}
