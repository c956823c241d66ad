//go:build unix

package main

// chainsync journal DIR: what a state directory remembers, read without
// starting a node (docs/OPERATIONS.md, "Reading a state directory:
// `chainsync journal`"; docs/JOURNAL.md).

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// journalJSON is the part of chainsync journal --json the tests read.
type journalJSON struct {
	Name   string `json:"name"`
	Role   string `json:"role"`
	Node   string `json:"node"`
	Ended  string `json:"ended_at"`
	Rounds []struct {
		Round       string `json:"round"`
		State       string `json:"state"`
		Task        string `json:"task"`
		TaskStarted string `json:"task_started"`
		TaskEnded   string `json:"task_ended"`
		Outcome     string `json:"outcome"`
		ExitWave    string `json:"exit_wave"`
	} `json:"rounds"`
	Damage string `json:"damage"`
}

// journalCmd runs chainsync journal and returns its exit code, stdout and
// stderr.
func journalCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	p := startProc(t, "journal", nil, append([]string{"journal"}, args...)...)
	code := p.wait(t, 30*time.Second)
	return code, p.out.String(), p.err.String()
}

func journalDoc(t *testing.T, dir string) journalJSON {
	t.Helper()
	code, out, errOut := journalCmd(t, "--json", dir)
	if code != 0 {
		t.Fatalf("chainsync journal --json %s: exit %d: %s", dir, code, errOut)
	}
	var doc journalJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("chainsync journal --json does not parse: %v\n%s", err, out)
	}
	return doc
}

// TestJournalFinishedE2E: the state directories of a two-node chain that
// finished: each round done, the task succeeded, when it started and
// ended (both recorded, start before end, within the test's run), B's
// exit wave delivered to A, A's came back, and both nodes ended normally,
// in text and JSON.
// docs/DESIGN.md, "Restarts and durable state" (finished means
// delivered; the journal records it).
func TestJournalFinishedE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names, addrs := nodeNames(2), freeAddrs(t, 2)
	begun := time.Now().Truncate(time.Millisecond) // the records hold milliseconds
	var procs []*proc
	for i := 1; i >= 0; i-- {
		args := append([]string{"run"}, placeArgs("chain", names, addrs, i)...)
		args = append(args, "--rounds", "2", "--quiet", "--state-dir", filepath.Join(dir, names[i]), "--", "true")
		procs = append(procs, startProc(t, names[i], nil, args...))
	}
	for _, p := range procs {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("%s exited %d", p.name, code)
		}
	}
	finished := time.Now()
	for i, name := range names {
		sd := filepath.Join(dir, name)
		code, out, errOut := journalCmd(t, sd)
		if code != 0 {
			t.Fatalf("journal %s: exit %d: %s", name, code, errOut)
		}
		for _, w := range []string{"node " + name, "ended normally at", "ROUND", "STARTED", "ENDED", "as this node recorded them", "started and succeeded", "done"} {
			if !strings.Contains(out, w) {
				t.Errorf("journal %s does not say %q:\n%s", name, w, out)
			}
		}
		doc := journalDoc(t, sd)
		if doc.Name != name || doc.Ended == "" || len(doc.Rounds) != 2 {
			t.Fatalf("journal --json %s: %+v", name, doc)
		}
		wave := "came back from the successor"
		if i == 1 {
			wave = "delivered to the predecessor"
		}
		for _, r := range doc.Rounds {
			if r.State != "DONE" || r.Task != "succeeded" || r.Outcome != "done" || r.ExitWave != wave {
				t.Errorf("journal --json %s: round %+v, want DONE, succeeded, done, %s", name, r, wave)
			}
			started, err1 := time.Parse(time.RFC3339, r.TaskStarted)
			ended, err2 := time.Parse(time.RFC3339, r.TaskEnded)
			if err1 != nil || err2 != nil || ended.Before(started) || started.Before(begun) || ended.After(finished) {
				t.Errorf("journal --json %s: round %s's task started %q, ended %q (%v, %v); want both, start <= end, within %s to %s",
					name, r.Round, r.TaskStarted, r.TaskEnded, err1, err2, begun.Format(time.RFC3339Nano), finished.Format(time.RFC3339Nano))
			}
			if local := started.Local().Format("15:04:05.000"); !strings.Contains(out, local) {
				t.Errorf("journal %s: the table does not show round %s's start %s:\n%s", name, r.Round, local, out)
			}
		}
	}
}

