package status

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/protocol"
)

// ContentType is the media type of the Prometheus text exposition format.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// DurationBuckets are the upper bounds, in seconds, of the round and task
// duration histograms: from a loopback round (milliseconds) to a
// maintenance-window task (an hour).
var DurationBuckets = []float64{0.005, 0.025, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600}

// FaultKinds are the fault kinds chainsync_faults_total reports from the
// start (at 0), so that a rate over them works before the first fault.
var FaultKinds = []chainsync.FaultKind{
	chainsync.FaultTaskFailed, chainsync.FaultTaskTimeout, chainsync.FaultPeerSilent,
	chainsync.FaultPeerUnreachable, chainsync.FaultPeerRestarted,
	chainsync.FaultExitWaveUndelivered, chainsync.FaultPhaseTimeout,
}

// Metrics counts what one node does, from its trace events. Observe is
// its chainsync.Config.Trace hook (it only updates counters, so it is
// quick enough for a trace callback); WriteTo writes the
// Prometheus text exposition. Its zero value is not usable: use
// NewMetrics.
type Metrics struct {
	mu         sync.Mutex
	role       protocol.Role
	version    string
	goversion  string
	msgs       [2][4]uint64 // [sent, received][command]
	resent     [4]uint64    // [command]: re-sends after a reconnect
	outcomes   [8]uint64    // [chainsync.Status]
	opened     uint64       // rounds this node heard of (TraceRoundOpened)
	open       map[string]time.Time
	tasks      map[string]time.Time
	roundDur   histogram
	taskDur    histogram
	linkUp     [3]bool
	linkSeen   [3]bool
	reconnects [3]uint64
	violations [3]uint64
	faults     map[string]uint64
	silent     [3]bool              // the link is up but its neighbour silent (Live)
	active     map[activeFault]bool // faults in force here (chainsync_faults_active)
	ended      []string             // the last rounds that ended here, oldest first (at most keepEnded)
}

// keepEnded bounds Metrics.ended: a fault reported late for a round
// that ended here is not in force.
const keepEnded = 64

// activeFault is a fault in force at a node: reported, and neither
// cleared nor over with its round.
type activeFault struct {
	kind  string
	peer  string        // the node it blames ("" this node's own)
	round string        // the round it was reported in ("": a link's fault)
	side  protocol.Side // the side it blames, for a link's fault
}

// liveKind reports whether faults of kind k outlast their round: a neighbour
// gone is in force until it is heard from again (TraceFaultCleared).
func liveKind(k string) bool {
	return k == string(chainsync.FaultPeerSilent) || k == string(chainsync.FaultPeerUnreachable)
}

// NewMetrics returns the metrics of a node with role; version and
// goversion label chainsync_build_info.
func NewMetrics(role protocol.Role, version, goversion string) *Metrics {
	m := &Metrics{role: role, version: version, goversion: goversion,
		open: map[string]time.Time{}, tasks: map[string]time.Time{}, faults: map[string]uint64{}, active: map[activeFault]bool{},
		roundDur: newHistogram(DurationBuckets), taskDur: newHistogram(DurationBuckets)}
	for _, k := range FaultKinds {
		m.faults[string(k)] = 0
	}
	return m
}

