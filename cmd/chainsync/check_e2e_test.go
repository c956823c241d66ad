//go:build unix

package main

// chainsync check, the preflight, on the built binary: the same flags and
// security as run, both links checked, no protocol line sent (docs/DESIGN.md
// "Roles and connections" for who dials whom, "Security" for TLS 1.3,
// mutual TLS, pins and PSKs).

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
)

// makeCerts runs chainsync certs for nodes on this machine and returns the
// directory.
func makeCerts(t *testing.T, nodes string) string {
	t.Helper()
	dir := t.TempDir()
	p := startProc(t, "certs", nil, "certs", "--dir", dir, "--nodes", nodes)
	if code := p.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("chainsync certs: exit %d: %s", code, p.err.String())
	}
	return dir
}

func tlsArgs(dir, name string) []string {
	return []string{"--tls-cert", filepath.Join(dir, name+".pem"), "--tls-key", filepath.Join(dir, name+"-key.pem"), "--tls-ca", filepath.Join(dir, "ca.pem")}
}

// pinOf runs chainsync pin.
func pinOf(t *testing.T, cert string) string {
	t.Helper()
	p := startProc(t, "pin", nil, "pin", cert)
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("chainsync pin: exit %d", code)
	}
	return strings.TrimSpace(p.out.String())
}

// checkLine waits for p to exit with want and returns its stdout line about
// the link ("predecessor" or "successor").
func checkLine(t *testing.T, p *proc, want int, link string) string {
	t.Helper()
	code := p.wait(t, 20*time.Second)
	var line string
	for _, l := range strings.Split(p.out.String(), "\n") {
		if strings.HasPrefix(l, link+" ") {
			line = l
		}
	}
	if code != want {
		t.Errorf("%s: exit %d, want %d; stdout:\n%s", p.name, code, want, p.out.String())
	}
	if line == "" {
		t.Fatalf("%s: no %s line in stdout:\n%s", p.name, link, p.out.String())
	}
	return line
}

// TestCheckGoodChain: three nodes running check at once, mutual TLS with a
// CA plus a PSK, each link verified from both ends; exit 0 everywhere.
func TestCheckGoodChain(t *testing.T) {
	t.Parallel()
	certs := makeCerts(t, "A,B,C")
	psk := filepath.Join(t.TempDir(), "psk")
	if p := startProc(t, "psk", nil, "psk", psk); p.wait(t, 5*time.Second) != 0 {
		t.Fatalf("chainsync psk: %s", p.err.String())
	}
	addrs := freeAddrs(t, 3)
	names := nodeNames(3)
	chain := chainFlag(names, addrs)
	procs := make([]*proc, 3)
	for _, n := range []int{2, 0, 1} { // any start order
		args := append([]string{"check", "--chain", chain, "--name", names[n], "--timeout", "15s", "--psk-file", psk}, tlsArgs(certs, names[n])...)
		procs[n] = startProc(t, names[n], nil, append(args, "--", "true")...)
	}
	a := checkLine(t, procs[0], 0, "successor")
	bp := checkLine(t, procs[1], 0, "predecessor")
	bs := checkLine(t, procs[1], 0, "successor")
	c := checkLine(t, procs[2], 0, "predecessor")
	for _, l := range []string{a, bp, bs, c} {
		if !strings.Contains(l, ": ok: ") || !strings.Contains(l, "TLS 1.3") {
			t.Errorf("link line %q: want ok over TLS 1.3", l)
		}
	}
	if !strings.Contains(a, `successor B at `+addrs[1]) || !strings.Contains(a, `certificate "B"`) {
		t.Errorf("A's line %q does not name B and its certificate", a)
	}
	if !strings.Contains(c, `certificate "B"`) {
		t.Errorf("C's line %q does not name B's client certificate", c)
	}
	if out := procs[1].out.String(); !strings.Contains(out, "node B: middle; links: mutual TLS 1.3") {
		t.Errorf("B's summary:\n%s", out)
	}
}

