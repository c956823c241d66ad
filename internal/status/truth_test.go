package status_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/status"
	"github.com/chainsync-go/chainsync/protocol"
)

// Tests that chainsync status tells a person what is true and what to
// do (docs/OPERATIONS.md, "chainsync status"; docs/STEERING.md;
// docs/UNDO.md).

// A round waiting at B while the Head A has paused the chain names
// chainsync resume at A, not a release at B (which B refuses: it is not
// held); held at B as well, it names both; held at B only, the release
// at B; paused at the Head itself, the resume there.
func TestFromSnapshotPauseHint(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	waiting := []chainsync.RoundStatus{{Round: "r1", State: protocol.StateWatch, Ready: true, WaitingFor: protocol.WaitHold, Gate: "B", Since: at}}
	pause := chainsync.SteerStatus{Node: "A", What: "pause", Since: at}
	hold := chainsync.SteerStatus{Node: "B", Here: true, What: "hold", Since: at}
	for _, c := range []struct {
		name     string
		role     protocol.Role
		self     string
		steering []chainsync.SteerStatus
		pausedBy string
		want     []string
		not      string
	}{
		{"paused at the Head", protocol.Middle, "B", []chainsync.SteerStatus{pause}, "A", []string{"paused at the Head A", "chainsync resume at A"}, "release"},
		{"paused and held", protocol.Middle, "B", []chainsync.SteerStatus{hold, pause}, "A", []string{"chainsync release at B", "chainsync resume at A"}, ""},
		{"held only", protocol.Middle, "B", []chainsync.SteerStatus{hold}, "", []string{"held at B (chainsync release at B)"}, "resume"},
		{"the Head's own pause", protocol.Head, "A", []chainsync.SteerStatus{{Node: "A", Here: true, What: "pause", Since: at}}, "A", []string{"paused here, at the Head (chainsync resume at A)"}, "release"},
	} {
		s := chainsync.Snapshot{Name: c.self, Role: c.role, Rounds: waiting, Steering: c.steering}
		d := status.FromSnapshot(s, "test", at)
		r := d.Rounds[0]
		if r.PausedBy != c.pausedBy {
			t.Errorf("%s: paused_by %q, want %q", c.name, r.PausedBy, c.pausedBy)
		}
		for _, w := range c.want {
			if !strings.Contains(r.Doing, w) {
				t.Errorf("%s: doing %q does not say %q", c.name, r.Doing, w)
			}
		}
		if c.not != "" && strings.Contains(r.Doing, c.not) {
			t.Errorf("%s: doing %q names %s, which would be refused", c.name, r.Doing, c.not)
		}
	}
}

// undoWords are the driver's words for a round in its undo wave, by where
// this node's part stands.
var undoWords = map[string]string{
	"awaiting": "failed at C (task-failed); waiting for UNDO from the successor (the nodes after this one undo first)",
	"running":  "failed at C (task-failed); running its undo",
	"done":     "failed at C (task-failed); undone here; waiting for the nodes before it and the outcome",
	"failed":   "failed at C (task-failed); its undo failed",
	"nothing":  "failed at C (task-failed); nothing to undo here; waiting for the undo wave's outcome",
}

// undoChain is A, B, C, D with round u1 failed at C: each node's undo
// phase as given ("-" the round is over there, "x" it does not answer).
func undoChain(phases ...string) []status.Node {
	spec := make([]string, len(phases))
	for i, p := range phases {
		spec[i] = "COMPLETE"
		if p == "-" || p == "x" {
			spec[i] = p
		}
	}
	nodes := chainDocs(spec, nil, nil)
	for i, p := range phases {
		if d := nodes[i].Doc; d != nil && len(d.Rounds) == 1 {
			d.Rounds[0].Round = "u1"
			d.Rounds[0].Undo, d.Rounds[0].Doing = p, undoWords[p]
		}
	}
	return nodes
}

