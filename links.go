package chainsync

import (
	"log/slog"

	"github.com/chainsync-go/chainsync/protocol"
)

// links is the loop's side of the node's connections: the current
// predecessor and successor links, the pending would-be predecessors
// (admission), the duplicate guard and the identity line. Its handlers
// react to what the links' readers, writers and the connector hand the
// loop (connect.go, identity.go). They step nothing: a line read is the
// driver's to step once the links have checked it (loop.go), and a link
// made current or dropped goes back to the driver to step. Loop only.
type links struct {
	pred *link      // the current predecessor connection, nil when down
	succ *link      // the current successor connection, nil when down
	adm  *admission // the pending predecessor connections (admission.go)
	// dup: the would-be predecessors that claim the current one's place
	// (duplicate.go); id: this node's identity line (identity.go), nil
	// if it sends none.
	dup dupState
	id  *identity
	// refusedOnce: the successor's refusal of a first line was logged.
	refusedOnce bool
	wbuf        []byte // scratch for encoding

	// downs: the ends of current links dropped in the call the loop made
	// (drop), for the loop to step when it returns (linksDown).
	downs  []protocol.Event
	st     *stepper    // the machine's time; the journal's state
	view   machineView // the machine, read-only: the restart graces in force (refused)
	lp     *loop
	faults *faultBook
	undo   *undoState // a mismatch or refusal of the undo wave (undo.go)
	plim   *admitLimiter
	cfg    *Config
	log    *slog.Logger
	role   protocol.Role
}
