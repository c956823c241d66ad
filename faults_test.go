package chainsync

// Faults over real TCP (draft "Error Handling": detection and handling are
// left to implementations; docs/DESIGN.md "Faults" and "Heartbeats"):
// heartbeats that find a silent neighbour and blame it, heartbeat lines only
// on idle links, no false alarm during a long task, the wait policy that
// keeps a round until the neighbour speaks again, the task timeout, the
// Verify health gate (also on resume), and a connect timeout that flapping
// or refused connections do not restart.
//
// Every bound here is generous (a loaded 2-core machine under -race), and
// every negative check waits for a positive event first.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/secure"
)

// faultsOf returns the TraceFault events a node reported.
func faultsOf(w *watched) []TraceEvent { return w.tr.find(traceKind(TraceFault)) }

// waitFault waits up to d for the node's n-th fault report and returns it.
func waitFault(t *testing.T, w *watched, n int, d time.Duration) TraceEvent {
	t.Helper()
	waitCond(t, d, "node "+w.name+" to report a fault", func() bool { return len(faultsOf(w)) >= n })
	return faultsOf(w)[n-1]
}

// checkFault checks a reported fault's kind and culprit, in the trace, in
// Snapshot, and in the log at ERROR (so a --quiet node still shows it).
func checkFault(t *testing.T, w *watched, ev TraceEvent, kind FaultKind, side protocol.Side, peer string) {
	t.Helper()
	if ev.Fault != kind || ev.Side != side || ev.Peer != peer {
		t.Errorf("node %s reported fault %s blaming %v %q, want %s blaming %v %q (%v)", w.name, ev.Fault, ev.Side, ev.Peer, kind, side, peer, ev.Err)
	}
	snap := w.Snapshot()
	found := false
	for _, f := range snap.Faults {
		found = found || f.Kind == kind && f.Side == side && f.Peer == peer && f.Err != "" && !f.Time.IsZero()
	}
	if !found {
		t.Errorf("node %s: Snapshot().Faults %+v has no %s fault blaming %q", w.name, snap.Faults, kind, peer)
	}
	logged := w.logs.count(func(e capturedLog) bool {
		return e.Level == slog.LevelError && e.Attrs["kind"] == string(kind) && e.Attrs["peer"] == peer
	})
	if logged == 0 {
		t.Errorf("node %s did not log the %s fault at ERROR with peer=%q:\n%s", w.name, kind, peer, w.logs.tail(20))
	}
}

// waitResult waits for round's result at w.
func waitResult(t *testing.T, w *watched, round string, d time.Duration) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	res, err := w.Wait(ctx, round)
	if err != nil && !errors.Is(err, ErrStopped) {
		t.Fatalf("node %s round %q: no result within %v: %v", w.name, round, d, err)
	}
	return res
}

// readLineAt reads one line from r and returns it with the time it
// arrived.
func readLineAt(t *testing.T, r *testnet.Peer, d time.Duration) (string, time.Time) {
	t.Helper()
	l, err := r.Line(d)
	if err != nil {
		t.Fatal(err)
	}
	return l, time.Now()
}