// Observe records one trace event.
func (m *Metrics) Observe(ev chainsync.TraceEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch ev.Kind {
	case chainsync.TraceSent:
		// A message queued while the link is down is counted when it
		// really goes out, on reconnect: its first send, not a re-send.
		if !ev.Queued && ev.Msg.Cmd.Valid() {
			m.msgs[0][ev.Msg.Cmd]++
			if ev.Resend {
				m.resent[ev.Msg.Cmd]++
			}
		}
	case chainsync.TraceReceived:
		if ev.Msg.Cmd.Valid() {
			m.msgs[1][ev.Msg.Cmd]++
		}
	case chainsync.TraceState:
		// A round is in progress here from its first state change (it
		// leaves SYNC once this node and all before it are ready) until
		// it ends. States change only in live rounds, so late duplicates
		// of a finished round never reopen it.
		if _, ok := m.open[ev.Round]; !ok && !ev.To.Terminal() {
			m.open[ev.Round] = ev.Time
		}
	case chainsync.TraceRoundOpened:
		m.opened++
	case chainsync.TraceRoundDone:
		if t0, ok := m.open[ev.Round]; ok {
			m.roundDur.observe(ev.Time.Sub(t0).Seconds())
			delete(m.open, ev.Round)
		}
		if st := ev.Status; int(st) < len(m.outcomes) {
			if failedByTask(ev) {
				st = chainsync.StatusTaskFailed
			}
			m.outcomes[st]++
		}
		delete(m.tasks, ev.Round)
		if len(m.ended) == keepEnded {
			m.ended = slices.Delete(m.ended, 0, 1)
		}
		m.ended = append(m.ended, ev.Round)
		for f := range m.active {
			if f.round == ev.Round && !liveKind(f.kind) {
				delete(m.active, f)
			}
		}
	case chainsync.TraceTaskStart:
		m.tasks[ev.Round] = ev.Time
	case chainsync.TraceTaskEnd:
		if t0, ok := m.tasks[ev.Round]; ok {
			m.taskDur.observe(ev.Time.Sub(t0).Seconds())
			delete(m.tasks, ev.Round)
		}
	case chainsync.TraceLinkUp:
		if s := ev.Side; s == protocol.Pred || s == protocol.Succ {
			if m.linkSeen[s] {
				m.reconnects[s]++
			}
			m.linkSeen[s], m.linkUp[s] = true, true
			for f := range m.active { // a new link was admitted: a link's fault on that side is over
				if f.round == "" && f.side == s {
					delete(m.active, f)
				}
			}
		}
	case chainsync.TraceLinkDown:
		if s := ev.Side; s == protocol.Pred || s == protocol.Succ {
			m.linkUp[s] = false
		}
	case chainsync.TraceViolation:
		if s := ev.Side; s == protocol.Pred || s == protocol.Succ {
			m.violations[s] += uint64(max(1, ev.Count))
		}
	case chainsync.TraceFault:
		// A fault the journal remembers from before a restart is not
		// this process's: counters count what this process did.
		if ev.Fault != "" && !ev.Resumed {
			m.faults[string(ev.Fault)]++
		}
		if ev.Fault != "" && !ev.Again && !ev.Resumed && (!slices.Contains(m.ended, ev.Round) || liveKind(string(ev.Fault))) {
			// A fault the journal remembers ended its round before this
			// process: over. So is a late report of a round over here.
			m.active[activeFault{kind: string(ev.Fault), peer: ev.Peer, round: ev.Round, side: ev.Side}] = true
		}
	case chainsync.TraceFaultCleared:
		for f := range m.active {
			if f.peer == ev.Peer {
				delete(m.active, f)
			}
		}
	}
}

// failedByTask reports whether a round that ended with a fault here
// failed because a task failed at another node (a chain-halted fault
// whose cause is a task's failure or timeout): the round's outcome, as
// chainsync open --wait reports it (exit 3), is a task failure.
func failedByTask(ev chainsync.TraceEvent) bool {
	var fe *chainsync.FaultError
	if ev.Status != chainsync.StatusFault || !errors.As(ev.Err, &fe) {
		return false
	}
	return fe.Origin != "" && (fe.Cause == chainsync.FaultTaskFailed || fe.Cause == chainsync.FaultTaskTimeout)
}

// Live takes what only the node's state says now, not its trace: which
// links are up but silent (Snapshot.PredSilent, SuccSilent). The
// status endpoint calls it before every scrape.
func (m *Metrics) Live(s chainsync.Snapshot) {
	m.mu.Lock()
	m.silent[protocol.Pred], m.silent[protocol.Succ] = s.PredSilent, s.SuccSilent
	m.mu.Unlock()
}

var commands = []protocol.Command{protocol.Ready, protocol.Start, protocol.Complete}

// outcomeLabels spells chainsync.Status as the outcome label.
var outcomeLabels = []struct {
	s     chainsync.Status
	label string
}{
	{chainsync.StatusDone, "done"}, {chainsync.StatusTaskFailed, "task-failed"},
	{chainsync.StatusFault, "fault"}, {chainsync.StatusStopped, "stopped"},
	{chainsync.StatusUndelivered, "undelivered"}, {chainsync.StatusCancelled, "cancelled"},
}

