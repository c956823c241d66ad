package protocol_test

import (
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync/internal/sim"
	"github.com/chainsync-go/chainsync/protocol"
)

// TestNoExitWaveOutcome: over timed schedules (the halt policy ends rounds
// on timeouts), a round aborted after the node's COMPLETE went on to its
// successor ends NoExitWave, and the Checker holds the Machine to it. Two
// seeded bugs prove the Checker is not vacuous: one reports such a round
// Aborted (a Head calling a round failed whose later tasks may have run),
// the other reports NoExitWave for a round aborted before its COMPLETE
// went on.
//
// docs/FAULTS.md, "Undelivered rounds"; docs/DESIGN.md, "Time".
func TestNoExitWaveOutcome(t *testing.T) {
	const seeds = 400
	run := func(seed uint64, mutate func(acts []protocol.Action) ([]protocol.Action, bool)) (fired bool, seen int, err error) {
		res := runScheduleExt(seed, 2+int(seed%5), nil, &schedExt{durable: true, faults: true, timed: true,
			setup: func(net *sim.Network, fail func(error)) {
				hook := net.Hook
				net.Hook = func(node int, ev protocol.Event, acts []protocol.Action, err error) {
					for _, a := range acts {
						if a.Kind == protocol.ActDone && a.Outcome == protocol.NoExitWave {
							seen++
						}
					}
					hook(node, ev, acts, err)
				}
				if mutate != nil {
					net.Mutate = func(_ int, _ protocol.Event, acts []protocol.Action) []protocol.Action {
						acts, f := mutate(acts)
						fired = fired || f
						return acts
					}
				}
			}})
		return fired, seen, res.err
	}
	total := 0
	for seed := uint64(1); seed <= seeds; seed++ {
		_, seen, err := run(seed, nil)
		if err != nil {
			t.Fatalf("seed %d: the correct Machine was rejected: %v", seed, err)
		}
		total += seen
	}
	if total < 10 {
		t.Fatalf("only %d rounds ended NoExitWave in %d schedules; the test proves too little", total, seeds)
	}
	t.Logf("%d rounds ended NoExitWave in %d schedules", total, seeds)
	bugs := []struct {
		name, want string
		from, to   protocol.Outcome
	}{
		{"no exit wave reported aborted", "want no exit wave", protocol.NoExitWave, protocol.Aborted},
		{"aborted reported as no exit wave", "no-exit-wave outcome for a round whose COMPLETE did not go on", protocol.Aborted, protocol.NoExitWave},
	}
	for _, bug := range bugs {
		t.Run(bug.name, func(t *testing.T) {
			fired := 0
			for seed := uint64(1); seed <= seeds; seed++ {
				f, _, err := run(seed, func(acts []protocol.Action) ([]protocol.Action, bool) {
					changed := false
					for k := range acts {
						if acts[k].Kind == protocol.ActDone && acts[k].Outcome == bug.from {
							acts[k].Outcome, changed = bug.to, true
						}
					}
					return acts, changed
				})
				if !f {
					continue
				}
				fired++
				if err == nil || !strings.Contains(err.Error(), bug.want) {
					t.Fatalf("seed %d: the bug fired; the Checker said %v, want %q", seed, err, bug.want)
				}
			}
			if fired < 10 {
				t.Fatalf("the bug fired in only %d of %d schedules", fired, seeds)
			}
			t.Logf("fired and caught in %d of %d schedules", fired, seeds)
		})
	}
}