// Heartbeats find a neighbour whose link stays up but which says nothing
// (stopped, hung, partitioned), within 3D + D/2 of its last line, and
// blame it by name; meanwhile the node itself keeps the idle link alive
// with HEARTBEAT lines. With the default policy (halt) the round ends with
// the fault. Both sides: a silent successor (the Head waits for START) and
// a silent predecessor (the Tail waits for COMPLETE).
func TestHeartbeatBlamesSilentNeighbourTCP(t *testing.T) {
	const d = 100 * time.Millisecond
	for _, side := range []protocol.Side{protocol.Succ, protocol.Pred} {
		t.Run(side.String(), func(t *testing.T) {
			var w *watched
			var peer *testnet.Peer
			var since time.Time // when the silent neighbour last spoke (or connected)
			if side == protocol.Succ {
				fs := testnet.ListenPeer(t)
				w = startWatched(t, Config{Name: "A", Next: fs.Addr(), NextName: "B", Heartbeat: d})
				if err := w.Ready(""); err != nil {
					t.Fatal(err)
				}
				peer = fs.Accept(t, 5*time.Second)
				since = time.Now()
				peer.Expect(t, "READY\n")
			} else {
				w = startWatched(t, Config{Name: "C", Listen: "127.0.0.1:0", PrevName: "B", Heartbeat: d})
				if err := w.Ready(""); err != nil {
					t.Fatal(err)
				}
				peer = testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
				peer.Send(t, "READY\n")
				since = time.Now()
				peer.Expect(t, "START\n")
			}
			// The node keeps the quiet link alive: HEARTBEAT, at least D
			// after its last line and at most about 1.5D.
			prev := time.Now()
			for range 2 {
				l, at := readLineAt(t, peer, 2*time.Second)
				if l != "HEARTBEAT\n" {
					t.Fatalf("got %q on the idle link, want HEARTBEAT", l)
				}
				if gap := at.Sub(prev); gap > 3*d {
					t.Errorf("HEARTBEAT %v after the previous line, want about D..1.5D (D=%v)", gap, d)
				}
				prev = at
			}
			ev := waitFault(t, w, 1, 5*time.Second)
			took := ev.Time.Sub(since)
			t.Logf("silent %s detected %v after it last spoke (D=%v, 3D+D/2=%v)", side, took.Round(time.Millisecond), d, 3*d+d/2)
			// The bound allows one more 3D: a node starved of CPU for over
			// an interval (a loaded machine under -race) rightly restarts
			// its count rather than blame a neighbour it could not hear.
			if took < 3*d-20*time.Millisecond || took > 3*d+d/2+3*d+100*time.Millisecond {
				t.Errorf("detected after %v, want 3D..3D+D/2 (%v..%v), plus slack for a starved machine", took, 3*d, 3*d+d/2)
			}
			want := map[protocol.Side]string{protocol.Succ: "B", protocol.Pred: "B"}[side]
			checkFault(t, w, ev, FaultPeerSilent, side, want)
			if !strings.Contains(ev.Err.Error(), "heartbeat") || !strings.Contains(ev.Err.Error(), want) {
				t.Errorf("fault text %q does not say it heard no heartbeat from %s", ev.Err, want)
			}
			res := waitResult(t, w, "", 5*time.Second)
			var fe *FaultError
			if res.Status != StatusFault || !errors.As(res.Err, &fe) || fe.Kind != FaultPeerSilent || fe.Side != side || fe.Peer != want {
				t.Fatalf("result %v %v, want a peer-silent fault blaming the %s %s (policy halt)", res.Status, res.Err, side, want)
			}
			if n := len(faultsOf(w)); n != 1 {
				t.Errorf("%d faults reported, want exactly 1", n)
			}
		})
	}
}

// docs/DESIGN.md "Heartbeats": HEARTBEAT goes only on a link that carried
// nothing for D. While the Tail answers a READY every 20 ms with START
// (for 5D), its link is never idle: a HEARTBEAT among the STARTs is
// allowed only where the test itself paused for D/2 or more between two
// READYs (a heartbeat sent regardless of traffic would show up every D or
// so). Once the predecessor only sends heartbeats of its own, the Tail's
// lines become heartbeats, at least D apart.
func TestHeartbeatOnlyOnIdleLinksTCP(t *testing.T) {
	const d = 200 * time.Millisecond
	const rounds = 50
	w := startWatched(t, Config{Name: "T", Listen: "127.0.0.1:0", Heartbeat: d})
	for i := range rounds {
		if err := w.Ready(roundID(i)); err != nil {
			t.Fatal(err)
		}
	}
	p := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
	type line struct {
		s  string
		at time.Time
	}
	lines := make(chan line, 256)
	go func() {
		defer close(lines)
		for {
			s, err := p.Line(10 * time.Second)
			if err != nil {
				return
			}
			lines <- line{s, time.Now()}
		}
	}()
	// Busy: a READY every 20 ms, each answered by a START.
	busyStart := time.Now()
	pauses := 0 // gaps of D/2 or more in the test's own sending
	prevSend := busyStart
	for i := range rounds {
		p.Send(t, "READY:"+roundID(i)+"\n")
		if now := time.Now(); now.Sub(prevSend) >= d/2 {
			pauses++
		}
		prevSend = time.Now()
		after(20 * time.Millisecond) // pace the READYs
	}
	busy := time.Since(busyStart)
	// Idle: the predecessor sends only heartbeats (every D/2, so the Tail
	// never finds it silent); the Tail's link now carries only HEARTBEAT.
	stop := make(chan struct{})
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		tk := time.NewTicker(d / 2)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				_ = p.TrySend([]byte("HEARTBEAT\n"))
			}
		}
	}()
	defer func() { close(stop); <-hbDone }()

	starts, among := 0, 0 // STARTs; HEARTBEATs before the last START
	var after []time.Time // HEARTBEATs after the last START
	for len(after) < 4 {
		var l line
		select {
		case l = <-lines:
		case <-time.After(10 * time.Second):
			t.Fatalf("after %d STARTs and %d HEARTBEATs, nothing more within 10s", starts, len(after))
		}
		switch {
		case strings.HasPrefix(l.s, "START:"):
			starts++
			among += len(after)
			after = after[:0]
		case l.s == "HEARTBEAT\n":
			after = append(after, l.at)
		default:
			t.Fatalf("unexpected line %q", l.s)
		}
	}
	t.Logf("%d STARTs in %v with %d heartbeats among them (the test paused %d times), then heartbeats every %v",
		starts, busy.Round(time.Millisecond), among, pauses, (after[3].Sub(after[0]) / 3).Round(time.Millisecond))
	if starts != rounds {
		t.Errorf("%d STARTs, want %d", starts, rounds)
	}
	if among > pauses+1 {
		t.Errorf("%d HEARTBEATs among the STARTs, though the link was idle for D/2 at most %d times: heartbeats were sent on a busy link", among, pauses+1)
	}
	if span := after[3].Sub(after[0]); span < 3*d*3/4 {
		t.Errorf("4 heartbeats on the idle link within %v, want them at least D (%v) apart", span, d)
	}
	if n := len(faultsOf(w)); n != 0 {
		t.Errorf("the Tail reported %d faults though its predecessor kept talking: %v", n, faultsOf(w))
	}
}

