//go:build unix

package main

// End-to-end tests of what a node's counters and log say after a restart:
// they count what this process did, never what the state directory
// remembers of an earlier one. docs/OPERATIONS.md, "Counters across
// restarts".

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// metricValue is the value of the sample named exactly series (name and
// labels, as printed) in a /metrics page, and whether it is there.
func metricValue(page, series string) (uint64, bool) {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// TestCountersAfterRestartE2E: a served chain A, B, C, each with a
// --state-dir, B with --status-addr. Five rounds are opened and done
// (open --wait). B is killed with SIGKILL and started again on its state
// directory: its /metrics counts no round done, opened or in progress
// (those five belong to the process that died), and its log has no
// "round over" line for them. A sixth round, done after the restart, is
// counted once and logged once.
//
// docs/OPERATIONS.md, "Counters across restarts"; docs/DESIGN.md,
// "Restarts and durable state".
func TestCountersAfterRestartE2E(t *testing.T) {
	dir := t.TempDir()
	names, addrs := nodeNames(3), freeAddrs(t, 4)
	statusAddr := addrs[3]
	sock := filepath.Join(dir, "control.sock")
	start := func(i int) *proc {
		args := append([]string{"run"}, placeArgs("prevnext", names, addrs[:3], i)...)
		args = append(args, "--serve", "--state-dir", filepath.Join(dir, names[i]))
		switch i {
		case 0:
			args = append(args, "--control", "unix:"+sock, "--quiet")
		case 1:
			args = append(args, "--status-addr", statusAddr)
		default:
			args = append(args, "--quiet")
		}
		return startProc(t, names[i], []string{"DIR=" + dir}, append(args, "--", "sh", "-c", taskScript)...)
	}
	procs := make([]*proc, 3)
	for i := 2; i >= 0; i-- {
		procs[i] = start(i)
	}
	procs[0].waitLog(t, 10*time.Second, "control endpoint up", func(string) bool { return exists(sock) })
	var ids []string
	for k := range 5 {
		id := fmt.Sprintf("r%d", k)
		if code, _, errOut := openCmd(t, "--control", "unix:"+sock, "--id", id, "--wait"); code != 0 {
			t.Fatalf("open --id %s --wait: exit %d: %s", id, code, errOut)
		}
		ids = append(ids, id)
	}
	// B's round is over once its last COMPLETE to A was written, and it
	// logs so in the turn after that write: the Head's result (and so
	// open --wait) may come first. Wait for the fifth line, then count.
	waitFor(t, 10*time.Second, "fifth \"round over\" line of B", func() bool {
		return procs[1].logCount("round over", "status=done") >= 5
	})
	if n := procs[1].logCount("round over", "status=done"); n != 5 {
		t.Fatalf("B logged %d \"round over ... status=done\" lines before its restart, want 5", n)
	}
	procs[1].signal(t, syscall.SIGKILL)
	procs[1].wait(t, 5*time.Second)
	procs[1] = start(1)
	// The restarted B has read its journal once its status endpoint is
	// up and it says it resumed.
	procs[1].waitLog(t, 10*time.Second, "B resumed", containsAll("resumed from the state directory"))
	var page string
	waitFor(t, 10*time.Second, "B's /metrics", func() bool {
		page = httpGetQuiet("http://" + statusAddr + "/metrics")
		return page != ""
	})
	for _, series := range []string{
		`chainsync_rounds_total{outcome="done"}`,
		`chainsync_rounds_opened_total`,
		`chainsync_rounds_in_progress`,
	} {
		if v, ok := metricValue(page, series); !ok || v != 0 {
			t.Errorf("restarted B: %s = %d (present %v), want 0: those rounds ended in the process that died", series, v, ok)
		}
	}
	if n := procs[1].logCount("round over"); n != 0 {
		t.Errorf("restarted B logged %d \"round over\" lines for rounds that ended before it started:\n%s", n, procs[1].err.String())
	}
	// A round after the restart is counted and logged once.
	if code, _, errOut := openCmd(t, "--control", "unix:"+sock, "--id", "r5", "--wait"); code != 0 {
		t.Fatalf("open --id r5 --wait after B's restart: exit %d: %s", code, errOut)
	}
	ids = append(ids, "r5")
	waitFor(t, 10*time.Second, "\"round over\" line of B for r5", func() bool {
		return procs[1].logCount("round over", "round=r5") >= 1
	}) // as above: B's end of the round may come after the Head's
	page = httpGet(t, "http://"+statusAddr+"/metrics")
	if v, _ := metricValue(page, `chainsync_rounds_total{outcome="done"}`); v != 1 {
		t.Errorf(`restarted B: chainsync_rounds_total{outcome="done"} = %d after one more round, want 1`, v)
	}
	if v, _ := metricValue(page, `chainsync_rounds_opened_total`); v != 1 {
		t.Errorf(`restarted B: chainsync_rounds_opened_total = %d after one more round, want 1`, v)
	}
	if n := procs[1].logCount("round over", "round=r5"); n != 1 {
		t.Errorf("restarted B logged %d \"round over\" lines for r5, want 1", n)
	}
	if n := procs[1].logCount("round over"); n != 1 {
		t.Errorf("restarted B logged %d \"round over\" lines, want 1 (r5's)", n)
	}
	checkTasks(t, dir, names, ids, nil)
}

// httpGetQuiet is the body of a GET that answered 200, or "".
func httpGetQuiet(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}