// WriteTo writes every metric in the Prometheus text exposition format.
func (m *Metrics) WriteTo(w io.Writer) (int64, error) {
	m.mu.Lock()
	var b expo
	b.family("chainsync_messages_total", "counter", "Protocol messages this node sent to or received from its neighbours (re-sends included).")
	for d, dir := range []string{"sent", "received"} {
		for _, c := range commands {
			b.sample("chainsync_messages_total", m.msgs[d][c], "direction", dir, "command", c.String())
		}
	}
	b.family("chainsync_messages_resent_total", "counter", "Messages sent again, after a link that had carried them came back (already counted in chainsync_messages_total); a message first sent on reconnect is not one.")
	for _, c := range commands {
		b.sample("chainsync_messages_resent_total", m.resent[c], "command", c.String())
	}
	b.family("chainsync_rounds_opened_total", "counter", "Rounds this node heard of: opened by it (the Head) or by its predecessor's READY.")
	b.sample("chainsync_rounds_opened_total", m.opened)
	b.family("chainsync_rounds_total", "counter", "Rounds that ended at this node, by outcome.")
	for _, o := range outcomeLabels {
		b.sample("chainsync_rounds_total", m.outcomes[o.s], "outcome", o.label)
	}
	b.family("chainsync_rounds_in_progress", "gauge", "Rounds that left SYNC here and have not ended.")
	b.sample("chainsync_rounds_in_progress", uint64(len(m.open)))
	b.histogram("chainsync_round_duration_seconds", "Time from a round leaving SYNC at this node to its end here.", &m.roundDur)
	b.histogram("chainsync_task_duration_seconds", "Time this node's task ran, per round.", &m.taskDur)
	sides := []protocol.Side{}
	if m.role.HasPred() {
		sides = append(sides, protocol.Pred)
	}
	if m.role.HasSucc() {
		sides = append(sides, protocol.Succ)
	}
	b.family("chainsync_link_up", "gauge", "1 if the link to the neighbour on this side is connected and the neighbour heard from, else 0 (down, or silent: nothing heard for two heartbeat intervals).")
	for _, s := range sides {
		v := uint64(0)
		if m.linkUp[s] && !m.silent[s] {
			v = 1
		}
		b.sample("chainsync_link_up", v, "side", s.String())
	}
	b.family("chainsync_reconnects_total", "counter", "Times a link came up again after its first connection.")
	for _, s := range sides {
		b.sample("chainsync_reconnects_total", m.reconnects[s], "side", s.String())
	}
	b.family("chainsync_violations_total", "counter", "Protocol violations by the neighbour on this side (each closed that connection).")
	for _, s := range sides {
		b.sample("chainsync_violations_total", m.violations[s], "side", s.String())
	}
	b.family("chainsync_faults_total", "counter", "Faults this node detected, by kind.")
	kinds := make([]string, 0, len(m.faults))
	for k := range m.faults {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		b.sample("chainsync_faults_total", m.faults[k], "kind", k)
	}
	b.family("chainsync_faults_active", "gauge", "Faults in force here, by kind: reported and not yet over (a round's fault until the round ends here; a neighbour silent or unreachable until it is heard from again; a link's fault until a new link on that side is admitted).")
	activeBy := map[string]uint64{}
	for _, k := range kinds {
		activeBy[k] = 0
	}
	for f := range m.active {
		activeBy[f.kind]++
	}
	kinds = kinds[:0]
	for k := range activeBy {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		b.sample("chainsync_faults_active", activeBy[k], "kind", k)
	}
	b.family("chainsync_build_info", "gauge", "Always 1; the labels say which chainsync is running.")
	b.sample("chainsync_build_info", 1, "version", m.version, "goversion", m.goversion)
	m.mu.Unlock()
	n, err := w.Write(b.buf)
	return int64(n), err
}

// histogram is a Prometheus histogram with fixed buckets.
type histogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative
	sum    float64
	count  uint64
}

func newHistogram(bounds []float64) histogram {
	return histogram{bounds: bounds, counts: make([]uint64, len(bounds))}
}

func (h *histogram) observe(v float64) {
	if i, _ := slices.BinarySearch(h.bounds, v); i < len(h.bounds) {
		h.counts[i]++
	}
	h.sum += v
	h.count++
}

// expo builds an exposition.
type expo struct{ buf []byte }

func (b *expo) family(name, typ, help string) {
	b.buf = fmt.Appendf(b.buf, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
}

// sample writes one line; labels are name, value pairs.
func (b *expo) sample(name string, v uint64, labels ...string) {
	b.buf = append(b.buf, name...)
	b.labels(labels...)
	b.buf = append(b.buf, ' ')
	b.buf = strconv.AppendUint(b.buf, v, 10)
	b.buf = append(b.buf, '\n')
}

func (b *expo) labels(labels ...string) {
	if len(labels) == 0 {
		return
	}
	b.buf = append(b.buf, '{')
	for i := 0; i+1 < len(labels); i += 2 {
		if i > 0 {
			b.buf = append(b.buf, ',')
		}
		b.buf = append(b.buf, labels[i]...)
		b.buf = append(b.buf, `="`...)
		b.buf = append(b.buf, escapeLabel(labels[i+1])...)
		b.buf = append(b.buf, '"')
	}
	b.buf = append(b.buf, '}')
}

func (b *expo) histogram(name, help string, h *histogram) {
	b.family(name, "histogram", help)
	var cum uint64
	for i, ub := range h.bounds {
		cum += h.counts[i]
		b.sample(name+"_bucket", cum, "le", formatFloat(ub))
	}
	b.sample(name+"_bucket", h.count, "le", "+Inf")
	b.buf = fmt.Appendf(b.buf, "%s_sum %s\n", name, formatFloat(h.sum))
	b.sample(name+"_count", h.count)
}

func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// escapeLabel escapes a label value as the text format requires.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// escapeHelp escapes HELP text as the text format requires.
func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}
