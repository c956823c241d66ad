package tracefile_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/tracefile"
)

// docs/STEERING.md: a hold and an approval are in the trace (kind
// "steer", what and who), and the picture marks them.
func TestTraceShowsSteering(t *testing.T) {
	path := filepath.Join(t.TempDir(), "solo.trace")
	w, err := tracefile.Append(path, tracefile.Record{Kind: tracefile.KindNode, Node: "solo", Role: "single"})
	if err != nil {
		t.Fatal(err)
	}
	nd, err := chainsync.Start(chainsync.Config{Name: "solo", Approve: true, Trace: w.Observe,
		Task: func(context.Context, string) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.Hold(chainsync.Request{By: "ann", Reason: "look first"}); err != nil {
		t.Fatal(err)
	}
	if err := nd.Ready("r"); err != nil {
		t.Fatal(err)
	}
	if err := nd.Release(chainsync.Request{By: "ann"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := nd.Approve(chainsync.Request{By: "bob"}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the round never waited for its approval")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := nd.Wait(ctx, "r"); err != nil || res.Status != chainsync.StatusDone {
		t.Fatalf("%+v %v", res, err)
	}
	nd.Close()
	w.Close()
	recs, err := tracefile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var steer []string
	for _, r := range recs {
		if r.Kind == tracefile.KindSteer {
			steer = append(steer, r.Steer+" "+r.Error)
		}
	}
	want := []string{"hold asked by ann: look first", "approval ", "none asked by ann", "approved asked by bob"}
	if strings.Join(steer, "|") != strings.Join(want, "|") {
		t.Fatalf("steer records %q, want %q", steer, want)
	}
	var out bytes.Buffer
	if _, err := tracefile.Render(&out, []tracefile.Trace{{File: path, Records: recs}}, tracefile.Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `class="steer"`) {
		t.Fatalf("no steering marks in the picture")
	}
}
