package chainsync

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// docs/DESIGN.md "Roles and connections": pending connections are bounded,
// and a stray client never displaces the real predecessor. When the slots
// are full, the connection evicted is the one with the least progress
// (sent nothing, then sent bytes, then authenticated), the oldest first;
// a newcomer never simply loses.
func TestPickVictim(t *testing.T) {
	t0 := time.Now()
	mk := func(age time.Duration, stage int) *pendingConn {
		p := &pendingConn{since: t0.Add(-age)}
		p.active.Store(stage >= stageActive)
		p.authed = stage == stageAuthed
		return p
	}
	for _, tc := range []struct {
		name  string
		cands []*pendingConn
		want  int
	}{
		{"none", nil, -1},
		{"oldest idle", []*pendingConn{mk(1*time.Second, stageIdle), mk(3*time.Second, stageIdle), mk(2*time.Second, stageIdle)}, 1},
		{"idle before an older active one", []*pendingConn{mk(9*time.Second, stageActive), mk(time.Millisecond, stageIdle)}, 1},
		{"active before an older authenticated one", []*pendingConn{mk(9*time.Second, stageAuthed), mk(time.Millisecond, stageActive)}, 1},
		{"oldest active", []*pendingConn{mk(time.Second, stageActive), mk(2*time.Second, stageActive), mk(9*time.Second, stageAuthed)}, 1},
		{"all authenticated: the oldest", []*pendingConn{mk(time.Second, stageAuthed), mk(5*time.Second, stageAuthed)}, 1},
	} {
		if got := pickVictim(tc.cands); got != tc.want {
			t.Errorf("%s: victim %d, want %d", tc.name, got, tc.want)
		}
	}
}

// The admission log is rate-limited: per interval, the first admitBurst
// events of each kind one by one, then one summary line with the counts.
func TestAdmitLimiter(t *testing.T) {
	var buf bytes.Buffer
	w := newAdmitLimiter(slog.New(slog.NewTextHandler(&buf, nil)))
	for i := range 1000 {
		w.note(kindEvicted, slog.LevelWarn, "evicted", "peer", "10.0.0.1:1", "n", i)
		w.note(kindRefused, slog.LevelWarn, "refused would-be predecessor", "peer", "10.0.0.2:2", "reason", "not TLS")
	}
	w.note(kindClosed, slog.LevelInfo, "closed early", "peer", "10.0.0.3:3")
	w.flush(time.Second)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if want := 2*admitBurst + 1 + 1; len(lines) != want {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), want, buf.String())
	}
	sum := lines[len(lines)-1]
	for _, part := range []string{"refused=1000", "evicted=1000", "closed_early=1", "timed_out=0", "not_logged=1980", "last_peer=10.0.0.2:2", `last="not TLS"`} {
		if !strings.Contains(sum, part) {
			t.Errorf("summary %q lacks %q", sum, part)
		}
	}
	// A quiet interval writes nothing; the next one starts afresh.
	buf.Reset()
	w.flush(time.Second)
	w.note(kindEvicted, slog.LevelWarn, "evicted", "peer", "10.0.0.1:1")
	w.flush(time.Second)
	if got := strings.Count(buf.String(), "\n"); got != 1 {
		t.Errorf("after a reset: %d lines, want the one event:\n%s", got, buf.String())
	}
}

// At the Head (no predecessor) every refusal is its successor's: the
// summary says so, not "would-be predecessors", and names the successor's
// address as the last peer (the dialer logs it as next).
func TestAdmitLimiterHeadSummary(t *testing.T) {
	var buf bytes.Buffer
	w := newAdmitLimiter(slog.New(slog.NewTextHandler(&buf, nil)))
	w.noPred = true
	for range admitBurst + 3 {
		w.note(kindRefused, slog.LevelWarn, "successor refused or failed authentication; nothing sent; retrying", "next", "127.0.0.1:39542", "reason", "bad certificate")
	}
	w.flush(time.Second)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	sum := lines[len(lines)-1]
	if strings.Contains(sum, "predecessor") || !strings.Contains(sum, "refusals by the successor") || !strings.Contains(sum, "last_peer=127.0.0.1:39542") {
		t.Errorf("the Head's summary: %s", sum)
	}
}

// Events the caller would trace are traced only while they are logged; the
// rest are counted, per side, for one trace record at the interval's end
// (issue: 2,000 junk connections cost 2,000 trace records).
func TestAdmitLimiterTraceSample(t *testing.T) {
	var buf bytes.Buffer
	w := newAdmitLimiter(slog.New(slog.NewTextHandler(&buf, nil)))
	counts := map[protocol.Side]int{}
	w.untraced = func(side protocol.Side, count int, peer, last string, _ time.Duration) { counts[side] += count }
	traced := 0
	for range 500 {
		if w.noteTraced(kindBadInput, protocol.Pred, slog.LevelWarn, "bad input", "peer", "p") {
			traced++
		}
	}
	if w.noteTraced(kindRefused, protocol.Succ, slog.LevelWarn, "refused", "peer", "s") {
		traced++
	}
	w.flush(time.Second)
	if traced != admitBurst+1 || counts[protocol.Pred] != 500-admitBurst || counts[protocol.Succ] != 0 {
		t.Errorf("traced %d, untraced %v; want %d traced and %d counted for pred", traced, counts, admitBurst+1, 500-admitBurst)
	}
	if !strings.Contains(buf.String(), "bad_input=500") {
		t.Errorf("summary lacks bad_input=500:\n%s", buf.String())
	}
}
