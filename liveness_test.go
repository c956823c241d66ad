package chainsync

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
	"github.com/chainsync-go/chainsync/protocol"
)

// Tests of liveness in the library (docs/DESIGN.md, "Liveness: a restart
// is not a death"), on the simulated network under testing/synctest.

// tracesOf returns w's trace events of kind.
func tracesOf(w *watched, kind TraceKind) []TraceEvent { return w.tr.find(traceKind(kind)) }

// pages counts w's fault reports that page (not Again) blaming peer.
func pages(w *watched, peer string) int {
	k := 0
	for _, ev := range tracesOf(w, TraceFault) {
		if ev.Peer == peer && !ev.Again {
			k++
		}
	}
	return k
}

// docs/DESIGN.md "Liveness": RestartGrace travels on the extension lines,
// so it needs Heartbeat, and is bounded by what the wire carries.
func TestRestartGraceConfig(t *testing.T) {
	for _, c := range []Config{{RestartGrace: time.Minute}, {RestartGrace: -time.Second, Heartbeat: time.Second},
		{RestartGrace: protocol.MaxGrace + time.Hour, Heartbeat: time.Second}} {
		var ce *ConfigError
		if err := c.Validate(); !errors.As(err, &ce) || ce.Field != "RestartGrace" {
			t.Errorf("Validate(RestartGrace %v, Heartbeat %v) = %v, want a RestartGrace error", c.RestartGrace, c.Heartbeat, err)
		}
	}
	if err := (&Config{RestartGrace: time.Minute, Heartbeat: time.Second}).Validate(); err != nil {
		t.Errorf("RestartGrace with Heartbeat: %v", err)
	}
}

// docs/DESIGN.md "Liveness": under FaultWait a partition between N0 and
// N1 is reported by both (one page each for the other), N2 hears of N1's
// report (one page for N0); when the partition heals and the held lines (the late
// notices) come through, every node's fault clears once (TraceFaultCleared),
// nobody is paged again, the faults leave Snapshot, and each node's words
// say what it knows (after how long, or who heard the node back).
func TestFaultClearsOncePartitionSimulated(t *testing.T) {
	simulated(t, func(t *testing.T) {
		const d = time.Second
		nw := testnet.NewNetwork()
		cfgs := simChain(t, nw, 3)
		ws := make([]*watched, 3)
		for i := range cfgs {
			cfgs[i].Heartbeat, cfgs[i].FaultPolicy = d, FaultWait
			ws[i] = startWatched(t, cfgs[i])
		}
		for _, w := range ws[:2] {
			if err := w.Ready(""); err != nil {
				t.Fatal(err)
			}
		}
		// The round waits for the Tail's readiness, and N0's READY has
		// reached N1 (its first dial may have come before N1 listened).
		ws[1].waitState(t, "", protocol.StateReady)
		synctest.Wait()
		nw.Partition(simHost(0), simHost(1))
		after(10 * d)
		for i, blamed := range []string{"N1", "N0", "N0"} {
			if k := pages(ws[i], blamed); k != 1 {
				t.Errorf("%s paged %d times for %s during the partition, want once", ws[i].name, k, blamed)
			}
		}
		nw.Heal(simHost(0), simHost(1))
		after(10 * d)
		for i, blamed := range []string{"N1", "N0", "N0"} {
			w := ws[i]
			cleared := 0
			for _, ev := range tracesOf(w, TraceFaultCleared) {
				if ev.Peer == blamed {
					cleared++
				}
			}
			if cleared != 1 {
				t.Errorf("%s: the fault of %s cleared %d times, want once", w.name, blamed, cleared)
			}
			if k := pages(w, blamed); k != 1 {
				t.Errorf("%s paged %d times for %s in all, want once", w.name, k, blamed)
			}
			for _, f := range w.Snapshot().Faults {
				if f.Peer == blamed {
					t.Errorf("%s: a fault of %s is still in Snapshot after it cleared: %+v", w.name, blamed, f)
				}
			}
			// N0 and N1 heard each other back and say after how long; N2
			// was told by N1's notice and says so (issue: it said "N0 is
			// back after 0s", the time since it had been told).
			want := "fault cleared: " + blamed + " is back after"
			if i == 2 {
				want = "fault cleared: N0 is back: N1 hears from it again"
			}
			if w.logs.count(func(e capturedLog) bool {
				return e.Level == slog.LevelWarn && strings.HasPrefix(e.Msg, want)
			}) != 1 {
				t.Errorf("%s did not log %q once at WARN", w.name, want)
			}
		}
		if err := ws[2].Ready(""); err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if res := waitResult(t, w, "", time.Minute); res.Status != StatusDone {
				t.Errorf("%s: round %v, want done", w.name, res.Status)
			}
		}
	})
}

// docs/DESIGN.md "Liveness": N1's task is its restart. Within its grace
// nobody reports it, and every node's Snapshot says it is restarting;
// once the grace has passed N0 and N2 report it, naming the grace, and
// under halt the round ends as a fault there.
func TestRestartGraceSimulated(t *testing.T) {
	simulated(t, func(t *testing.T) {
		const grace = 10 * time.Second
		nw := testnet.NewNetwork()
		cfgs := simChain(t, nw, 3)
		started := make(chan struct{})
		cfgs[1].Task = func(ctx context.Context, _ string) error {
			close(started)
			<-ctx.Done() // the node dies inside its task
			return ctx.Err()
		}
		ws := make([]*watched, 3)
		for i := range cfgs {
			cfgs[i].Heartbeat = 500 * time.Millisecond
			if i == 1 {
				cfgs[i].RestartGrace = grace
			}
			ws[i] = startWatched(t, cfgs[i])
		}
		for _, w := range ws {
			if err := w.Ready(""); err != nil {
				t.Fatal(err)
			}
		}
		<-started
		announced := time.Now()
		synctest.Wait()
		for _, i := range []int{0, 2} {
			rs := ws[i].Snapshot().Restarting
			if len(rs) != 1 || rs[0].Node != "N1" || rs[0].Grace != grace || !strings.HasPrefix(rs[0].String(), "N1 is restarting (grace 10s, ") {
				t.Fatalf("%s: Restarting %+v, want N1's grace of 10s", ws[i].name, rs)
			}
		}
		ws[1].Close() // gone: its links close, its heartbeats stop
		after(grace - time.Second)
		for _, i := range []int{0, 2} {
			if fs := tracesOf(ws[i], TraceFault); len(fs) != 0 {
				t.Fatalf("%s reported %v within N1's grace", ws[i].name, fs[0].Err)
			}
		}
		for _, i := range []int{0, 2} {
			ev := waitFault(t, ws[i], 1, time.Minute)
			if ev.Fault != FaultPeerUnreachable || ev.Peer != "N1" || !strings.Contains(ev.Err.Error(), "N1 did not come back within the restart grace (10s)") {
				t.Errorf("%s reported %s blaming %q: %v", ws[i].name, ev.Fault, ev.Peer, ev.Err)
			}
			if took := ev.Time.Sub(announced); took < grace || took > grace+time.Second {
				t.Errorf("%s reported N1 %v after its announcement, want the grace (%v) and at most a tick more", ws[i].name, took, grace)
			}
			if res := waitResult(t, ws[i], "", time.Minute); res.Status == StatusDone {
				t.Errorf("%s: round done, want it ended by the fault", ws[i].name)
			}
		}
	})
}
