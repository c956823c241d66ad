//go:build unix

package main

// Configuration from the environment, on the built binary (docs/DESIGN.md,
// "Configuration from the environment").

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEnvConfiguresChain: a two-node chain configured through CHAINSYNC_
// variables. A flag on the command line wins (A's --name over
// CHAINSYNC_NAME); CHAINSYNC_ROUND, the variable a node sets for its task,
// configures nothing (its value is not even a valid round id, which --round
// would refuse); the task still sees its own CHAINSYNC_ROUND and _NODE.
func TestEnvConfiguresChain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "order")
	addrs := freeAddrs(t, 2)
	chain := "A=" + addrs[0] + ",B=" + addrs[1]
	task := []string{"--", "sh", "-c", `echo "$CHAINSYNC_NODE:$CHAINSYNC_ROUND:$CHAINSYNC_ROLE" >> "$OUT"`}
	common := []string{"OUT=" + out, "CHAINSYNC_CHAIN=" + chain, "CHAINSYNC_ROUND=not a round!", "CHAINSYNC_LINGER=2s"}
	b := startProc(t, "B", append(common, "CHAINSYNC_NAME=B", "CHAINSYNC_LOG_LEVEL=debug"), append([]string{"run"}, task...)...)
	a := startProc(t, "A", append(common, "CHAINSYNC_NAME=Z"), append([]string{"run", "--name", "A"}, task...)...)
	if code := a.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("A exit %d", code)
	}
	if code := b.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("B exit %d", code)
	}
	if got := strings.Join(readLines(t, out), " "); got != "A::head B::tail" {
		t.Errorf("tasks ran as %q, want \"A::head B::tail\"", got)
	}
	b.waitLog(t, time.Second, "saying CHAINSYNC_CHAIN was read", containsAll("DEBUG", "setting from the environment", "--chain", "CHAINSYNC_CHAIN"))
	if strings.Contains(a.err.String(), "DEBUG") {
		t.Errorf("A logged at debug level without CHAINSYNC_LOG_LEVEL:\n%s", a.err.String())
	}
}

// TestEnvBadValue: a variable the flag refuses, or a value run's checks
// refuse (a bad round id through CHAINSYNC_ROUND_ID), is a usage error
// (exit 2) that names the variable.
func TestEnvBadValue(t *testing.T) {
	t.Parallel()
	for _, kv := range []string{"CHAINSYNC_PHASE_TIMEOUT=soon", "CHAINSYNC_ROUND_ID=bad id!", "CHAINSYNC_LOG_LEVEL=loud"} {
		t.Run(kv, func(t *testing.T) {
			p := startProc(t, "A", []string{kv}, "run", "--next", "127.0.0.1:9", "--", "true")
			if code := p.wait(t, 5*time.Second); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			name, _, _ := strings.Cut(kv, "=")
			if s := p.err.String(); !strings.Contains(s, name) {
				t.Errorf("stderr does not name %s:\n%s", name, s)
			}
		})
	}
}

// TestNameDefaultsToHostName: with --chain and no --name, the node is the
// chain member named like this machine (a StatefulSet pod's name-0, ...).
func TestNameDefaultsToHostName(t *testing.T) {
	t.Parallel()
	host, err := os.Hostname()
	if err != nil || host == "" || strings.ContainsAny(host, ",=") {
		t.Skipf("no usable host name (%q, %v)", host, err)
	}
	addrs := freeAddrs(t, 2)
	p := startProc(t, "check", []string{"CHAINSYNC_CHAIN=" + host + "=" + addrs[0] + ",other=" + addrs[1]}, "check", "--timeout", "1s")
	p.wait(t, 10*time.Second)
	if out := p.out.String(); !strings.HasPrefix(out, "node "+host+": head;") || !strings.Contains(out, "successor other at "+addrs[1]) {
		t.Errorf("stdout:\n%s", out)
	}
}

// TestTaskEnvHasNoNodeSettings (issue: tasks inherited the node's
// CHAINSYNC_ settings): a node configured through CHAINSYNC_ variables,
// among them CHAINSYNC_PSK_FILE's kind of setting and an unknown one,
// starts its task, --ready-cmd, --verify-cmd and --on-fault with none of
// them: each sees only the variables its node sets for it.
func TestTaskEnvHasNoNodeSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dump := func(name string) string {
		return `env | grep '^CHAINSYNC_' | cut -d= -f1 | sort | tr '\n' ' ' > "$OUT/` + name + `"`
	}
	env := []string{"OUT=" + dir, "CHAINSYNC_LINGER=1s", "CHAINSYNC_STATUS_INTERVAL=1m",
		"CHAINSYNC_ON_FAULT_TIMEOUT=10s", "CHAINSYNC_SOMETHING_ELSE=x", "CHAINSYNC_ROUND=from-a-parent"}
	ok := startProc(t, "ok", env, "run", "--name", "S", "--round", "r1",
		"--ready-cmd", dump("ready"), "--verify-cmd", dump("verify"), "--", "sh", "-c", dump("task")+`; echo "$CHAINSYNC_ROUND" > "$OUT/round"`)
	if code := ok.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("node exited %d", code)
	}
	bad := startProc(t, "bad", env, "run", "--name", "S", "--round", "r1",
		"--on-fault", dump("hook"), "--", "sh", "-c", dump("failed")+"; exit 1")
	if code := bad.wait(t, 20*time.Second); code != 3 {
		t.Fatalf("failing node exited %d, want 3", code)
	}
	for file, want := range map[string]string{
		"ready":  "CHAINSYNC_NODE CHAINSYNC_ROUND ",
		"verify": "CHAINSYNC_NODE CHAINSYNC_ROUND ",
		"task":   "CHAINSYNC_NODE CHAINSYNC_ROLE CHAINSYNC_ROUND ",
		"failed": "CHAINSYNC_NODE CHAINSYNC_ROLE CHAINSYNC_ROUND ",
		"hook":   "CHAINSYNC_ERROR CHAINSYNC_FAULT CHAINSYNC_NODE CHAINSYNC_ORIGIN CHAINSYNC_PEER CHAINSYNC_ROUND CHAINSYNC_SIDE ",
	} {
		// The node waits for its hook before it exits: the file is there.
		got, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s saw CHAINSYNC_ variables %q, want %q", file, got, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "round")); string(b) != "r1\n" {
		t.Errorf("the task saw CHAINSYNC_ROUND=%q, want its own round r1", b)
	}
}