// During an undo wave the round is held by the node undoing, which
// status names ("B is undoing"), not by the Head that waits for it; by a
// node whose undo failed; by the last node waiting for UNDO from its
// successor; and once every undo ended, the wave's outcome is waited
// for.
func TestDiagnoseUndoWave(t *testing.T) {
	for _, c := range []struct {
		name   string
		phases []string
		at     string
		why    string
	}{
		{"B undoes", []string{"awaiting", "running", "nothing", "nothing"}, "B", "B is undoing"},
		{"B's undo failed", []string{"awaiting", "failed", "nothing", "-"}, "B", "B's undo failed"},
		{"A waits for B's UNDO", []string{"awaiting", "done", "nothing", "nothing"}, "A", "A waits for UNDO from B"},
		{"B waits for C, which does not answer", []string{"awaiting", "awaiting", "x", "nothing"}, "C", "does not answer"},
		{"the outcome", []string{"done", "done", "nothing", "nothing"}, "A", "waits for the undo wave's outcome"},
	} {
		vs := status.Diagnose(undoChain(c.phases...))
		if len(vs) != 1 || vs[0].Node != c.at || !strings.Contains(vs[0].Why, c.why) || !strings.Contains(vs[0].Why, "failed at C") {
			t.Errorf("%s: verdicts %+v; want held at %s: %q, naming where the round failed", c.name, vs, c.at, c.why)
		}
	}
	s := chainsync.Snapshot{Name: "B", Role: protocol.Middle, Rounds: []chainsync.RoundStatus{{Round: "u1", State: protocol.StateAborted, Undo: undoWords["running"]}}}
	if d := status.FromSnapshot(s, "test", time.Now()); d.Rounds[0].Undo != "running" {
		t.Errorf("a round whose undo runs: undo %q, want running", d.Rounds[0].Undo)
	}
}

// Addresses given out of chain order, or twice, are refused with what
// contradicts the order and, when the names tell it, the chain order;
// a chain in order, or a run of adjacent nodes of it, passes.
func TestCheckOrder(t *testing.T) {
	abc := chainDocs([]string{"-", "-", "-"}, nil, nil) // A 10.0.0.1, B .2, C .3
	pick := func(idx ...int) []status.Node {
		var out []status.Node
		for _, i := range idx {
			out = append(out, abc[i])
		}
		return out
	}
	for _, c := range []struct {
		name  string
		nodes []status.Node
		want  []string
	}{
		{"C,A,B", pick(2, 0, 1), []string{"C is the Tail", "A is the Head, but is given in place 2", "in chain order: 10.0.0.1:9000,10.0.0.2:9000,10.0.0.3:9000"}},
		{"A,A", pick(0, 0), []string{"10.0.0.1:9000 is given twice"}},
		{"A,A,B", pick(0, 0, 1), []string{"10.0.0.1:9000 is given twice", "in chain order: 10.0.0.1:9000,10.0.0.2:9000"}},
		{"A,C", pick(0, 2), []string{"A's successor is B, but C is given after it"}},
		{"B,A,C", pick(1, 0, 2), []string{"A is the Head"}},
	} {
		err := status.CheckOrder(c.nodes)
		if err != nil && len(c.nodes) == 2 && strings.Contains(err.Error(), "in chain order") {
			t.Errorf("%s: one node given twice is given an order: %v", c.name, err)
		}
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
	}
	same := pick(0, 1)
	same[1].Addr = "127.0.0.1:1"
	same[1].Doc = abc[0].Doc
	if err := status.CheckOrder(same); err == nil || !strings.Contains(err.Error(), "A answers at both") {
		t.Errorf("one node at two addresses: %v", err)
	}
	for _, ok := range [][]status.Node{pick(0, 1, 2), pick(1, 2), pick(0, 1)} {
		if err := status.CheckOrder(ok); err != nil {
			t.Errorf("a chain in order refused: %v", err)
		}
	}
	// Placed by --prev and --next, a node knows its neighbours by address,
	// not by name: an address contradicts no name.
	byAddr := chainDocs([]string{"-", "-", "-"}, nil, nil)
	byAddr[0].Doc.Links.Succ.Peer = "127.0.0.1:24001"
	byAddr[1].Doc.Links.Pred.Peer = "127.0.0.1:47886"
	byAddr[1].Doc.Links.Succ.Peer = "[::1]:24002"
	byAddr[2].Doc.Links.Pred.Peer = "[::1]:51000"
	if err := status.CheckOrder(byAddr); err != nil {
		t.Errorf("a chain placed by addresses refused: %v", err)
	}
	withSilent := pick(0, 1, 2)
	withSilent[1] = status.Node{Addr: withSilent[1].Addr, Err: errString("refused")}
	if err := status.CheckOrder(withSilent); err != nil {
		t.Errorf("a chain with a node that does not answer refused: %v", err)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