func roundID(i int) string { return fmt.Sprintf("r%d", i) }

// Draft "Error Handling", the data pipeline: processing times vary, and a
// task far longer than 3D is no fault when both ends send heartbeats. A
// four-node chain, heartbeats of 100 ms, the middle tasks run 0.8 s each
// (8 intervals): the round completes with no fault anywhere.
func TestHeartbeatNoFaultDuringLongTaskTCP(t *testing.T) {
	const d = 100 * time.Millisecond
	const task = 800 * time.Millisecond
	cfgs := chainConfigs(t, 4)
	rec := newRecorder(4)
	ws := make([]*watched, 4)
	for i := 3; i >= 0; i-- {
		cfgs[i].Heartbeat = d
		long := time.Duration(0)
		if i == 1 || i == 2 {
			long = task
		}
		cfgs[i].Task = rec.task(i, long)
		ws[i] = startWatched(t, cfgs[i])
	}
	start := time.Now()
	for i, w := range ws {
		rec.markReady("", i)
		if err := w.Ready(""); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range ws {
		w.waitDone(t, "")
	}
	took := time.Since(start)
	if took < 2*task {
		t.Fatalf("round took %v, want at least the two tasks (%v)", took, 2*task)
	}
	checkRounds(t, rec, "", 4)
	for _, w := range ws {
		if f := faultsOf(w); len(f) != 0 {
			t.Errorf("node %s reported %d faults during a long task with heartbeats on both ends: %v", w.name, len(f), f[0].Err)
		}
	}
	t.Logf("round with two %v tasks and D=%v done in %v, no fault", task, d, took.Round(time.Millisecond))
}

// Draft "Error Handling", the data pipeline's second option ("the progress
// in processing could be preserved and only the faulty node needs to be
// reset"): with FaultWait a silent successor is reported (once per
// silence) but the round is kept; when the successor speaks again the
// round carries on and completes. A second silence is a second report.
func TestFaultWaitKeepsRoundTCP(t *testing.T) {
	const d = 100 * time.Millisecond
	fs := testnet.ListenPeer(t)
	var ran atomic.Int32
	w := startWatched(t, Config{Name: "A", Next: fs.Addr(), NextName: "B", Heartbeat: d, FaultPolicy: FaultWait,
		Task: func(context.Context, string) error { ran.Add(1); return nil }})
	if err := w.Ready("r1"); err != nil {
		t.Fatal(err)
	}
	s := fs.Accept(t, 5*time.Second)
	s.Expect(t, "READY:r1\n")
	ev := waitFault(t, w, 1, 5*time.Second)
	checkFault(t, w, ev, FaultPeerSilent, protocol.Succ, "B")
	// Still silent: two more heartbeats (at least 2D) bring no second report.
	for range 2 {
		for {
			if l, _ := readLineAt(t, s, 2*time.Second); l == "HEARTBEAT\n" {
				break
			}
		}
	}
	if n := len(faultsOf(w)); n != 1 {
		t.Errorf("%d faults for one silence, want 1", n)
	}
	snap := w.Snapshot()
	if len(snap.Rounds) != 1 || snap.Rounds[0].State != protocol.StateReady || !snap.SuccUp {
		t.Fatalf("policy wait: Snapshot %+v, want round r1 still in READY with the link up", snap)
	}
	// The successor speaks again: the round goes on. Among the heartbeats
	// it has had A's fault notice (docs/DESIGN.md, "Extension lines"), and
	// now that B is heard again, the notice that the fault cleared
	// (docs/DESIGN.md, "Liveness").
	s.Send(t, "START:r1\n")
	notices, cleared := 0, 0
	for {
		l, _ := readLineAt(t, s, 5*time.Second)
		if l == "COMPLETE:r1\n" {
			break
		}
		switch l {
		case "FAULT :r1 peer-silent A B\n":
			notices++
			continue
		case "FAULT :r1 fault-cleared A B\n":
			cleared++
			continue
		}
		if l != "HEARTBEAT\n" {
			t.Fatalf("got %q, want COMPLETE:r1", l)
		}
	}
	if notices != 1 || cleared != 1 {
		t.Errorf("%d fault notices and %d cleared notices for one silence, want 1 each", notices, cleared)
	}
	// A second silence (the successor's task) is a second report, and
	// still ends nothing.
	ev2 := waitFault(t, w, 2, 5*time.Second)
	checkFault(t, w, ev2, FaultPeerSilent, protocol.Succ, "B")
	s.Send(t, "COMPLETE:r1\n")
	res := waitResult(t, w, "r1", 5*time.Second)
	if res.Status != StatusDone || ran.Load() != 1 {
		t.Fatalf("result %v %v, task ran %d times; want done, once", res.Status, res.Err, ran.Load())
	}
	if n := len(faultsOf(w)); n != 2 {
		t.Errorf("%d faults, want 2 (one per silence)", n)
	}
}

// Config.TaskTimeout bounds this node's own task: on expiry its context
// is cancelled and the round ends task-failed with TaskError.Timeout and a
// task-timeout fault that blames nobody else; the successor never runs.
// A task that ignores its context and returns nil too late also counts as
// timed out; a task within its bound is not touched.
func TestTaskTimeoutTCP(t *testing.T) {
	const limit = 150 * time.Millisecond
	cases := []struct {
		name    string
		task    func(ctx context.Context) error
		timeout bool
	}{
		{"cancelled", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, true},
		{"ignores-context", func(context.Context) error { after(2 * limit); return nil }, true},
		{"in-time", func(context.Context) error { after(limit / 10); return nil }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfgs := chainConfigs(t, 2)
			var succRan atomic.Int32
			cfgs[0].NextName, cfgs[1].PrevName = "B", "A"
			cfgs[0].TaskTimeout = limit
			cfgs[0].Task = func(ctx context.Context, _ string) error { return c.task(ctx) }
			cfgs[1].Task = func(context.Context, string) error { succRan.Add(1); return nil }
			b := startWatched(t, cfgs[1])
			a := startWatched(t, cfgs[0])
			a.Ready("")
			b.Ready("")
			start := time.Now()
			res := waitResult(t, a, "", 10*time.Second)
			if !c.timeout {
				if res.Status != StatusDone || len(faultsOf(a)) != 0 {
					t.Fatalf("a task within its timeout: %v %v, faults %d; want done, none", res.Status, res.Err, len(faultsOf(a)))
				}
				b.waitDone(t, "")
				return
			}
			var te *TaskError
			if res.Status != StatusTaskFailed || !errors.As(res.Err, &te) || !te.Timeout || !errors.Is(res.Err, context.DeadlineExceeded) {
				t.Fatalf("result %v %v, want task failed with TaskError.Timeout", res.Status, res.Err)
			}
			t.Logf("round ended %v after Ready (timeout %v): %v", time.Since(start).Round(time.Millisecond), limit, res.Err)
			ev := waitFault(t, a, 1, time.Second)
			checkFault(t, a, ev, FaultTaskTimeout, 0, "")
			// B is in WATCH, waiting for a COMPLETE that never comes.
			b.waitState(t, "", protocol.StateWatch)
			if succRan.Load() != 0 {
				t.Errorf("the successor's task ran after a timed-out task")
			}
		})
	}
}

