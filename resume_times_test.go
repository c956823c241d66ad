package chainsync

import (
	"context"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
)

// docs/DESIGN.md, "Restarts and durable state"; docs/JOURNAL.md: a round
// that ended before the node restarted is not said to have ended at the
// restart ("done at (the restart time) (opened 0s before)"): its end is
// when its task ended, as the journal says, and when it opened is not
// known.
func TestRestoredRoundKeepsItsEnd(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Name: "S", Rounds: []string{"r1", "r2"}, StateDir: dir,
		Task: func(context.Context, string) error { return nil }}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Ready("r1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if res, err := n.Wait(ctx, "r1"); err != nil || res.Status != StatusDone {
		t.Fatalf("r1: %+v %v", res, err)
	}
	ended := time.Now()
	n.Close() // r2 never ran: the node resumes
	restart := time.Now()
	n, err = Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var got *RoundResult
	for _, f := range n.Snapshot().Finished {
		if f.Round == "r1" {
			got = &f
		}
	}
	switch {
	case got == nil:
		t.Fatalf("r1 is not among the finished rounds after the restart: %+v", n.Snapshot().Finished)
	case !got.Opened.IsZero():
		t.Errorf("r1 opened at %v: a restarted node does not know when", got.Opened)
	case got.Ended.IsZero() || got.Ended.After(ended) || !got.Ended.Before(restart):
		t.Errorf("r1 ended at %v; want when its task ended, before %v (the restart at %v)", got.Ended, ended, restart)
	}
}

// docs/DESIGN.md, "Restarts and durable state": a task interrupted by the
// node's death and run again (ResumeRerun) is two runs in the journal, the
// first cut short, not one run across the restart.
func TestRerunIsASecondRun(t *testing.T) {
	dir := t.TempDir()
	j, _, err := journal.Open(dir, journal.Header{Role: "single", Name: "S"})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Save([]protocol.Record{{Round: "r1", State: protocol.StateStart, LocalReady: true, PredReady: true, Started: true}}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	ran := make(chan struct{}, 1)
	n, err := Start(Config{Name: "S", Rounds: []string{"r1"}, StateDir: dir, ResumeTask: ResumeRerun,
		Task: func(context.Context, string) error { ran <- struct{}{}; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if res, err := n.Wait(ctx, "r1"); err != nil || res.Status != StatusDone {
		t.Fatalf("r1: %+v %v", res, err)
	}
	<-ran
	n.Close()
	st, err := journal.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	tt := st.State.TaskTimes["r1"]
	if len(tt.Earlier) != 1 || tt.Earlier[0].Interrupted.IsZero() || tt.Started.IsZero() || tt.Ended.IsZero() {
		t.Errorf("r1's task times %+v: want the run cut short by the restart, then the rerun that ended", tt)
	}
}