// TestJournalRunningThenKilledE2E: beside a running node whose task is
// running, chainsync journal says the node runs (it holds the lock) and
// the task started (when) with no end recorded, and changes nothing (the node
// then finishes normally); after a kill -9 of another such node, it says
// the node is gone and its task has no recorded end.
// docs/DESIGN.md, "Restarts and durable state"; docs/RESTARTS.md.
func TestJournalRunningThenKilledE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	task := []string{"--", "sh", "-c", `touch "$DIR/started-$CHAINSYNC_NODE"; while [ ! -e "$DIR/go" ]; do sleep 0.05; done`}
	start := func(name string) *proc {
		args := append([]string{"run", "--name", name, "--round", "r1", "--state-dir", filepath.Join(dir, name)}, task...)
		return startProc(t, name, []string{"DIR=" + dir}, args...)
	}
	running, killed := start("A"), start("K")
	for _, n := range []string{"A", "K"} {
		waitFor(t, 30*time.Second, "the task of "+n+" to start", func() bool { return exists(filepath.Join(dir, "started-"+n)) })
	}
	doc := journalDoc(t, filepath.Join(dir, "A"))
	if !strings.HasPrefix(doc.Node, "running: pid "+strconv.Itoa(running.cmd.Process.Pid)) {
		t.Errorf("beside a running node: node %q, want running and its pid", doc.Node)
	}
	if len(doc.Rounds) != 1 || doc.Rounds[0].State != "START" || doc.Rounds[0].Task != "running-or-interrupted" || doc.Rounds[0].Outcome != "in progress" ||
		doc.Rounds[0].TaskStarted == "" || doc.Rounds[0].TaskEnded != "" {
		t.Errorf("beside a running node: rounds %+v; want START, its start time and no end", doc.Rounds)
	}
	if err := killed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed.wait(t, 10*time.Second)
	doc = journalDoc(t, filepath.Join(dir, "K"))
	if !strings.Contains(doc.Node, "is gone") || doc.Ended != "" {
		t.Errorf("after kill -9: node %q, ended %q; want gone, no end", doc.Node, doc.Ended)
	}
	if len(doc.Rounds) != 1 || doc.Rounds[0].Task != "running-or-interrupted" {
		t.Errorf("after kill -9: rounds %+v", doc.Rounds)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := running.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("the node read beside exited %d, want 0", code)
	}
	if doc := journalDoc(t, filepath.Join(dir, "A")); doc.Ended == "" || doc.Rounds[0].Outcome != "done" {
		t.Errorf("after the end: %+v", doc)
	}
}

// TestJournalBadInputE2E: a directory that is not a state directory, and
// a journal damaged before its end, exit 2 with the reason; for the
// damaged one, where, and the rounds before the damage are printed.
// docs/JOURNAL.md, "Damage".
func TestJournalBadInputE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, _, errOut := journalCmd(t, dir)
	if code != 2 || !strings.Contains(errOut, "not a state directory") {
		t.Errorf("plain directory: exit %d, stderr %q; want 2, not a state directory", code, errOut)
	}
	sd := filepath.Join(dir, "B")
	p := startProc(t, "B", nil, "run", "--name", "B", "--rounds", "3", "--quiet", "--state-dir", sd, "--", "true")
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("node exited %d", code)
	}
	path := filepath.Join(sd, "journal")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The second round's record: the header's frame, then round 0's.
	hdr := 8 + int(data[3])
	second := hdr + 8 + int(data[hdr+3])
	data[second+8+3] ^= 0x20 // a payload byte: its checksum no longer matches
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := journalCmd(t, sd)
	if code != 2 {
		t.Errorf("damaged journal: exit %d, want 2", code)
	}
	for _, w := range []string{"corrupt", "offset " + strconv.Itoa(second), "before the damage"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("damaged journal: stderr does not say %q:\n%s", w, errOut)
		}
	}
	if !strings.Contains(out, "1 round(s)") || !strings.Contains(out, "\n0 ") {
		t.Errorf("damaged journal: want round 0, the record before the damage, printed:\n%s", out)
	}
	code, out, _ = journalCmd(t, "--json", sd)
	var doc journalJSON
	if code != 2 || json.Unmarshal([]byte(out), &doc) != nil || doc.Damage == "" || len(doc.Rounds) != 1 {
		t.Errorf("damaged journal --json: exit %d, %+v\n%s", code, doc, out)
	}
}