// TestCheckWrongCA: the successor's certificate is from another CA. The
// dialer says "wrong CA"; the successor sees that it was refused. Both
// exit 1.
func TestCheckWrongCA(t *testing.T) {
	t.Parallel()
	ca1, ca2 := makeCerts(t, "A,B"), makeCerts(t, "A,B")
	addrs := freeAddrs(t, 2)
	chain := chainFlag(nodeNames(2), addrs)
	b := startProc(t, "B", nil, append([]string{"check", "--chain", chain, "--name", "B", "--timeout", "10s"}, tlsArgs(ca2, "B")...)...)
	a := startProc(t, "A", nil, append([]string{"check", "--chain", chain, "--name", "A", "--timeout", "10s"}, tlsArgs(ca1, "A")...)...)
	if l := checkLine(t, a, 1, "successor"); !strings.Contains(l, "FAIL: wrong CA") {
		t.Errorf("A: %q, want FAIL: wrong CA", l)
	}
	if l := checkLine(t, b, 1, "predecessor"); !strings.Contains(l, "FAIL: refused by the peer") {
		t.Errorf("B: %q, want FAIL: refused by the peer", l)
	}
}

// TestCheckWrongPin: A pins a key B does not have. A reports the pin
// mismatch; B, which pins A correctly, sees that A refused it.
func TestCheckWrongPin(t *testing.T) {
	t.Parallel()
	certs := makeCerts(t, "A,B,X")
	addrs := freeAddrs(t, 2)
	chain := chainFlag(nodeNames(2), addrs)
	key := func(n string) []string {
		return []string{"--tls-cert", filepath.Join(certs, n+".pem"), "--tls-key", filepath.Join(certs, n+"-key.pem")}
	}
	b := startProc(t, "B", nil, append([]string{"check", "--chain", chain, "--name", "B", "--timeout", "10s",
		"--pin-prev", pinOf(t, filepath.Join(certs, "A.pem"))}, key("B")...)...)
	a := startProc(t, "A", nil, append([]string{"check", "--chain", chain, "--name", "A", "--timeout", "10s",
		"--pin-next", pinOf(t, filepath.Join(certs, "X.pem"))}, key("A")...)...)
	if l := checkLine(t, a, 1, "successor"); !strings.Contains(l, "FAIL: pin mismatch") {
		t.Errorf("A: %q, want FAIL: pin mismatch", l)
	}
	if l := checkLine(t, b, 1, "predecessor"); !strings.Contains(l, "FAIL: refused by the peer") {
		t.Errorf("B: %q, want FAIL: refused by the peer", l)
	}
}

// TestCheckUnreachable: a successor port nobody listens on is "refused",
// a host that does not resolve is "unreachable", a predecessor that
// never comes is reported after --timeout; exit 1 each.
func TestCheckUnreachable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, link, want string
		args             []string
	}{
		// Port 1 (tcpmux): nothing listens there, and unlike a port
		// freed by the test, no parallel test can take it meanwhile.
		{"refused", "successor", "FAIL: refused: nothing listens on 127.0.0.1:1", []string{"--next", "127.0.0.1:1"}},
		// .invalid never resolves (RFC 6761).
		{"unreachable", "successor", "FAIL: unreachable: cannot resolve chainsync.invalid:7000", []string{"--next", "chainsync.invalid:7000"}},
		{"no predecessor", "predecessor", "FAIL: no connection from the predecessor within 1s", []string{"--prev", "127.0.0.1:9", "--listen", "127.0.0.1:0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startProc(t, "A", nil, append([]string{"check", "--timeout", "1s"}, tc.args...)...)
			if l := checkLine(t, p, 1, tc.link); !strings.Contains(l, tc.want) {
				t.Errorf("%q, want %q", l, tc.want)
			}
		})
	}
}

