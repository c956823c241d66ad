//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The control socket takes only what docs/STEERING.md ("The control
// socket") documents, open --wait-for picks up a lost --wait, and a
// --control other machines could reach is refused at start. What starts
// a round at the Head ("Phase 1 -- Readiness Collection") is the
// implementation's: these tests hold it to its word.

// sendRaw sends line to the unix socket at path as it is and returns the
// one reply line, decoded.
func sendRaw(t *testing.T, path, line string) map[string]any {
	t.Helper()
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	reply, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		t.Fatalf("%s: no reply: %v", line, err)
	}
	var m map[string]any
	if err := json.Unmarshal(reply, &m); err != nil {
		t.Fatalf("%s: reply %q: %v", line, reply, err)
	}
	return m
}

// TestControlRefusesJunkE2E: null, {}, {"cmd":"hold"} and {"op":"nosuch"}
// on the Head's control socket (and on B's) are each refused with an
// error reply; no round opens at any node and B is not held: the round
// opened next is the first and only one every node runs, and it runs.
func TestControlRefusesJunkE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names := []string{"A", "B", "C"}
	procs := servedChain(t, dir, names, func(n string) []string {
		if n == "B" {
			return []string{"--control", controlOf(dir, "B")}
		}
		return nil
	})
	controlsUp(t, dir, "A", "B")
	junk := []string{`null`, `{}`, `{"cmd":"hold"}`, `{"op":"nosuch"}`}
	for _, n := range []string{"A", "B"} {
		for _, line := range junk {
			rep := sendRaw(t, filepath.Join(dir, n+".sock"), line)
			if e, _ := rep["error"].(string); e == "" || rep["round"] != nil || rep["message"] != nil {
				t.Errorf("%s's control socket answered %s with %v, want an error and nothing else", n, line, rep)
			}
		}
	}
	if code, out, errOut := steerCmd(t, "open", "--control", controlOf(dir, "A"), "--id", "r1", "--wait"); code != 0 || out != "r1\n" {
		t.Fatalf("open r1 --wait after the junk: exit %d, %q %s", code, out, errOut)
	}
	for _, n := range names {
		if got := ranRounds(t, dir, n); !slices.Equal(got, []string{"r1"}) {
			t.Errorf("%s ran %v, want only r1: a junk line opened a round", n, got)
		}
	}
	for _, n := range []string{"A", "B"} {
		if got := procs[n].logCount("control request refused"); got != len(junk) {
			t.Errorf("%s logged %d refused control requests, want %d", n, got, len(junk))
		}
	}
}

// TestOpenWaitForE2E: an open --wait that is lost (its client killed)
// while the round is held at C is picked up by open --wait-for: it prints
// the id and exits 0 once the round is done; asked again after the end it
// answers at once. For a round whose task fails at C, --wait-for and
// --wait print the same, with the task's error as C's notice carried it,
// and exit 3 alike. A round the Head does not know
// is refused, exit 1.
func TestOpenWaitForE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	task := `if [ "$CHAINSYNC_NODE" = C ] && [ "$CHAINSYNC_ROUND" = r2 ]; then exit 7; fi
echo "$CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/$CHAINSYNC_NODE.ran"`
	procs := servedChainTask(t, dir, []string{"A", "B", "C", "D"}, func(n string) []string {
		args := []string{"--fault-policy", "wait"}
		if n == "C" {
			args = append(args, "--control", controlOf(dir, "C"))
		}
		return args
	}, task)
	controlsUp(t, dir, "A", "C")
	head := controlOf(dir, "A")
	steer := func(args ...string) {
		t.Helper()
		if code, _, errOut := steerCmd(t, args...); code != 0 {
			t.Fatalf("%v exited %d: %s", args, code, errOut)
		}
	}
	waitFor := func(id string) *proc {
		t.Helper()
		n := procs["A"].logCount("--wait-for waits", "round="+id)
		p := startProc(t, "wait-for "+id, nil, "open", "--control", head, "--wait-for", id)
		waitFor(t, 10*time.Second, "the Head taking --wait-for "+id, func() bool {
			return procs["A"].logCount("--wait-for waits", "round="+id) > n
		})
		return p
	}

	lost := heldAtC(t, dir, "r1")
	lost.signal(t, syscall.SIGKILL)
	lost.wait(t, 10*time.Second)
	again := waitFor("r1")
	steer("release", "--control", controlOf(dir, "C"))
	if code := again.wait(t, 20*time.Second); code != 0 || again.out.String() != "r1\n" {
		t.Fatalf("open --wait-for r1 exited %d, %q, %s; want 0 and r1", code, again.out.String(), again.err.String())
	}
	if got := ranRounds(t, dir, "D"); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("--wait-for r1 returned with D having run %v, want r1", got)
	}
	if code, out, errOut := steerCmd(t, "open", "--control", head, "--wait-for", "r1"); code != 0 || out != "r1\n" {
		t.Fatalf("open --wait-for r1, done already: exit %d, %q %s", code, out, errOut)
	}

	waited := heldAtC(t, dir, "r2")
	pickedUp := waitFor("r2")
	steer("release", "--control", controlOf(dir, "C"))
	for _, p := range []*proc{waited, pickedUp} {
		if code := p.wait(t, 20*time.Second); code != 3 {
			t.Errorf("%s exited %d, want 3 (task failed at C): %s", p.name, code, p.err.String())
		}
	}
	if waited.out.String() != pickedUp.out.String() || waited.err.String() != pickedUp.err.String() ||
		!strings.Contains(waited.err.String(), "task failed at node C") || !strings.Contains(waited.err.String(), "exited with status 7") {
		t.Errorf("open --wait and --wait-for differ for r2:\n--wait: %q %q\n--wait-for: %q %q",
			waited.out.String(), waited.err.String(), pickedUp.out.String(), pickedUp.err.String())
	}

	if code, _, errOut := steerCmd(t, "open", "--control", head, "--wait-for", "nosuch"); code != 1 || !strings.Contains(errOut, "nothing to wait for") {
		t.Errorf("open --wait-for a round never opened: exit %d, %s; want 1, nothing to wait for", code, errOut)
	}
	if code, _, errOut := steerCmd(t, "open", "--control", head, "--wait-for", "r1", "--id", "r9"); code != 2 {
		t.Errorf("open --wait-for with --id: exit %d, %s; want 2", code, errOut)
	}
	if got := ranRounds(t, dir, "A"); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Errorf("A ran %v, want r1 r2: --wait-for opened a round", got)
	}
}