// Config.Verify is the health gate between this node's task and its
// successor's ("the switch is back and healthy before the next one
// restarts"): COMPLETE goes on only once Verify returns nil. A Verify that
// never succeeds within TaskTimeout fails the round with task-timeout.
func TestVerifyGatesCompleteTCP(t *testing.T) {
	t.Run("healthy-later", func(t *testing.T) {
		cfgs := chainConfigs(t, 2)
		var healthy atomic.Bool
		var checks, succRan atomic.Int32
		cfgs[0].Verify = func(ctx context.Context, _ string) error {
			for !healthy.Load() {
				checks.Add(1)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(5 * time.Millisecond):
				}
			}
			return nil
		}
		cfgs[1].Task = func(context.Context, string) error { succRan.Add(1); return nil }
		b := startWatched(t, cfgs[1])
		a := startWatched(t, cfgs[0])
		a.Ready("")
		b.Ready("")
		waitCond(t, 5*time.Second, "Verify to be checked 10 times", func() bool { return checks.Load() >= 10 })
		if st := a.state(""); st != protocol.StateStart {
			t.Errorf("A is in %v while Verify fails, want START (no COMPLETE yet)", st)
		}
		if st := b.state(""); st != protocol.StateWatch || succRan.Load() != 0 {
			t.Errorf("B is in %v (task ran %d times) while A is not healthy, want WATCH and not run", st, succRan.Load())
		}
		healthy.Store(true)
		a.waitDone(t, "")
		b.waitDone(t, "")
		if succRan.Load() != 1 {
			t.Errorf("B's task ran %d times, want 1", succRan.Load())
		}
	})
	t.Run("never-healthy", func(t *testing.T) {
		cfgs := chainConfigs(t, 2)
		var succRan atomic.Int32
		cfgs[0].TaskTimeout = 200 * time.Millisecond
		cfgs[0].Verify = func(ctx context.Context, _ string) error {
			<-ctx.Done()
			return errors.New("switch not back: " + ctx.Err().Error())
		}
		cfgs[1].Task = func(context.Context, string) error { succRan.Add(1); return nil }
		b := startWatched(t, cfgs[1])
		a := startWatched(t, cfgs[0])
		a.Ready("")
		b.Ready("")
		res := waitResult(t, a, "", 10*time.Second)
		var te *TaskError
		if res.Status != StatusTaskFailed || !errors.As(res.Err, &te) || !te.Timeout {
			t.Fatalf("result %v %v, want task failed by the timeout", res.Status, res.Err)
		}
		checkFault(t, a, waitFault(t, a, 1, time.Second), FaultTaskTimeout, 0, "")
		b.waitState(t, "", protocol.StateWatch)
		if succRan.Load() != 0 {
			t.Errorf("B's task ran though A never became healthy")
		}
	})
}