// TestCheckSendsNothing: check reaches a successor and sends no protocol
// line (so no round can start); a plain-TCP link is ok once connected.
func TestCheckSendsNothing(t *testing.T) {
	t.Parallel()
	ln := testnet.ListenPeer(t)
	p := startProc(t, "A", nil, "check", "--next", ln.Addr(), "--timeout", "5s")
	r := ln.Accept(t, 5*time.Second)
	if l := checkLine(t, p, 0, "successor"); !strings.Contains(l, "ok: connected, plain TCP") {
		t.Errorf("%q", l)
	}
	r.ExpectClosed(t, 5*time.Second)
	if got := r.Received(); got != "" {
		t.Errorf("check sent %q", got)
	}
	if !strings.Contains(p.out.String(), "plain TCP (no TLS") {
		t.Errorf("the summary does not say the links are plain TCP:\n%s", p.out.String())
	}
}

// TestCheckUsageErrors: a configuration run would refuse is a usage error
// (exit 2) for check too, before any link is tried; an unknown CHAINSYNC_
// variable is pointed out.
func TestCheckUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"check", "--prev", "127.0.0.1:9"},
		{"check", "--next", "127.0.0.1:9", "--tls-ca", "/no/such/ca.pem"},
		{"check", "--next", "127.0.0.1:9", "--timeout", "0s"},
		{"check", "--next", "127.0.0.1:9", "--", "/no/such/task"},
	} {
		p := startProc(t, "check", nil, args...)
		if code := p.wait(t, 5*time.Second); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr %s", args, code, p.err.String())
		}
	}
	p := startProc(t, "check", []string{"CHAINSYNC_NXET=127.0.0.1:9"}, "check")
	if code := p.wait(t, 5*time.Second); code != 0 || !strings.Contains(p.out.String(), "CHAINSYNC_NXET is set but configures nothing") {
		t.Errorf("exit %d, stdout:\n%s", code, p.out.String())
	}
}

// TestCheckAgainstRunningNode: check reaches a successor that already runs
// chainsync run, through mutual TLS, without starting anything there: the
// running node's round is untouched, and a real predecessor started
// afterwards completes the round with it.
func TestCheckAgainstRunningNode(t *testing.T) {
	t.Parallel()
	certs := makeCerts(t, "A,B")
	addrs := freeAddrs(t, 2)
	chain := chainFlag(nodeNames(2), addrs)
	out := filepath.Join(t.TempDir(), "ran")
	task := []string{"--", "sh", "-c", `echo "$CHAINSYNC_NODE" >> "$OUT"`}
	b := startProc(t, "B", []string{"OUT=" + out}, append(append([]string{"run", "--chain", chain, "--name", "B"}, tlsArgs(certs, "B")...), task...)...)
	b.waitLog(t, 10*time.Second, "node started", containsAll("node started"))
	c := startProc(t, "A-check", nil, append([]string{"check", "--chain", chain, "--name", "A", "--timeout", "10s"}, tlsArgs(certs, "A")...)...)
	if l := checkLine(t, c, 0, "successor"); !strings.Contains(l, `ok: connected, TLS 1.3, server certificate "B"`) {
		t.Errorf("check: %q", l)
	}
	b.waitLog(t, 10*time.Second, "about the checking connection", containsAll("closed before sending a protocol line"))
	if lines := readLines(t, out); len(lines) != 0 {
		t.Fatalf("tasks ran after a check: %v", lines)
	}
	a := startProc(t, "A", []string{"OUT=" + out}, append(append([]string{"run", "--chain", chain, "--name", "A"}, tlsArgs(certs, "A")...), task...)...)
	if code := a.wait(t, 20*time.Second); code != 0 {
		t.Errorf("A exit %d", code)
	}
	if code := b.wait(t, 20*time.Second); code != 0 {
		t.Errorf("B exit %d", code)
	}
	if got := strings.Join(readLines(t, out), " "); got != "A B" {
		t.Errorf("tasks ran %q, want \"A B\"", got)
	}
}

