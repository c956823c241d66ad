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
