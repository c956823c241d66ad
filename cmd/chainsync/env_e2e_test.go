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
	addrs := lowAddrs(t, 2)
	p := startProc(t, "check", []string{"CHAINSYNC_CHAIN=" + host + "=" + addrs[0] + ",other=" + addrs[1]}, "check", "--timeout", "1s")
	p.wait(t, 10*time.Second)
	if out := p.out.String(); !strings.HasPrefix(out, "node "+host+": head;") || !strings.Contains(out, "successor other at "+addrs[1]) {
		t.Errorf("stdout:\n%s", out)
	}
}