// TestCheckAgainstRunningPredecessor: the other way round: check at B
// takes the connection of a Head that already runs (and is ready: its
// READY comes at once) and sends it nothing ("a running node (it spoke
// first), sent nothing"): the Head sees no bad input, and once the check
// has ended a real B completes the round with it.
func TestCheckAgainstRunningPredecessor(t *testing.T) {
	t.Parallel()
	addrs := freeAddrs(t, 2)
	chain := chainFlag(nodeNames(2), addrs)
	out := filepath.Join(t.TempDir(), "ran")
	task := []string{"--", "sh", "-c", `echo "$CHAINSYNC_NODE" >> "$OUT"`}
	a := startProc(t, "A", []string{"OUT=" + out}, append([]string{"run", "--chain", chain, "--name", "A"}, task...)...)
	a.waitLog(t, 10*time.Second, "A ready", containsAll("locally ready"))
	c := startProc(t, "B-check", nil, "check", "--chain", chain, "--name", "B", "--timeout", "10s")
	if l := checkLine(t, c, 0, "predecessor"); !strings.Contains(l, "ok: connected from") || !strings.Contains(l, "a running node (it spoke first), sent nothing") {
		t.Errorf("check: %q", l)
	}
	b := startProc(t, "B", []string{"OUT=" + out}, append([]string{"run", "--chain", chain, "--name", "B"}, task...)...)
	for _, p := range []*proc{a, b} {
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Errorf("%s exit %d", p.name, code)
		}
	}
	if strings.Contains(a.err.String(), "bad input") {
		t.Errorf("the running Head took the check for bad input:\n%s", a.err.String())
	}
	if got := strings.Join(readLines(t, out), " "); got != "A B" {
		t.Errorf("tasks ran %q, want \"A B\"", got)
	}
}

// TestCheckLocalSettings: check also finds what run would need on this
// machine: a --status-addr it cannot bind, a --trace file in a directory
// that does not exist; exit 1, and nothing is created.
func TestCheckLocalSettings(t *testing.T) {
	t.Parallel()
	taken := testnet.ListenPeer(t)
	trace := filepath.Join(t.TempDir(), "missing", "trace.jsonl")
	p := startProc(t, "check", nil, "check", "--status-addr", taken.Addr(), "--trace", trace)
	if code := p.wait(t, 5*time.Second); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	out := p.out.String()
	for _, want := range []string{"FAIL: status endpoint (--status-addr): cannot listen", "FAIL: trace file (--trace " + trace + "): directory"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if exists(filepath.Dir(trace)) {
		t.Errorf("check created %s", filepath.Dir(trace))
	}
}

// chainsync check compares the settings that must agree between
// neighbours (docs/DESIGN.md, "Extension lines" and "Long-lived chains"):
// A with --round x and --heartbeat against B with --round y and none both
// fail, each naming every difference; the same settings pass and say so
// (different intervals: TestCheckComparesHeartbeatE2E).
func TestCheckComparesSettings(t *testing.T) {
	t.Parallel()
	addrs := freeAddrs(t, 2)
	chain := chainFlag(nodeNames(2), addrs)
	b := startProc(t, "B", nil, "check", "--chain", chain, "--name", "B", "--timeout", "10s", "--round", "y")
	a := startProc(t, "A", nil, "check", "--chain", chain, "--name", "A", "--timeout", "10s", "--round", "x", "--heartbeat", "1s")
	al := checkLine(t, a, 1, "successor")
	bl := checkLine(t, b, 1, "predecessor")
	for _, l := range []string{al, bl} {
		for _, want := range []string{"FAIL: configuration mismatch", "runs round x, the successor round y", "--heartbeat is on at the predecessor and off at the successor"} {
			if !strings.Contains(l, want) {
				t.Errorf("%q does not say %q", l, want)
			}
		}
	}
	addrs = freeAddrs(t, 2)
	chain = chainFlag(nodeNames(2), addrs)
	b = startProc(t, "B2", nil, "check", "--chain", chain, "--name", "B", "--timeout", "10s", "--round", "x", "--heartbeat", "1s")
	a = startProc(t, "A2", nil, "check", "--chain", chain, "--name", "A", "--timeout", "10s", "--round", "x", "--heartbeat", "1s")
	for _, l := range []string{checkLine(t, a, 0, "successor"), checkLine(t, b, 0, "predecessor")} {
		if !strings.Contains(l, ": ok: ") || !strings.Contains(l, "same round settings, --heartbeat and --serve") {
			t.Errorf("%q: want ok with the same settings", l)
		}
	}
}
