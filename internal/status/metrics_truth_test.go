package status

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/protocol"
)

// Metrics agree with the outcome a person reads (docs/OPERATIONS.md,
// "Metrics").

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	var b strings.Builder
	if _, err := m.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func wantLines(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("%s: metrics lack %q:\n%s", what, w, got)
		}
	}
}

// A round that failed because C's task failed is counted at the Head as
// outcome="task-failed", as chainsync open --wait reports it (exit 3);
// a fault elsewhere that is no task's failure stays a fault.
func TestMetricsTaskFailedElsewhere(t *testing.T) {
	m := NewMetrics(protocol.Head, "v", "go")
	halted := func(cause chainsync.FaultKind) error {
		return &chainsync.FaultError{Round: "r1", Kind: chainsync.FaultChainHalted, Origin: "C", Cause: cause}
	}
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceRoundDone, Round: "r1", Status: chainsync.StatusFault, Err: halted(chainsync.FaultTaskFailed)})
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceRoundDone, Round: "r2", Status: chainsync.StatusFault, Err: halted(chainsync.FaultTaskTimeout)})
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceRoundDone, Round: "r3", Status: chainsync.StatusFault, Err: halted(chainsync.FaultPeerSilent)})
	wantLines(t, "rounds failed at C", scrape(t, m), `chainsync_rounds_total{outcome="task-failed"} 2`, `chainsync_rounds_total{outcome="fault"} 1`)
}

// A link that is up but whose neighbour is silent is not up; the status
// endpoint's scrape takes it from the node's state.
func TestMetricsSilentLinkNotUp(t *testing.T) {
	m := NewMetrics(protocol.Middle, "v", "go")
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceLinkUp, Side: protocol.Pred})
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceLinkUp, Side: protocol.Succ})
	snap := chainsync.Snapshot{Role: protocol.Middle, PredUp: true, SuccUp: true, SuccSilent: true}
	h := Handler(func() chainsync.Snapshot { return snap }, m, "v")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	wantLines(t, "succ silent", rec.Body.String(), `chainsync_link_up{side="pred"} 1`, `chainsync_link_up{side="succ"} 0`)
	snap.SuccSilent = false
	m.Live(snap)
	wantLines(t, "heard again", scrape(t, m), `chainsync_link_up{side="succ"} 1`)
}

// chainsync_faults_active counts the faults in force: a round's fault
// until the round ends here, a silent neighbour until it is heard from
// again (past its round's end), a further report of it once; every
// kind is there from the start, at 0.
func TestMetricsFaultsActive(t *testing.T) {
	m := NewMetrics(protocol.Middle, "v", "go")
	wantLines(t, "at start", scrape(t, m), `chainsync_faults_active{kind="peer-silent"} 0`, `chainsync_faults_active{kind="task-failed"} 0`)
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceFault, Fault: chainsync.FaultPeerSilent, Round: "r1", Side: protocol.Succ, Peer: "C"})
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceFault, Fault: chainsync.FaultPeerSilent, Round: "r2", Side: protocol.Succ, Peer: "C", Again: true})
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceFault, Fault: chainsync.FaultTaskFailed, Round: "r3"})
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceFault, Fault: chainsync.FaultPhaseTimeout, Round: "r0", Resumed: true})
	wantLines(t, "reported", scrape(t, m), `chainsync_faults_active{kind="peer-silent"} 1`, `chainsync_faults_active{kind="task-failed"} 1`, `chainsync_faults_active{kind="phase-timeout"} 0`)
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceRoundDone, Round: "r1", Status: chainsync.StatusFault})
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceRoundDone, Round: "r3", Status: chainsync.StatusTaskFailed})
	wantLines(t, "rounds over", scrape(t, m), `chainsync_faults_active{kind="peer-silent"} 1`, `chainsync_faults_active{kind="task-failed"} 0`)
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceFault, Fault: chainsync.FaultChainFault, Round: "r3", Origin: "D", Peer: "D"})
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceFaultCleared, Fault: chainsync.FaultPeerSilent, Round: "r1", Peer: "C"})
	wantLines(t, "cleared", scrape(t, m), `chainsync_faults_active{kind="peer-silent"} 0`, `chainsync_faults_active{kind="chain-fault"} 0`)
}
