package cli

import (
	"testing"

	"github.com/chainsync-go/chainsync"
)

// What chainsync open --wait reports of a round that failed elsewhere
// (docs/STEERING.md, docs/UNDO.md): a task that failed, ran past its
// timeout or was denied at C is a task failure at C (exit 3), with or
// without the undo wave, whose cause names a denial "denied"; any other
// fault there is a fault (exit 4).
func TestOutcomeOfFailureElsewhere(t *testing.T) {
	for _, tc := range []struct {
		cause chainsync.FaultKind
		want  chainsync.Status
	}{
		{chainsync.FaultTaskFailed, chainsync.StatusTaskFailed},
		{chainsync.FaultTaskTimeout, chainsync.StatusTaskFailed},
		{causeDenied, chainsync.StatusTaskFailed},
		{chainsync.FaultPeerSilent, chainsync.StatusFault},
	} {
		res := chainsync.Result{Round: "d1", Status: chainsync.StatusFault,
			Err:  &chainsync.FaultError{Round: "d1", Kind: chainsync.FaultChainHalted, Origin: "C", Peer: "C", Cause: tc.cause},
			Undo: "failed at C (task denied); undone by B, A"}
		oc := outcomeOf(res, "A")
		if oc.Status != tc.want.String() || oc.Node != "C" {
			t.Errorf("cause %s: status %q at %q, want %q at C", tc.cause, oc.Status, oc.Node, tc.want)
		}
	}
}
