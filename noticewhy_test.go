package chainsync

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
)

// docs/FAULTS.md, "Fault notices" (draft: Error Handling, a failed task):
// the failed task's error, in its own words, reaches every node of the
// chain in the fault notice: each node's log line of the fault, the
// fault its --on-fault hook hears of (the trace's Err), and the round's
// error at the Head, with an undo wave too (docs/UNDO.md). Words that
// are not printable ASCII arrive replaced.
func TestNoticeCarriesTheTaskError(t *testing.T) {
	for _, tc := range []struct {
		policy FaultPolicy
		undo   bool
	}{{FaultHalt, false}, {FaultWait, false}, {FaultHalt, true}} {
		policy := tc.policy
		name := policy.String()
		if tc.undo {
			name += "-undo"
		}
		t.Run(name, func(t *testing.T) {
			simulated(t, func(t *testing.T) {
				nw := testnet.NewNetwork()
				cfgs := simChain(t, nw, 4)
				ws := make([]*watched, 4)
				for i := range cfgs {
					cfgs[i].Heartbeat = time.Second // the extension lines: notices
					cfgs[i].FaultPolicy = policy
					if tc.undo {
						cfgs[i].Undo = func(context.Context, string, UndoInfo) error { return nil }
					}
					cfgs[i].Task = func(context.Context, string) error {
						if i == 2 {
							return errors.New("disk full\n\x1b[31mon /data caf\u00e9")
						}
						return nil
					}
					ws[i] = startWatched(t, cfgs[i])
				}
				for _, w := range ws {
					if err := w.Ready(""); err != nil {
						t.Fatal(err)
					}
				}
				var head Result
				for i, w := range ws {
					res, err := w.Wait(context.Background(), "")
					if err != nil {
						t.Fatal(err)
					}
					if i == 0 {
						head = res
					}
				}
				const want = "disk full ?[31mon /data caf?"
				if head.Err == nil || !strings.Contains(head.Err.Error(), want) || tc.undo && head.Undo == "" {
					t.Errorf("the Head's round error %v: want the task's words %q", head.Err, want)
				}
				for i, w := range ws {
					if i == 2 {
						continue // the origin: its own fault
					}
					if w.logs.count(func(e capturedLog) bool {
						return e.Level >= 0 && strings.Contains(e.Msg, "N2 reported that N2's task failed: "+want)
					}) == 0 {
						t.Errorf("N%d logged no fault with the task's words %q", i, want)
					}
					if w.tr.count(func(ev TraceEvent) bool {
						return ev.Kind == TraceFault && ev.Origin != "" && ev.Err != nil && strings.Contains(ev.Err.Error(), want)
					}) == 0 {
						t.Errorf("N%d traced no fault (its hook's) with the task's words %q", i, want)
					}
				}
			})
		})
	}
}
