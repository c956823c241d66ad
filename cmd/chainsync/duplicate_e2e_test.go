//go:build unix

package main

// docs/FAULTS.md, "duplicate-node": one live process in each place of the
// chain. A second Head with the same flags is refused at B, which reports
// duplicate-node naming both addresses; the second Head reports it too,
// none of its rounds runs anywhere, and the first Head's rounds complete.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSecondHeadIsDuplicateE2E(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, form string
		psk        bool
		heartbeat  string // "": --serve's default, 2s
	}{
		{"chain", "chain", false, "300ms"},
		{"chain, pre-shared key", "chain", true, "300ms"},
		{"prev and next", "prevnext", false, "300ms"},
		{"prev and next, served defaults", "prevnext", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			names, addrs := nodeNames(4), freeAddrs(t, 4)
			var common []string
			if tc.psk {
				common = append(common, "--psk-file", newPSK(t))
			}
			task := []string{"--", "sh", "-c", `echo "$CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/tasks"`}
			hooked := `echo "$CHAINSYNC_NODE $CHAINSYNC_FAULT" >> "$DIR/faults"`
			env := []string{"DIR=" + dir}
			nodeArgs := func(i int, extra ...string) []string {
				args := append([]string{"run"}, placeArgs(tc.form, names, addrs, i)...)
				args = append(args, "--serve", "--on-fault", hooked)
				if tc.heartbeat != "" {
					args = append(args, "--heartbeat", tc.heartbeat)
				}
				args = append(append(args, common...), extra...)
				return append(args, task...)
			}
			var procs []*proc
			for i := 3; i >= 1; i-- {
				procs = append(procs, startProc(t, names[i], env, nodeArgs(i)...))
			}
			sock1, sock2 := filepath.Join(dir, "one.sock"), filepath.Join(dir, "two.sock")
			head1 := startProc(t, "A", env, nodeArgs(0, "--control", "unix:"+sock1)...)
			waitFor(t, 10*time.Second, "the first Head's control socket", func() bool { return exists(sock1) })
			if code, _, errOut := openCmd(t, "--control", "unix:"+sock1, "--id", "one-1", "--wait"); code != 0 {
				t.Fatalf("open one-1 at the first Head: exit %d: %s", code, errOut)
			}

			start := time.Now()
			head2 := startProc(t, "A2", env, nodeArgs(0, "--control", "unix:"+sock2)...)
			b := procs[2]
			line := b.waitLog(t, 10*time.Second, "duplicate-node at B", containsAll("duplicate-node", "two live processes"))
			t.Logf("B reported the duplicate after %v: %s", time.Since(start).Round(time.Millisecond), line)
			// Both addresses: the first Head's connection (B's link up)
			// and the second's.
			peers := linkPeers(b.err.String())
			addrsIn := map[string]bool{}
			for _, a := range addrRE.FindAllString(line, -1) {
				addrsIn[a] = true
			}
			if len(peers) == 0 || !addrsIn[peers[0]] || len(addrsIn) < 2 {
				t.Errorf("B's duplicate-node line names %v, want the first Head's %v and the second's", addrsIn, peers)
			}
			head2.waitLog(t, 10*time.Second, "duplicate-node at the second Head", containsAll("duplicate-node", "refused this node"))

			// A round opened at the second Head never runs; the first
			// Head's rounds go on.
			waitFor(t, 10*time.Second, "the second Head's control socket", func() bool { return exists(sock2) })
			if code, _, _ := openCmd(t, "--control", "unix:"+sock2, "--id", "two-1", "--wait"); code == 0 {
				t.Errorf("open two-1 at the second Head exited 0")
			}
			for _, id := range []string{"one-2", "one-3"} {
				if code, _, errOut := openCmd(t, "--control", "unix:"+sock1, "--id", id, "--wait"); code != 0 {
					t.Fatalf("open %s at the first Head: exit %d: %s", id, code, errOut)
				}
			}
			tasks, _ := os.ReadFile(filepath.Join(dir, "tasks"))
			if strings.Contains(string(tasks), "two-") {
				t.Errorf("a task of a round opened at the second Head ran:\n%s", tasks)
			}
			for _, n := range names {
				for _, id := range []string{"one-1", "one-2", "one-3"} {
					if c := strings.Count(string(tasks), n+" "+id+"\n"); c != 1 {
						t.Errorf("%s ran %s %d times, want once", n, id, c)
					}
				}
			}
			faults, _ := os.ReadFile(filepath.Join(dir, "faults"))
			if c := strings.Count(string(faults), "B duplicate-node"); c != 1 {
				t.Errorf("B's --on-fault ran %d times for duplicate-node, want once:\n%s", c, faults)
			}
			for _, p := range append(procs, head1, head2) {
				if p.running() {
					p.signal(t, syscall.SIGTERM)
				}
				p.wait(t, 20*time.Second)
			}
		})
	}
}

// linkPeers returns the peers of the predecessor links a node logged as
// up, in order.
func linkPeers(log string) []string {
	var peers []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "link up") && strings.Contains(l, "pred") {
			if _, p, ok := strings.Cut(l, "peer="); ok {
				peers = append(peers, strings.Fields(p)[0])
			}
		}
	}
	return peers
}

