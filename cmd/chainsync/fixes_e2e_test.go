//go:build unix

package main

// Errors that say what to do: each message below names the flag, variable
// or command that fixes it, and a bad address is a usage error (exit 2)
// that starts nothing.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// chainsync certs over existing files changes nothing and names --force.
func TestCertsExistingNamesForce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, _, stderr := runBin(t, "certs", "--dir", dir, "--nodes", "A,B"); code != 0 {
		t.Fatalf("first certs: exit %d: %s", code, stderr)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runBin(t, "certs", "--dir", dir, "--nodes", "A,B")
	if code != 1 || !strings.Contains(stderr, "--force") || !strings.Contains(stderr, "nothing written") {
		t.Errorf("certs over existing files: exit %d, want 1 and a message naming --force:\n%s", code, stderr)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); string(again) != string(ca) {
		t.Error("the refused certs run changed ca.pem")
	}
	if code, _, stderr := runBin(t, "certs", "--dir", dir, "--nodes", "A,B", "--force"); code != 0 {
		t.Errorf("certs --force: exit %d: %s", code, stderr)
	}
}

// A bad address in a flag is a usage error (exit 2) naming that flag, not
// "cannot listen" (exit 1) once the node runs; the task never runs.
func TestBadAddressIsUsageError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--listen", "127.0.0.1:8x", "--prev", "127.0.0.1:7000"}, `--listen "127.0.0.1:8x"`},
		{[]string{"--listen", "127.0.0.1:70000", "--prev", "127.0.0.1:7000"}, `--listen "127.0.0.1:70000"`},
		{[]string{"--status-addr", "127.0.0.1:9x"}, `--status-addr "127.0.0.1:9x"`},
		{[]string{"--status-addr", "127.0.0.1:65536"}, `--status-addr "127.0.0.1:65536"`},
		{[]string{"--next", "127.0.0.1:0"}, `--next "127.0.0.1:0"`},
		{[]string{"--chain", "A=127.0.0.1:7000,B=127.0.0.1:x", "--name", "A"}, `--chain entry "B=127.0.0.1:x"`},
	} {
		args := append(append([]string{"run"}, tc.args...), "--", "sh", "-c", "touch "+filepath.Join(dir, "ran"))
		code, _, stderr := runBin(t, args...)
		if code != 2 || !strings.Contains(stderr, tc.flag) || !strings.Contains(stderr, "port") {
			t.Errorf("run %v: exit %d, want 2 and the flag %s named with its port:\n%s", tc.args, code, tc.flag, stderr)
		}
		// check reads the same flags: the same verdict.
		code, _, stderr = runBin(t, append([]string{"check"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.flag) {
			t.Errorf("check %v: exit %d, want 2 naming %s:\n%s", tc.args, code, tc.flag, stderr)
		}
	}
	if exists(filepath.Join(dir, "ran")) {
		t.Error("a task ran despite a usage error")
	}
}

// run, like check, warns about a CHAINSYNC_ variable that configures
// nothing, and names the one it probably meant.
func TestRunWarnsUnknownEnv(t *testing.T) {
	t.Parallel()
	p := startProc(t, "single", []string{"CHAINSYNC_HEARTBEET=1s"}, "run", "--", "true")
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.err.String())
	}
	if !strings.Contains(p.err.String(), "CHAINSYNC_HEARTBEET is set but configures nothing") ||
		!strings.Contains(p.err.String(), "did you mean CHAINSYNC_HEARTBEAT?") {
		t.Errorf("run did not warn about CHAINSYNC_HEARTBEET naming CHAINSYNC_HEARTBEAT:\n%s", p.err.String())
	}
	c := startProc(t, "check", []string{"CHAINSYNC_HEARTBEET=1s"}, "check")
	c.wait(t, 20*time.Second)
	if !strings.Contains(c.out.String(), "did you mean CHAINSYNC_HEARTBEAT?") {
		t.Errorf("check did not name CHAINSYNC_HEARTBEAT:\n%s", c.out.String())
	}
}

// --help spells flags as the docs do: --flag VALUE, with the default shown
// as a default, not as the value's placeholder.
func TestHelpShowsDoubleDashFlags(t *testing.T) {
	t.Parallel()
	out, _, code := runCLI(t, "run", "--help")
	if code != 0 {
		t.Fatalf("run --help: exit %d", code)
	}
	for _, want := range []string{"--fault-policy POLICY", "(default halt)", "--heartbeat D", "--listen HOST:PORT", "--quiet ", "--linger D", "(default 10s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("run --help lacks %q", want)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "-") && !strings.HasPrefix(strings.TrimSpace(l), "--") {
			t.Errorf("run --help has a single-dash flag line: %q", l)
		}
	}
}

// --prev is checked, weakly: its host must resolve at start (else a usage
// error naming --prev), and a predecessor connecting from another host is
// refused and logged; one from --prev's host runs the round.
func TestPrevHostChecked(t *testing.T) {
	t.Parallel()
	code, _, stderr := runBin(t, "run", "--prev", "no-such-host.invalid:7000", "--listen", "127.0.0.1:0", "--", "true")
	if code != 2 || !strings.Contains(stderr, `--prev "no-such-host.invalid:7000": cannot resolve`) {
		t.Errorf("--prev with a host that does not resolve: exit %d, want 2 naming --prev:\n%s", code, stderr)
	}
	addrs := freeAddrs(t, 2)
	// 192.0.2.1 is a documentation address: A's connection cannot come
	// from it.
	b := startProc(t, "B", nil, "run", "--name", "B", "--listen", addrs[1], "--prev", "192.0.2.1:7000", "--", "true")
	a := startProc(t, "A", nil, "run", "--name", "A", "--next", addrs[1], "--", "true")
	b.waitLog(t, 20*time.Second, "refusing A's connection", containsAll("refused would-be predecessor", "not the predecessor's host 192.0.2.1", "--prev"))
	a.signal(t, syscall.SIGTERM)
	b.signal(t, syscall.SIGTERM)
	a.wait(t, 20*time.Second)
	b.wait(t, 20*time.Second)
	if strings.Contains(b.err.String(), "task started") {
		t.Error("B ran its task for a predecessor on the wrong host")
	}

	// The same chain with B's --prev naming A's host: done.
	addrs = freeAddrs(t, 2)
	b = startProc(t, "B", nil, "run", "--name", "B", "--listen", addrs[1], "--prev", "localhost:7000", "--", "true")
	a = startProc(t, "A", nil, "run", "--name", "A", "--next", addrs[1], "--", "true")
	if code := a.wait(t, 20*time.Second); code != 0 {
		t.Errorf("A exited %d", code)
	}
	if code := b.wait(t, 20*time.Second); code != 0 {
		t.Errorf("B exited %d", code)
	}
}
