package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
)

// Tests of the task times chainsync journal prints (docs/OPERATIONS.md,
// "Reading a state directory: `chainsync journal`").

// TestJournalTimeFormats: the table gives local time to the millisecond,
// with the date when it is not today, and "-" when not recorded; --json
// gives RFC 3339 in UTC with milliseconds, "" (omitted) when not recorded.
func TestJournalTimeFormats(t *testing.T) {
	zone := time.FixedZone("X", 2*3600)
	now := time.Date(2026, 12, 2, 23, 30, 0, 0, zone)
	at := time.Date(2026, 12, 2, 14, 2, 3, 512_000_000, zone)
	for _, c := range []struct {
		t    time.Time
		want string
	}{
		{at, "14:02:03.512"},
		{at.UTC(), "14:02:03.512"}, // shown in now's zone
		{at.AddDate(0, 0, -1), "2026-12-01 14:02:03.512"},
		{now.Add(time.Hour), "2026-12-03 00:30:00.000"}, // tomorrow there
		{time.Time{}, "-"},
	} {
		if got := tableTime(c.t, now); got != c.want {
			t.Errorf("tableTime(%v) = %q, want %q", c.t, got, c.want)
		}
	}
	if got := jsonMillis(at); got != "2026-12-02T12:02:03.512Z" {
		t.Errorf("jsonMillis = %q", got)
	}
	if got := jsonMillis(time.Time{}); got != "" {
		t.Errorf("jsonMillis(zero) = %q", got)
	}
}

// TestJournalPrintsTaskTimes: a state directory whose round's task
// started and ended (the journal records both as it saves the round's
// records) shows both times, in the table and in --json, within the time
// the records were saved; a round whose task never started shows "-" and
// has no times in --json.
func TestJournalPrintsTaskTimes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	j, _, err := journal.Open(dir, journal.Header{Role: "single", Name: "S"})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().Truncate(time.Millisecond)
	for _, st := range []protocol.State{protocol.StateSync, protocol.StateStart, protocol.StateDone} {
		recs := []protocol.Record{{Round: "r1", State: st, LocalReady: true}}
		if st == protocol.StateSync {
			recs = append(recs, protocol.Record{Round: "r2", State: st})
		}
		if err := j.Save(recs); err != nil {
			t.Fatal(err)
		}
	}
	after := time.Now()
	j.Close()

	var out, errOut bytes.Buffer
	if code := journalMain([]string{"--json", dir}, &out, &errOut); code != 0 {
		t.Fatalf("journal --json: exit %d: %s", code, errOut.String())
	}
	var doc struct {
		Rounds []map[string]any `json:"rounds"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil || len(doc.Rounds) != 2 {
		t.Fatalf("journal --json: %v\n%s", err, out.String())
	}
	var times []time.Time
	for _, k := range []string{"task_started", "task_ended"} {
		s, _ := doc.Rounds[0][k].(string)
		v, err := time.Parse(time.RFC3339, s)
		if err != nil || !strings.HasSuffix(s, "Z") || len(s) != len("2006-01-02T15:04:05.000Z") {
			t.Fatalf("r1 %s = %q (%v): want RFC 3339, UTC, milliseconds", k, s, err)
		}
		if v.Before(before) || v.After(after) {
			t.Errorf("r1 %s = %v, not within the saves (%v to %v)", k, v, before, after)
		}
		times = append(times, v)
	}
	if times[1].Before(times[0]) {
		t.Errorf("r1 ended %v before it started %v", times[1], times[0])
	}
	for _, k := range []string{"task_started", "task_ended"} {
		if v, ok := doc.Rounds[1][k]; ok {
			t.Errorf("r2, never started: %s = %v, want it omitted", k, v)
		}
	}

	out.Reset()
	if code := journalMain([]string{dir}, &out, &errOut); code != 0 {
		t.Fatalf("journal: exit %d: %s", code, errOut.String())
	}
	text := out.String()
	now := time.Now()
	for _, w := range []string{"STARTED", "ENDED", "as this node recorded them", "older journals have none",
		tableTime(times[0], now), tableTime(times[1], now)} {
		if !strings.Contains(text, w) {
			t.Errorf("journal does not say %q:\n%s", w, text)
		}
	}
	if strings.Contains(text, "not times") {
		t.Errorf("journal still says it records no times:\n%s", text)
	}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "r2" && !strings.Contains(line, " -  ") {
			t.Errorf("r2's line does not show its times as -: %q", line)
		}
	}
}
