package journal

import (
	"testing"

	"github.com/chainsync-go/chainsync/protocol"
)

// Fault records (docs/DESIGN.md, "Restarts and durable state"): the kind
// a round was aborted with, and, for a fault another node found, which
// node and what, read back the same by Open and by Read, before and after
// a compaction; a record that could not be read back is refused.
func TestFaultRecordsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	j, _, err := Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	aborted := func(id string) protocol.Record {
		return protocol.Record{Round: id, State: protocol.StateAborted, LocalReady: true}
	}
	faults := []Fault{
		{Round: "r1", Kind: "peer-silent"},
		{Round: "r2", Kind: "chain-halted", Cause: "task-failed", Origin: "C"},
	}
	if err := j.SaveAll(faults, []protocol.Record{aborted("r1"), aborted("r2")}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Fault{
		{Round: "r3", Kind: "chain-halted", Cause: "task-failed"},              // no origin
		{Round: "r3", Kind: "chain-halted", Origin: "C"},                       // no cause
		{Round: "r3", Kind: "chain-halted", Cause: "Task Failed", Origin: "C"}, // not a kind
		{Round: "r3", Kind: "chain-halted", Cause: "task-failed", Origin: "-"},
		{Round: "r3", Kind: "chain-halted", Cause: "task-failed", Origin: "C D"},
	} {
		if err := j.SaveAll([]Fault{bad}, nil); err == nil {
			t.Errorf("SaveAll took %+v", bad)
		}
	}
	check := func(when string, st State) {
		t.Helper()
		if st.Faults["r1"] != "peer-silent" || st.Faults["r2"] != "chain-halted" {
			t.Errorf("%s: Faults %v", when, st.Faults)
		}
		if _, ok := st.Found["r1"]; ok || st.Found["r2"] != faults[1] || len(st.Found) != 1 {
			t.Errorf("%s: Found %v, want only r2's, found by C", when, st.Found)
		}
	}
	read := func(when string) {
		t.Helper()
		snap, err := Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		check(when+", Read", snap.State)
	}
	read("appended")
	if err := j.compact(); err != nil {
		t.Fatal(err)
	}
	read("compacted")
	j.Close()
	j, st, err := Open(dir, testHdr)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	check("compacted, Open", *st)
}