// docs/DESIGN.md "Restarts and durable state", the switch stack: the task
// restarts the node (here: the node is closed while its task runs); the
// restarted node, with ResumeDone, takes the task as done but still runs
// Verify before sending COMPLETE on, and never runs the task again.
func TestVerifyOnResumeDoneTCP(t *testing.T) {
	dir := t.TempDir()
	fs := testnet.ListenPeer(t)
	started := make(chan struct{}, 1)
	var ran atomic.Int32
	task := func(ctx context.Context, _ string) error {
		ran.Add(1)
		started <- struct{}{}
		<-ctx.Done() // the "reboot" ends it
		return ctx.Err()
	}
	cfg := Config{Name: "A", Next: fs.Addr(), NextName: "B", StateDir: dir, ResumeTask: ResumeDone, Task: task}
	a := startWatched(t, cfg)
	a.Ready("")
	s := fs.Accept(t, 5*time.Second)
	s.Expect(t, "READY\n")
	s.Send(t, "START\n")
	recvWithin(t, started, 5*time.Second, "the task to start")
	a.Close() // the node dies in its task

	healthy := make(chan struct{})
	var checks atomic.Int32
	cfg.Verify = func(ctx context.Context, _ string) error {
		checks.Add(1)
		select {
		case <-healthy:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	a2 := startWatched(t, cfg)
	s2 := fs.Accept(t, 5*time.Second)
	s2.Expect(t, "READY\n") // the re-send after reconnecting
	waitCond(t, 5*time.Second, "Verify to run on resume", func() bool { return checks.Load() == 1 })
	s2.Quiet(t, 200*time.Millisecond) // no COMPLETE before healthy
	close(healthy)
	s2.Expect(t, "COMPLETE\n")
	s2.Send(t, "COMPLETE\n")
	if res := waitResult(t, a2, "", 5*time.Second); res.Status != StatusDone {
		t.Fatalf("resumed round: %v %v, want done", res.Status, res.Err)
	}
	if ran.Load() != 1 || checks.Load() != 1 {
		t.Errorf("task ran %d times, Verify %d times; want 1 and 1", ran.Load(), checks.Load())
	}
}

// --connect-timeout counts from when the neighbour was last healthy
// (issue: "a connection that is refused, fails authentication or flaps
// does not reset it"). The successor answers the round, then goes away;
// something at its address keeps accepting connections and closing them
// at once. The Head reports the successor unreachable ConnectTimeout after
// it was last healthy, however many flaps came in between.
func TestConnectTimeoutIgnoresFlapsTCP(t *testing.T) {
	const ct = 600 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := startWatched(t, Config{Name: "A", Next: ln.Addr().String(), NextName: "B", ConnectTimeout: ct,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 40 * time.Millisecond})
	a.Ready("")
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s := testnet.NewPeer(t, c)
	s.Expect(t, "READY\n")
	s.Send(t, "START\n")
	s.Expect(t, "COMPLETE\n")
	s.Reset() // the switch goes down, healthy until now
	lastHealthy := time.Now()
	var flaps atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			flaps.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	ev := waitFault(t, a, 1, 10*time.Second)
	took := ev.Time.Sub(lastHealthy)
	t.Logf("peer-unreachable %v after the successor was last healthy, %d flapping connections in between (--connect-timeout %v)", took.Round(time.Millisecond), flaps.Load(), ct)
	checkFault(t, a, ev, FaultPeerUnreachable, protocol.Succ, "B")
	if flaps.Load() < 3 {
		t.Errorf("only %d flapping connections before the fault: the test did not flap", flaps.Load())
	}
	if took < ct-20*time.Millisecond || took > ct+500*time.Millisecond {
		t.Errorf("fault %v after the successor was last healthy, want about %v", took, ct)
	}
}

// The predecessor's side: after the real predecessor goes away, strangers
// keep connecting to the listen port and are refused (bad first line) or
// hang up without a line. None of them restarts ConnectTimeout: the Tail
// reports its predecessor unreachable ConnectTimeout after it was last
// healthy.
func TestConnectTimeoutIgnoresRefusedTCP(t *testing.T) {
	const ct = 600 * time.Millisecond
	w := startWatched(t, Config{Name: "C", Listen: "127.0.0.1:0", PrevName: "B", ConnectTimeout: ct})
	w.Ready("")
	p := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
	p.Send(t, "READY\n")
	p.Expect(t, "START\n")
	p.Reset()
	lastHealthy := time.Now()
	stop := make(chan struct{})
	done := make(chan struct{})
	var strangers atomic.Int32
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			c, err := net.DialTimeout("tcp", w.Addr().String(), time.Second)
			if err != nil {
				continue
			}
			strangers.Add(1)
			if i%2 == 0 {
				_, _ = c.Write([]byte("GARBAGE\n"))
				_ = c.SetReadDeadline(time.Now().Add(time.Second))
				_, _ = c.Read(make([]byte, 1)) // until the node closes it
			}
			c.Close()
		}
	}()
	defer func() { close(stop); <-done }()
	ev := waitFault(t, w, 1, 10*time.Second)
	took := ev.Time.Sub(lastHealthy)
	refused := w.violations()
	t.Logf("peer-unreachable %v after the predecessor was last healthy; %d strangers, %d refused (--connect-timeout %v)", took.Round(time.Millisecond), strangers.Load(), refused, ct)
	checkFault(t, w, ev, FaultPeerUnreachable, protocol.Pred, "B")
	if refused < 3 {
		t.Errorf("only %d refused connections before the fault: the test did not refuse", refused)
	}
	if took < ct-20*time.Millisecond || took > ct+500*time.Millisecond {
		t.Errorf("fault %v after the predecessor was last healthy, want about %v", took, ct)
	}
	res := waitResult(t, w, "", 5*time.Second)
	var fe *FaultError
	if res.Status != StatusFault || !errors.As(res.Err, &fe) || fe.Kind != FaultPeerUnreachable || fe.Peer != "B" {
		t.Errorf("result %v %v, want a peer-unreachable fault blaming B", res.Status, res.Err)
	}
}

