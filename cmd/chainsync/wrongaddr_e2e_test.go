//go:build unix

package main

// A client of a node pointed at the wrong one of its addresses says so:
// chainsync open at a chain port or a status endpoint, chainsync status at
// a chain port or a control socket (README, "Commands"; docs/SERVE.md for
// --control, docs/OPERATIONS.md, "Where does it stand?", for
// --status-addr).

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClientsNameTheWrongAddressE2E: a served chain A -> B, A with
// --control on TCP, B with --status-addr. chainsync open at B's chain port
// says that the address answered but not as a control socket and asks
// whether it is a chain port; at B's status endpoint, that it speaks HTTP.
// chainsync status at B's chain port and at A's control address says that
// the address is not a status endpoint, and what it probably is.
func TestClientsNameTheWrongAddressE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ports := freeAddrs(t, 2)
	control, statusAddr := ports[0], ports[1]
	names, addrs, procs := serveChain(t, dir, 2, func(int) []string { return []string{"--status-addr", statusAddr} })
	args := headArgs(dir, names, addrs, "--serve", "--control", control, "--", "sh", "-c", taskScript)
	head := startProc(t, "A", []string{"DIR=" + dir}, args...)
	head.waitLog(t, 10*time.Second, "control endpoint up", func(string) bool {
		c, _, _ := openCmdQuiet(t, "--control", control, "--id", "warm-up", "--wait")
		return c == 0
	})
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"open", "--control", addrs[1]}, []string{addrs[1] + " answered, but not as a chainsync control socket", "is it a chain port"}},
		{[]string{"open", "--control", statusAddr}, []string{statusAddr + " answered, but not as a chainsync control socket", "HTTP"}},
		{[]string{"status", addrs[1]}, []string{addrs[1] + " answered, but not as a chainsync status endpoint", "is it a chain port"}},
		{[]string{"status", control}, []string{control + " answered, but not as a chainsync status endpoint", "--control"}},
	} {
		p := startProc(t, "client", nil, tc.args...)
		if code := p.wait(t, 30*time.Second); code != 1 {
			t.Errorf("chainsync %s: exit %d, want 1", strings.Join(tc.args, " "), code)
		}
		for _, w := range tc.want {
			if !strings.Contains(p.err.String(), w) {
				t.Errorf("chainsync %s: stderr does not say %q:\n%s", strings.Join(tc.args, " "), w, p.err.String())
			}
		}
		if strings.Contains(p.err.String(), "did not answer: EOF") {
			t.Errorf("chainsync %s: still says only EOF:\n%s", strings.Join(tc.args, " "), p.err.String())
		}
	}
	for _, p := range []*proc{head, procs[1]} {
		p.signal(t, syscall.SIGTERM)
		if code := p.wait(t, 10*time.Second); code != 130 {
			t.Errorf("%s exited %d after SIGTERM, want 130", p.name, code)
		}
	}
}

// openCmdQuiet is openCmd for a caller that polls: a failure is not
// logged.
func openCmdQuiet(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	p := startProc(t, "open", nil, append([]string{"open"}, args...)...)
	code := p.wait(t, time.Minute)
	return code, p.out.String(), p.err.String()
}
