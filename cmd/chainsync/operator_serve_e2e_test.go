//go:build unix

package main

// End-to-end tests of a served Head whose --rounds-from input ends: it
// says so once and serves on until it is stopped (README, "`chainsync
// run` flags", --rounds-from and --serve; docs/SERVE.md).

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeRoundsFromEndServesOnE2E: a Head started with --serve and
// --rounds-from runs every round of its input, logs the end of the input
// once, stays up, and exits 130 on SIGTERM, without a panic: for a file of
// three ids, an empty file, and "-" with standard input closed.
//
// Draft: Protocol Operation (the Head opens each round); docs/DESIGN.md,
// "Long-lived chains" (a node may serve); README, "Exit status" (130).
func TestServeRoundsFromEndServesOnE2E(t *testing.T) {
	for _, tc := range []struct {
		name string
		ids  []string
		src  string // "file" or "closed-stdin"
	}{
		{"three ids", []string{"r1", "r2", "r3"}, "file"},
		{"empty file", nil, "file"},
		{"closed stdin", nil, "closed-stdin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			names, addrs, procs := serveChain(t, dir, 2, nil)
			var head *proc
			args := append([]string{"run"}, placeArgs("chain", names, addrs, 0)...)
			args = append(args, "--serve")
			env := []string{"DIR=" + dir}
			task := []string{"--", "sh", "-c", taskScript}
			switch tc.src {
			case "file":
				ids := filepath.Join(dir, "ids")
				text := strings.Join(tc.ids, "\n")
				if text != "" {
					text += "\n"
				}
				if err := os.WriteFile(ids, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(append(args, "--rounds-from", ids), task...)
				head = startProc(t, "A", env, args...)
			case "closed-stdin":
				args = append(append(args, "--rounds-from", "-"), task...)
				head = startCommand(t, "A", env, "chainsync "+strings.Join(args, " ")+" <&-",
					"sh", append([]string{"-c", `exec "$0" "$@" <&-`, bin}, args...)...)
			}
			head.waitLog(t, 10*time.Second, "about the end of --rounds-from", containsAll("--rounds-from: end of input"))
			waitFor(t, 30*time.Second, "round done at the Head for every id", func() bool {
				return head.logCount("round done in the whole chain") >= len(tc.ids)
			})
			checkTasks(t, dir, names, tc.ids, nil)
			// Every round is over and the input has ended: a Head without
			// --serve would exit now; this one serves on.
			if !head.running() {
				t.Fatalf("the Head exited (%d) at the end of --rounds-from; with --serve it serves until stopped", head.code)
			}
			// B may still be starting (with no ids there is no round to
			// wait for): the Head's link to it shows B is up and handling
			// its signals.
			head.waitLog(t, 10*time.Second, "the Head's link to B", containsAll("link up", "succ"))
			head.signal(t, syscall.SIGTERM)
			if code := head.wait(t, 10*time.Second); code != 130 {
				t.Errorf("Head exited %d after SIGTERM, want 130", code)
			}
			if n := head.logCount("--rounds-from: end of input"); n != 1 {
				t.Errorf("the Head logged the end of its input %d times, want once", n)
			}
			if s := head.err.String(); strings.Contains(s, "panic") || strings.Contains(s, "goroutine ") {
				t.Errorf("the Head panicked:\n%s", s)
			}
			procs[1].signal(t, syscall.SIGTERM)
			if code := procs[1].wait(t, 10*time.Second); code != 130 {
				t.Errorf("B exited %d after SIGTERM, want 130", code)
			}
		})
	}
}

// TestIdleServedChainStatusE2E: a served chain placed by --prev whose
// Head has opened no round yet keeps its links (the Head's heartbeats
// say it is alive), and chainsync status at B says its predecessor is
// connected and waiting, not DOWN; the first round then runs.
//
// Draft: Protocol Operation (the Head opens each round); docs/DESIGN.md,
// "Roles and connections" (a pending predecessor); docs/OPERATIONS.md,
// "/status" (waiting).
func TestIdleServedChainStatusE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sa := freeAddrs(t, 2)
	haddr, saddr := sa[0], sa[1]
	names, addrs, _ := serveChain(t, dir, 2, func(int) []string { return []string{"--status-addr", saddr} })
	args := append([]string{"run"}, placeArgs("prevnext", names, addrs, 0)...)
	args = append(args, "--serve", "--status-addr", haddr, "--control", "unix:"+filepath.Join(dir, "ctl"), "--", "sh", "-c", taskScript)
	head := startProc(t, "A", []string{"DIR=" + dir}, args...)
	head.waitLog(t, 10*time.Second, "the Head's link to B", containsAll("link up", "succ"))
	var out string
	waitFor(t, 10*time.Second, "chainsync status saying B's predecessor waits", func() bool {
		out, _, _ = runCLI(t, "status", saddr)
		return strings.Contains(out, "links: pred waiting for a round (")
	})
	// The whole chain, Head first: nodes placed by --prev and --next know
	// their neighbours by address, which contradicts no name.
	out, stderr, code := runCLI(t, "status", haddr+","+saddr)
	if code != 0 || !strings.Contains(out, "waiting for a round (") {
		t.Errorf("chainsync status A,B exited %d:\n%s%s\nwant 0, B's predecessor waiting", code, out, stderr)
	}
	if out, _, code := runCLI(t, "open", "--control", "unix:"+filepath.Join(dir, "ctl"), "--id", "r1", "--wait"); code != 0 {
		t.Fatalf("chainsync open r1 exited %d:\n%s", code, out)
	}
	checkTasks(t, dir, names, []string{"r1"}, nil)
	out, _, _ = runCLI(t, "status", saddr)
	if !strings.Contains(out, "links: pred up") {
		t.Errorf("chainsync status at B after a round:\n%s\nwant its predecessor link up", out)
	}
}