// A successor keeps a new connection pending, saying nothing on it, until
// the first protocol line arrives (HEARTBEAT is none), so its silence
// before this node has told it anything is no fault. Found end to end: a
// middle node opened the round (its predecessor's READY) but was not
// locally ready yet (a person had not approved), and after 3D it blamed
// its healthy successor. Here E waits for approval for at least 5
// heartbeat intervals, then the round completes with no fault anywhere.
func TestHeartbeatNoFaultBeforeFirstLineTCP(t *testing.T) {
	const d = 60 * time.Millisecond
	f := startWatched(t, Config{Name: "F", Listen: "127.0.0.1:0", PrevName: "E", Heartbeat: d})
	e := startWatched(t, Config{Name: "E", Listen: "127.0.0.1:0", PrevName: "D", Next: f.Addr().String(), NextName: "F", Heartbeat: d})
	f.Ready("")
	p := testnet.DialPeer(t, e.Addr().String(), 5*time.Second)
	p.Send(t, "READY\n")
	stop := make(chan struct{})
	hbDone := make(chan struct{})
	go func() { // the predecessor keeps its own side alive
		defer close(hbDone)
		tk := time.NewTicker(d / 2)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				_ = p.TrySend([]byte("HEARTBEAT\n"))
			}
		}
	}()
	defer func() { close(stop); <-hbDone }()
	waitCond(t, 5*time.Second, "E to open the round and its link to F", func() bool {
		return e.state("") == protocol.StateSync && e.Snapshot().SuccUp
	})
	for range 5 { // E's heartbeats to D: at least 5D of waiting for approval
		p.Expect(t, "HEARTBEAT\n")
	}
	if fs := faultsOf(e); len(fs) != 0 {
		t.Fatalf("E, not yet ready, blamed %s: %v", fs[0].Peer, fs[0].Err)
	}
	e.Ready("")
	for {
		l, _ := readLineAt(t, p, 5*time.Second)
		if l == "START\n" {
			break
		}
		if l != "HEARTBEAT\n" {
			t.Fatalf("got %q, want START", l)
		}
	}
	p.Send(t, "COMPLETE\n")
	f.waitDone(t, "")
	e.waitDone(t, "")
	for _, w := range []*watched{e, f} {
		if fs := faultsOf(w); len(fs) != 0 {
			t.Errorf("%s reported %v", w.name, fs[0].Err)
		}
	}
}