// TestControlBeyondLoopbackRefusedE2E: --control on an address other
// machines can reach starts nothing (exit 2, naming unix:PATH, loopback
// and --insecure-control), from the flag or CHAINSYNC_CONTROL;
// --insecure-control alone is refused; with it, such a node starts and
// serves its control socket.
func TestControlBeyondLoopbackRefusedE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addrs := freeAddrs(t, 3)
	_, port, _ := net.SplitHostPort(addrs[2])
	chain := chainOf([]string{"A", "B"}, addrs[:2])
	task := []string{"--", "sh", "-c", `touch "$DIR/ran"`}
	for _, tc := range []struct {
		args, env []string
		want      []string
	}{
		{args: []string{"--control", "0.0.0.0:" + port}, want: []string{"--control 0.0.0.0:" + port, "no authentication", "unix:PATH", "127.0.0.1:PORT", "--insecure-control"}},
		{args: []string{"--control", ":" + port}, want: []string{"--control :" + port, "--insecure-control"}},
		{env: []string{"CHAINSYNC_CONTROL=[::]:" + port}, want: []string{"--control [::]:" + port, "CHAINSYNC_CONTROL", "--insecure-control"}},
		{args: []string{"--insecure-control"}, want: []string{"--insecure-control without --control"}},
	} {
		args := append(append([]string{"run", "--chain", chain, "--name", "A"}, tc.args...), task...)
		p := startProc(t, "A", append([]string{"DIR=" + dir}, tc.env...), args...)
		if code := p.wait(t, 10*time.Second); code != 2 {
			t.Errorf("%v %v: exit %d, want 2", tc.env, tc.args, code)
		}
		for _, w := range tc.want {
			if !strings.Contains(p.err.String(), w) {
				t.Errorf("%v %v: stderr does not say %q:\n%s", tc.env, tc.args, w, p.err.String())
			}
		}
	}
	a := startProc(t, "A", []string{"DIR=" + dir}, append([]string{"run", "--chain", chain, "--name", "A", "--serve",
		"--control", "0.0.0.0:" + port, "--insecure-control"}, task...)...)
	a.waitLog(t, 10*time.Second, "the control endpoint up", containsAll("control endpoint up", "0.0.0.0:"+port))
	a.signal(t, syscall.SIGTERM)
	if code := a.wait(t, 10*time.Second); code != 130 {
		t.Errorf("A with --insecure-control exited %d after SIGTERM, want 130", code)
	}
	if exists(filepath.Join(dir, "ran")) {
		t.Error("a task ran: B never started, so no round could")
	}
}

// TestOpenWaitHeadGoneE2E: the Head dies while open --wait waits for a
// round held at C: open exits 1 naming the round it opened, that the
// connection closed (not that the socket is no control socket), and how
// to wait for it again (open --wait-for).
func TestOpenWaitHeadGoneE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	procs := servedChainTask(t, dir, []string{"A", "B", "C"}, func(n string) []string {
		if n == "C" {
			return []string{"--control", controlOf(dir, "C")}
		}
		return nil
	}, `echo "$CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/$CHAINSYNC_NODE.ran"`)
	controlsUp(t, dir, "A", "C")
	p := heldAtC(t, dir, "g1")
	procs["A"].signal(t, syscall.SIGKILL)
	if code := p.wait(t, 20*time.Second); code != 1 ||
		!strings.Contains(p.err.String(), "round g1: the Head went away") || !strings.Contains(p.err.String(), "--wait-for g1") ||
		!strings.Contains(p.err.String(), "closed: the node stopped, or was killed") || strings.Contains(p.err.String(), "not as a chainsync control socket") {
		t.Fatalf("open --wait when the Head died: exit %d\n%s", code, p.err.String())
	}
}

// controlsUp waits until the control sockets of names (in dir, as
// controlOf names them) take connections.
func controlsUp(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		waitFor(t, 10*time.Second, n+"'s control socket", func() bool { return exists(filepath.Join(dir, n+".sock")) })
	}
}

// heldAtC holds C (its --control in dir), opens id with --wait at the
// Head A, and returns the open once id's task ran at B: the round waits
// at C's hold.
func heldAtC(t *testing.T, dir, id string) *proc {
	t.Helper()
	if code, _, errOut := steerCmd(t, "hold", "--control", controlOf(dir, "C")); code != 0 {
		t.Fatalf("hold at C: exit %d: %s", code, errOut)
	}
	p := startProc(t, "open "+id, nil, "open", "--control", controlOf(dir, "A"), "--id", id, "--wait")
	waitFor(t, 20*time.Second, "B's task for "+id, func() bool { return slices.Contains(ranRounds(t, dir, "B"), id) })
	return p
}
