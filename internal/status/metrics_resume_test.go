package status

import (
	"strings"
	"testing"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/protocol"
)

// TestMetricsSkipResumedFaults: a fault traced with Resumed ended its
// round before this process started (the journal remembered it); the
// faults counter counts only this process's faults. docs/OPERATIONS.md,
// "Counters across restarts".
func TestMetricsSkipResumedFaults(t *testing.T) {
	m := NewMetrics(protocol.Middle, "v", "go")
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceFault, Fault: chainsync.FaultPeerSilent, Round: "r1", Resumed: true})
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceFault, Fault: chainsync.FaultPhaseTimeout, Round: "r2"})
	var b strings.Builder
	if _, err := m.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`chainsync_faults_total{kind="peer-silent"} 0`,
		`chainsync_faults_total{kind="phase-timeout"} 1`,
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
}

// TestMetricsUndeliveredApart: a round that ended undelivered (the tasks
// after this node may have run) is counted as outcome="undelivered", not
// as a fault. docs/FAULTS.md, "Undelivered rounds".
func TestMetricsUndeliveredApart(t *testing.T) {
	m := NewMetrics(protocol.Head, "v", "go")
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceRoundDone, Round: "r1", Status: chainsync.StatusUndelivered})
	m.Observe(chainsync.TraceEvent{Kind: chainsync.TraceRoundDone, Round: "r2", Status: chainsync.StatusFault})
	var b strings.Builder
	if _, err := m.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`chainsync_rounds_total{outcome="undelivered"} 1`,
		`chainsync_rounds_total{outcome="fault"} 1`,
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
}