// A would-be predecessor that fails authentication (a node with the wrong
// pre-shared key, dialing again and again) does not restart
// ConnectTimeout either: the Tail reports its real predecessor unreachable
// ConnectTimeout after that predecessor was last healthy.
func TestConnectTimeoutIgnoresFailedAuthTCP(t *testing.T) {
	const ct = 600 * time.Millisecond
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	for _, f := range []string{good, bad} {
		if err := secure.WritePSKFile(f, false); err != nil {
			t.Fatal(err)
		}
	}
	c := startWatched(t, Config{Name: "C", Listen: "127.0.0.1:0", PrevName: "B", ConnectTimeout: ct,
		Secure: mustLoad(t, secure.Options{PSKFile: good, SelfName: "C", PrevName: "B"})})
	c.Ready("")
	started := make(chan struct{}, 1)
	b := startWatched(t, Config{Name: "B", Next: c.Addr().String(), NextName: "C",
		Secure: mustLoad(t, secure.Options{PSKFile: good, SelfName: "B", NextName: "C"}),
		Task:   func(ctx context.Context, _ string) error { started <- struct{}{}; <-ctx.Done(); return ctx.Err() }})
	b.Ready("")
	recvWithin(t, started, 5*time.Second, "B's task to start")
	c.waitState(t, "", protocol.StateWatch)
	b.Close() // the real predecessor goes away, healthy until now
	lastHealthy := time.Now()
	startWatched(t, Config{Name: "B", Next: c.Addr().String(), NextName: "C",
		BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		Secure: mustLoad(t, secure.Options{PSKFile: bad, SelfName: "B", NextName: "C"})}).Ready("")
	ev := waitFault(t, c, 1, 10*time.Second)
	took := ev.Time.Sub(lastHealthy)
	refused := c.tr.count(traceSideKind(TraceViolation, protocol.Pred))
	t.Logf("peer-unreachable %v after the predecessor was last healthy; %d connections failed authentication meanwhile", took.Round(time.Millisecond), refused)
	checkFault(t, c, ev, FaultPeerUnreachable, protocol.Pred, "B")
	if refused < 3 {
		t.Errorf("only %d failed authentications before the fault: the impostor did not knock", refused)
	}
	if took < ct-20*time.Millisecond || took > ct+500*time.Millisecond {
		t.Errorf("fault %v after the predecessor was last healthy, want about %v", took, ct)
	}
}

