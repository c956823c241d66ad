package chainsync

import (
	"strings"
	"testing"

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
