package status_test

import (
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/status"
)

// docs/FAULTS.md "Liveness": a round held at a node that does not answer
// because it is restarting says so, as its neighbours know it.
func TestDiagnoseRestarting(t *testing.T) {
	nodes := chainDocs([]string{"COMPLETE", "x", "WATCH"}, nil, map[int]string{0: "succ", 2: "pred"})
	text := "B is restarting (grace 10m, 7m left)"
	nodes[0].Doc.Restarting = []status.Restarting{{Node: "B", Grace: 600, Left: 420, Text: text}}
	vs := status.Diagnose(nodes)
	if len(vs) != 1 || !strings.Contains(vs[0].Why, text) || vs[0].Node != "B" {
		t.Fatalf("verdicts %+v, want the round held at B, which is restarting", vs)
	}
}

// docs/FAULTS.md "Liveness": the document carries the graces and silent
// links of the snapshot.
func TestFromSnapshotRestarting(t *testing.T) {
	s := chainsync.Snapshot{PredSilent: true, Restarting: []chainsync.GraceStatus{{Node: "B", Round: "r1", Grace: 600e9, Left: 119e9}}}
	d := status.FromSnapshot(s, "test", s.PredHeard)
	if len(d.Restarting) != 1 || d.Restarting[0].Text != "B is restarting (grace 10m, 2m left)" || !d.Links.Pred.Silent {
		t.Fatalf("document %+v", d)
	}
}
