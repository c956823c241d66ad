//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Logs that speak only of the links a node has (the draft's "Roles": the
// Head has no predecessor, the Tail no successor): a Head whose successor
// is pinned does not log "predecessor NOT authenticated", a Tail does not
// log "successor checked against system roots", in run's start log and in
// check's report, and neither is warned about the link it lacks.
func TestLogsOnlyAboutSidesTheNodeHas(t *testing.T) {
	t.Parallel()
	certs := makeCerts(t, "A,B")
	addrs := freeAddrs(t, 2)
	chain := "A=" + addrs[0] + ",B=" + addrs[1]
	key := func(n string) []string {
		return []string{"--tls-cert", filepath.Join(certs, n+".pem"), "--tls-key", filepath.Join(certs, n+"-key.pem")}
	}
	head := append(append([]string{"--chain", chain, "--name", "A"}, key("A")...), "--pin-next", pinOf(t, filepath.Join(certs, "B.pem")))
	// Nothing authenticates the Tail's predecessor: said on purpose, or
	// the Tail would refuse to start (TestHalfAuthenticatedNodeRefused).
	tail := append([]string{"--chain", chain, "--name", "B", "--insecure-accept-any-predecessor"}, key("B")...)
	for _, tc := range []struct {
		name       string
		flags      []string
		want, lack string
	}{
		{"head", head, "pinned successor", "predecessor"},
		{"tail", tail, "predecessor NOT authenticated", "successor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// chainsync check: the description line and the warnings.
			p := startProc(t, "check "+tc.name, nil, append(append([]string{"check"}, tc.flags...), "--timeout", "200ms")...)
			p.wait(t, 20*time.Second)
			out := p.out.String() + p.err.String()
			desc := ""
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "links: ") {
					desc = l
				}
				if strings.HasPrefix(l, "warning:") && strings.Contains(l, tc.lack) {
					t.Errorf("check warns about the %s this node does not have: %s", tc.lack, l)
				}
			}
			if !strings.Contains(desc, tc.want) || strings.Contains(desc, tc.lack) {
				t.Errorf("check's links line %q: want %q, nothing about the %s", desc, tc.want, tc.lack)
			}
			// chainsync run: the start log and its warnings.
			r := startProc(t, "run "+tc.name, nil, append(append([]string{"run"}, tc.flags...), "--", "true")...)
			line := r.waitLog(t, 20*time.Second, "node started", containsAll("node started"))
			r.signal(t, syscall.SIGTERM)
			r.wait(t, 20*time.Second)
			links := line[strings.Index(line, "links="):]
			if !strings.Contains(links, tc.want) || strings.Contains(links, tc.lack) {
				t.Errorf("start log %q: want %q, nothing about the %s", line, tc.want, tc.lack)
			}
			for _, l := range strings.Split(r.err.String(), "\n") {
				if strings.Contains(l, "warning") && strings.Contains(l, tc.lack) {
					t.Errorf("run warns about the %s this node does not have: %s", tc.lack, l)
				}
			}
		})
	}
}