var addrRE = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+`)

// A predecessor whose old connection stays open but silent (its process
// stopped, as a machine that rebooted without closing it) is no
// duplicate: a new process in its place gets in once the old connection
// has been silent for two heartbeat intervals, and its rounds run. When
// the old process wakes up, it is the newcomer, and is refused.
func TestSilentPredecessorReplacedE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names, addrs := nodeNames(3), freeAddrs(t, 3)
	env := []string{"DIR=" + dir}
	nodeArgs := func(i int, extra ...string) []string {
		args := append([]string{"run"}, placeArgs("chain", names, addrs, i)...)
		args = append(append(args, "--serve", "--heartbeat", "300ms"), extra...)
		return append(args, "--", "sh", "-c", `echo "$CHAINSYNC_NODE $CHAINSYNC_ROUND" >> "$DIR/tasks"`)
	}
	var procs []*proc
	for i := 2; i >= 1; i-- {
		procs = append(procs, startProc(t, names[i], env, nodeArgs(i)...))
	}
	sock1, sock2 := filepath.Join(dir, "one.sock"), filepath.Join(dir, "two.sock")
	old := startProc(t, "A", env, nodeArgs(0, "--control", "unix:"+sock1)...)
	waitFor(t, 10*time.Second, "the first Head's control socket", func() bool { return exists(sock1) })
	if code, _, errOut := openCmd(t, "--control", "unix:"+sock1, "--id", "one-1", "--wait"); code != 0 {
		t.Fatalf("open one-1: exit %d: %s", code, errOut)
	}
	old.signal(t, syscall.SIGSTOP)
	start := time.Now()
	head := startProc(t, "A2", env, nodeArgs(0, "--control", "unix:"+sock2)...)
	b := procs[1]
	b.waitLog(t, 10*time.Second, "the new Head's link up", containsAll("predecessor connection replaced"))
	t.Logf("the new Head got in after %v", time.Since(start).Round(time.Millisecond))
	waitFor(t, 10*time.Second, "the new Head's control socket", func() bool { return exists(sock2) })
	if code, _, errOut := openCmd(t, "--control", "unix:"+sock2, "--id", "two-1", "--wait"); code != 0 {
		t.Fatalf("open two-1 at the Head that replaced a silent one: exit %d: %s", code, errOut)
	}
	if strings.Contains(b.err.String(), "duplicate-node") {
		t.Errorf("B took a replacement for a silent predecessor for a duplicate")
	}
	// The old Head wakes up: now it is the second process in A's place.
	old.signal(t, syscall.SIGCONT)
	b.waitLog(t, 10*time.Second, "duplicate-node for the old Head", containsAll("duplicate-node", "two live processes"))
	if code, _, errOut := openCmd(t, "--control", "unix:"+sock2, "--id", "two-2", "--wait"); code != 0 {
		t.Fatalf("open two-2: exit %d: %s", code, errOut)
	}
	tasks, _ := os.ReadFile(filepath.Join(dir, "tasks"))
	for _, n := range names[1:] {
		for _, id := range []string{"one-1", "two-1", "two-2"} {
			if c := strings.Count(string(tasks), n+" "+id+"\n"); c != 1 {
				t.Errorf("%s ran %s %d times, want once:\n%s", n, id, c, tasks)
			}
		}
	}
	for _, p := range append(procs, old, head) {
		if p.running() {
			p.signal(t, syscall.SIGTERM)
		}
		p.wait(t, 20*time.Second)
	}
}

// On the draft's wire (no --heartbeat) there is no telling a live
// predecessor connection from a dead one, so two Heads dialling B take
// turns; B says so at ERROR, once a minute at most, naming both.
func TestTwoPredecessorsDraftWireE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names, addrs := nodeNames(3), freeAddrs(t, 3)
	args := func(i int) []string {
		return append(append([]string{"run"}, placeArgs("chain", names, addrs, i)...), "--", "sh", "-c", `echo "$CHAINSYNC_NODE" >> "$DIR/tasks"`)
	}
	env := []string{"DIR=" + dir}
	// No C: the round cannot finish, and the Heads keep dialling.
	b := startProc(t, "B", env, args(1)...)
	a1 := startProc(t, "A", env, args(0)...)
	b.waitLog(t, 10*time.Second, "the first Head's link up", containsAll("link up", "pred"))
	a2 := startProc(t, "A2", env, args(0)...)
	line := b.waitLog(t, 10*time.Second, "the two Heads named", containsAll("ERROR", "two nodes dial this node as its predecessor:"))
	if len(addrRE.FindAllString(line, -1)) < 2 {
		t.Errorf("the line names fewer than two addresses: %s", line)
	}
	// Once a minute at most: the flipping goes on, the line does not.
	flips := b.logCount("predecessor connection replaced")
	waitFor(t, 10*time.Second, "more replacements", func() bool { return b.logCount("predecessor connection replaced") >= flips+6 })
	if c := b.logCount("two nodes dial this node as its predecessor"); c != 1 {
		t.Errorf("logged %d times, want once", c)
	}
	for _, p := range []*proc{a1, a2, b} {
		p.signal(t, syscall.SIGTERM)
		p.wait(t, 20*time.Second)
	}
}
