//go:build unix

package main

// docs/PROTOCOL.md, "The identity line", and docs/FAULTS.md,
// "config-mismatch": a mis-wired chain is named, with the extension lines
// and on the draft's wire, by run and by check.

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// reorderedChain returns a three-node chain A,B,C and the same with C's
// --chain reordered to A,C,B, on hosts (one per node) with free ports.
func reorderedChain(t *testing.T, hosts [3]string) (chain, reordered string) {
	t.Helper()
	addrs := freeAddrs(t, 3)
	var hp [3]string
	for i, a := range addrs {
		_, port, _ := net.SplitHostPort(a)
		hp[i] = net.JoinHostPort(hosts[i], port)
	}
	chain = "A=" + hp[0] + ",B=" + hp[1] + ",C=" + hp[2]
	reordered = "A=" + hp[0] + ",C=" + hp[2] + ",B=" + hp[1]
	return chain, reordered
}

// loopbackHosts skips the test where 127.0.0.11-13 cannot be bound (Linux
// routes all of 127/8 to lo; some systems only 127.0.0.1).
func loopbackHosts(t *testing.T) [3]string {
	t.Helper()
	hosts := [3]string{"127.0.0.11", "127.0.0.12", "127.0.0.13"}
	for _, h := range hosts {
		ln, err := net.Listen("tcp", h+":0")
		if err != nil {
			t.Skipf("cannot listen on %s: %v", h, err)
		}
		ln.Close()
	}
	return hosts
}

// A task that records that it ran.
func ranTask(dir, name string) []string {
	return []string{"sh", "-c", "echo " + name + " >> " + filepath.Join(dir, "ran")}
}

// Three nodes with heartbeats, C given a reordered --chain: within 10 s a
// config-mismatch fault that names the difference, and no task runs.
func TestMisorderedChainHeartbeatsE2E(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		hosts [3]string
	}{
		{"one host", [3]string{"127.0.0.1", "127.0.0.1", "127.0.0.1"}},
		{"own addresses", [3]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hosts := tc.hosts
			if hosts[0] == "" {
				hosts = loopbackHosts(t)
			}
			chain, reordered := reorderedChain(t, hosts)
			dir := t.TempDir()
			start := time.Now()
			var ps []*proc
			for _, n := range []struct{ name, chain string }{{"A", chain}, {"B", chain}, {"C", reordered}} {
				args := append([]string{"run", "--chain", n.chain, "--name", n.name, "--heartbeat", "300ms", "--"}, ranTask(dir, n.name)...)
				ps = append(ps, startProc(t, n.name, nil, args...))
			}
			named := func(l string) bool {
				return strings.Contains(l, "config-mismatch") &&
					(strings.Contains(l, "C's --chain is A,C,B; this node's is A,B,C") || strings.Contains(l, "B's --chain is A,B,C; this node's is A,C,B"))
			}
			found := false
			poll(10*time.Second, func() bool {
				for _, p := range ps[1:] {
					for _, l := range strings.Split(p.err.String(), "\n") {
						if named(l) {
							found = true
						}
					}
				}
				return found
			})
			if !found {
				t.Fatalf("no config-mismatch fault naming the two --chain orders within 10s")
			}
			t.Logf("mismatch named after %v", time.Since(start).Round(time.Millisecond))
			// B and C end their round for it (halt), and A, once told; a
			// node that was not told waits until it is stopped.
			for _, p := range ps {
				if !poll(5*time.Second, func() bool { return !p.running() }) {
					// The mismatch shows only B and C up: A, never told,
					// must handle signals before it gets one.
					waitFor(t, 10*time.Second, p.name+"'s start or exit", func() bool {
						return p.logCount("node started") > 0 || !p.running()
					})
					if p.running() {
						p.signal(t, syscall.SIGTERM)
					}
				}
				if code := p.wait(t, 20*time.Second); code == 0 {
					t.Errorf("%s exited 0 in a mis-wired chain", p.name)
				}
			}
			if b, err := os.ReadFile(filepath.Join(dir, "ran")); err == nil {
				t.Errorf("tasks ran in a mis-wired chain: %q", b)
			}
		})
	}
}

// The same mistake on the draft's wire (no --heartbeat), each node on its
// own address: B refuses C's connection, which comes from C's address,
// not A's, and says at ERROR that C's --chain differs; no task runs.
func TestMisorderedChainDraftWireE2E(t *testing.T) {
	t.Parallel()
	chain, reordered := reorderedChain(t, loopbackHosts(t))
	dir := t.TempDir()
	var ps []*proc
	for _, n := range []struct{ name, chain string }{{"A", chain}, {"B", chain}, {"C", reordered}} {
		args := append([]string{"run", "--chain", n.chain, "--name", n.name, "--"}, ranTask(dir, n.name)...)
		ps = append(ps, startProc(t, n.name, nil, args...))
	}
	ps[1].waitLog(t, 10*time.Second, "naming C's connection", containsAll("ERROR", "the address of C in --chain", "its --chain differs"))
	ps[2].waitLog(t, 10*time.Second, "naming B's connection", containsAll("ERROR", "the address of B in --chain", "its --chain differs"))
	for _, p := range ps {
		// B's and C's refusals show only them up: A must handle signals
		// before it gets one.
		waitFor(t, 10*time.Second, p.name+"'s start or exit", func() bool {
			return p.logCount("node started") > 0 || !p.running()
		})
		if p.running() {
			p.signal(t, syscall.SIGTERM)
		}
		p.wait(t, 20*time.Second)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "ran")); err == nil {
		t.Errorf("tasks ran in a mis-wired chain: %q", b)
	}
}

// check on all three nodes at once, C's --chain reordered: at least one
// exits non-zero naming the reordered chain, and none says "ok" for a
// predecessor connection from another node's address.
func TestMisorderedChainCheckE2E(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		hosts [3]string
		extra []string
	}{
		{"one host", [3]string{"127.0.0.1", "127.0.0.1", "127.0.0.1"}, nil},
		{"own addresses, draft wire", [3]string{}, nil},
		{"own addresses, heartbeats", [3]string{}, []string{"--heartbeat", "300ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hosts := tc.hosts
			if hosts[0] == "" {
				hosts = loopbackHosts(t)
			}
			chain, reordered := reorderedChain(t, hosts)
			type result struct {
				code int
				out  string
			}
			res := make([]result, 3)
			var wg sync.WaitGroup
			for i, n := range []struct{ name, chain string }{{"A", chain}, {"B", chain}, {"C", reordered}} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					args := append([]string{"check", "--chain", n.chain, "--name", n.name, "--timeout", "5s"}, tc.extra...)
					code, out, _ := runBin(t, args...)
					res[i] = result{code, out}
				}()
			}
			wg.Wait()
			named := false
			for i, r := range res {
				t.Logf("check at %c: exit %d\n%s", 'A'+i, r.code, r.out)
				if r.code != 0 && strings.Contains(r.out, "A,C,B") {
					named = true
				}
				for _, l := range strings.Split(r.out, "\n") {
					// B's and C's predecessor, by their own --chain, is A.
					if strings.HasPrefix(l, "predecessor") && strings.Contains(l, ": ok: ") && hosts[0] != hosts[1] &&
						!strings.Contains(l, "connected from "+hosts[0]+":") {
						t.Errorf("check at %c says ok for a predecessor connection that is not A's: %s", 'A'+i, l)
					}
				}
			}
			if !named {
				t.Errorf("no check exited non-zero naming the reordered chain A,C,B")
			}
		})
	}
}
