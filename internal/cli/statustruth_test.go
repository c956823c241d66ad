package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/status"
)

// Tests that chainsync status prints what is true (docs/OPERATIONS.md,
// "chainsync status"; docs/STEERING.md).

// One hold is one line under "steering:", however many nodes know of
// it and whatever time each was told (the held node's own account, with
// the hold's own time, wins); another hold, or a denial of a round, is
// its own line.
func TestPrintSteeringOnce(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 2, 0, 0, time.UTC)
	r1 := "r1"
	own := status.Steer{Node: "B", Here: true, What: "hold", Since: at, Text: "held at B since 10:02 (change window), by ann"}
	told := status.Steer{Node: "B", What: "hold", Since: at.Add(37 * time.Millisecond), Text: "held at B since 10:02"}
	denied := status.Steer{Node: "C", What: "denied", Round: &r1, Since: at, Text: "denied at C (round r1) at 10:02"}
	nodes := []status.Node{
		{Addr: "a", Doc: &status.Doc{Name: "A", Steering: []status.Steer{told, denied}}},
		{Addr: "b", Doc: &status.Doc{Name: "B", Steering: []status.Steer{own}}},
		{Addr: "c", Doc: &status.Doc{Name: "C", Steering: []status.Steer{told, denied}}},
	}
	var out bytes.Buffer
	printSteering(&out, nodes)
	want := "\nsteering:\n  held at B since 10:02 (change window), by ann\n  denied at C (round r1) at 10:02\n"
	if out.String() != want {
		t.Errorf("steering printed\n%q\nwant\n%q", out.String(), want)
	}
}

// A finished round the node's journal gave back after a restart (no end
// time known) does not read as ended at the restart, "opened 0s before".
func TestFinishedText(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 2, 3, 512e6, time.Local)
	for _, c := range []struct {
		f    status.Finished
		want string
	}{
		{status.Finished{Round: "r1", Status: "done", Opened: at.Add(-1200 * time.Millisecond), Ended: at}, "r1: done at 10:02:03.512 (opened 1.2s before)"},
		{status.Finished{Round: "r2", Status: "done"}, "r2: done before this node restarted"},
		{status.Finished{Round: "r3", Status: "task failed", Ended: at, Error: "exit 1"}, "r3: task failed at 10:02:03.512, before this node restarted: exit 1"},
	} {
		if got := finishedText(c.f); got != c.want {
			t.Errorf("finishedText = %q, want %q", got, c.want)
		}
	}
}

// A round held by a pause at the Head is shown waiting for chainsync
// resume at the Head, in a node's rows and the chain's verdict.
func TestStatusPauseNamesResume(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 2, 0, 0, time.UTC)
	r := status.Round{Round: "r1", State: "WATCH", WaitingFor: "hold", From: status.FromSelf, Since: at, Ready: true,
		PausedBy: "A", Doing: "paused at the Head A (chainsync resume at A)"}
	d := &status.Doc{Name: "B", Role: "middle", Time: at.Add(time.Second), Rounds: []status.Round{r}}
	if got := waitText(d, r); !strings.Contains(got, "chainsync resume at A") || strings.Contains(got, "release") {
		t.Errorf("wait text %q, want chainsync resume at A", got)
	}
	var out bytes.Buffer
	printNode(&out, status.Node{Addr: "b", Doc: d})
	if !strings.Contains(out.String(), "chainsync resume at A") || strings.Contains(out.String(), "chainsync release") {
		t.Errorf("node printed:\n%s", out.String())
	}
}

// A predecessor that is connected and alive but has opened no round yet
// is not a link that is down: status says it waits for a round
// (docs/OPERATIONS.md, "/status": waiting).
func TestLinkTextWaiting(t *testing.T) {
	for _, tc := range []struct {
		l    status.Link
		want string
	}{
		{status.Link{Exists: true, Up: true, Peer: "A"}, "up (A)"},
		{status.Link{Exists: true, Peer: "A"}, "DOWN (A)"},
		{status.Link{Exists: true, Peer: "A", Waiting: "127.0.0.1:50527"}, "waiting for a round (A)"},
		{status.Link{Exists: true, Peer: "", Waiting: "127.0.0.1:50527"}, "waiting for a round"},
		{status.Link{Exists: true, Up: true, Silent: true, Peer: "A"}, "SILENT (A)"},
		{status.Link{}, "-"},
	} {
		if got := linkText(tc.l); got != tc.want {
			t.Errorf("linkText(%+v) = %q, want %q", tc.l, got, tc.want)
		}
	}
}
