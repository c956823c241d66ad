package chainsync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
	"github.com/chainsync-go/chainsync/protocol"
)

// docs/FAULTS.md, "Fault notices": a round ended by another node's fault
// says so in words ("fault elsewhere in the chain (chain-fault)"), not
// "chain-fault fault", which `chainsync open --wait` printed; a node's
// own fault keeps its kind ("peer-silent fault").
func TestFaultErrorWords(t *testing.T) {
	for _, tc := range []struct {
		e    FaultError
		want string
		not  string
	}{
		{FaultError{Round: "r1", State: protocol.StateStart, Kind: FaultChainFault, Reason: "C reported that C's task failed"},
			"chainsync: fault elsewhere in the chain (chain-fault) in round r1 (state START): C reported", "chain-fault fault"},
		{FaultError{Round: "r1", State: protocol.StateReady, Kind: FaultChainHalted, Reason: "C reported that C's task failed"},
			"chainsync: fault elsewhere in the chain (chain-halted) in round r1", "chain-halted fault"},
		{FaultError{Round: "r1", State: protocol.StateReady, Kind: FaultPeerSilent, Side: protocol.Succ, Peer: "C", Reason: "no line for 3s"},
			"chainsync: peer-silent fault in round r1 (state READY): no line for 3s (blames the succ C)", ""},
		{FaultError{Kind: FaultConfigMismatch, Reason: "B's --chain differs"},
			"chainsync: config-mismatch fault: B's --chain differs", ""},
	} {
		got := tc.e.Error()
		if !strings.HasPrefix(got, tc.want) || tc.not != "" && strings.Contains(got, tc.not) {
			t.Errorf("%s: Error() = %q, want it to start with %q", tc.e.Kind, got, tc.want)
		}
	}
}

// docs/FAULTS.md, "Fault notices": under halt a notice that a task failed
// further down the chain says, at each node, what it means for that
// node's own task (issue: "this node runs no task in the round" at nodes
// that had run theirs): N0 and N1 had run theirs, N3 runs none.
func TestHaltSaysWhatBecameOfTheTask(t *testing.T) {
	simulated(t, func(t *testing.T) {
		nw := testnet.NewNetwork()
		cfgs := simChain(t, nw, 4)
		ws := make([]*watched, 4)
		for i := range cfgs {
			cfgs[i].Heartbeat = time.Second // the extension lines: notices
			cfgs[i].Task = func(context.Context, string) error {
				if i == 2 {
					return exitErr(1)
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
		for _, w := range ws {
			if _, err := w.Wait(context.Background(), ""); err != nil {
				t.Fatal(err)
			}
		}
		for i, want := range []string{"had run already", "had run already", "", "this node runs no task in the round"} {
			if want == "" {
				continue // N2's own task failed: no notice of it here
			}
			if ws[i].logs.count(func(e capturedLog) bool {
				return strings.HasPrefix(e.Msg, "halted: ") && strings.Contains(e.Msg, want)
			}) == 0 {
				t.Errorf("N%d did not log a halt saying %q", i, want)
			}
		}
	})
}