// FaultWait with ConnectTimeout (draft "Error Handling", the pipeline's
// second option): the successor goes away and nothing listens at its
// address; after ConnectTimeout the Head reports it unreachable, once,
// and keeps the round. When the successor is back (restarted at the same
// address) the Head re-sends its READY and the round completes, its task
// run once.
func TestFaultWaitUnreachableComesBackTCP(t *testing.T) {
	const ct = 300 * time.Millisecond
	// A port below the ephemeral range, so that no outgoing connection
	// takes it while nothing listens there.
	addr := testnet.FreeAddrs(t, 1)[0]
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	a := startWatched(t, Config{Name: "A", Next: addr, NextName: "B", ConnectTimeout: ct, FaultPolicy: FaultWait,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		Task: func(context.Context, string) error { ran.Add(1); return nil }})
	a.Ready("")
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s := testnet.NewPeer(t, c)
	s.Expect(t, "READY\n")
	ln.Close()
	s.Reset() // gone: nothing listens at its address any more
	ev := waitFault(t, a, 1, 5*time.Second)
	checkFault(t, a, ev, FaultPeerUnreachable, protocol.Succ, "B")
	if st := a.state(""); st != protocol.StateReady {
		t.Fatalf("policy wait: the round is in %v after the fault, want still READY", st)
	}
	// Back, at the same address.
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	t.Cleanup(func() { ln2.Close() })
	_ = ln2.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	c2, err := ln2.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s2 := testnet.NewPeer(t, c2)
	s2.Expect(t, "READY\n") // the re-send
	s2.Send(t, "START\n")
	s2.Expect(t, "COMPLETE\n")
	s2.Send(t, "COMPLETE\n")
	if res := waitResult(t, a, "", 5*time.Second); res.Status != StatusDone || ran.Load() != 1 {
		t.Fatalf("result %v %v, task ran %d times; want done, once", res.Status, res.Err, ran.Load())
	}
	if n := len(faultsOf(a)); n != 1 {
		t.Errorf("%d faults, want 1 (one report per outage)", n)
	}
}

// docs/DESIGN.md "Heartbeats" and "Extension lines": both ends must enable
// them. A node without heartbeats that gets HEARTBEAT from its predecessor
// reports a configuration mismatch (a fault, once, naming the missing
// setting), not bad input to be warned about on every reconnect, and
// closes the connection. Under FaultWait its state does not move; under
// FaultHalt the round ends with the fault.
func TestHeartbeatToNodeWithoutHeartbeats(t *testing.T) {
	for _, policy := range []FaultPolicy{FaultWait, FaultHalt} {
		t.Run(policy.String(), func(t *testing.T) {
			w := startWatched(t, Config{Name: "C", Listen: "127.0.0.1:0", PrevName: "B", FaultPolicy: policy})
			w.Ready("")
			p := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
			p.Send(t, "READY\n")
			p.Expect(t, "START\n")
			p.Send(t, "HEARTBEAT\n")
			ev := waitFault(t, w, 1, 5*time.Second)
			checkFault(t, w, ev, FaultConfigMismatch, protocol.Pred, "B")
			if !strings.Contains(ev.Err.Error(), "--heartbeat") {
				t.Errorf("the mismatch does not name the setting: %v", ev.Err)
			}
			p.AwaitClosed(t, 5*time.Second)
			if policy == FaultWait {
				if st := w.state(""); st != protocol.StateWatch {
					t.Errorf("state %v after a HEARTBEAT, want WATCH unchanged", st)
				}
				// It comes back and does it again: still one report.
				p2 := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
				p2.Send(t, "HEARTBEAT\n")
				p2.AwaitClosed(t, 5*time.Second)
				if n := len(faultsOf(w)); n != 1 {
					t.Errorf("%d faults for one mismatch, want 1", n)
				}
				return
			}
			if res := waitResult(t, w, "", 5*time.Second); res.Status != StatusFault {
				t.Errorf("halt: result %v, want fault", res.Status)
			}
		})
	}
}
