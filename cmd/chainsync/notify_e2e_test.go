//go:build unix

package main

// systemd Type=notify, on the built binary against a fake NOTIFY_SOCKET.

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeSystemd is the notification socket systemd would pass in
// NOTIFY_SOCKET; it collects the datagrams.
type fakeSystemd struct {
	c  *net.UnixConn
	ch chan string
}

func newFakeSystemd(t *testing.T, name string) *fakeSystemd {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSystemd{c: c, ch: make(chan string, 100)}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := c.Read(b)
			if err != nil {
				close(f.ch)
				return
			}
			f.ch <- string(b[:n])
		}
	}()
	t.Cleanup(func() { c.Close() })
	return f
}

// await returns the first datagram (skipping others) for which match
// holds, and the ones skipped.
func (f *fakeSystemd) await(t *testing.T, what string, match func(string) bool) (string, []string) {
	t.Helper()
	var seen []string
	timeout := time.After(15 * time.Second)
	for {
		select {
		case m, ok := <-f.ch:
			if !ok {
				t.Fatalf("socket closed waiting for %s; got %q", what, seen)
			}
			if match(m) {
				return m, seen
			}
			seen = append(seen, m)
		case <-timeout:
			t.Fatalf("no notification %s within 15s; got %q", what, seen)
		}
	}
}

// TestSystemdNotify: a Tail under Type=notify sends READY=1 first, once it
// listens (a connection to its --listen succeeds right after), then only
// STATUS= lines, and STOPPING=1 with the outcome last; its task does not
// inherit NOTIFY_SOCKET. Run on a socket path
// and in the abstract namespace.
func TestSystemdNotify(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"path", "abstract"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			socket := filepath.Join(dir, "notify")
			if kind == "abstract" {
				socket = fmt.Sprintf("@chainsync-e2e-notify-%d-%d", os.Getpid(), time.Now().UnixNano())
			}
			sys := newFakeSystemd(t, socket)
			addrs := freeAddrs(t, 2)
			chain := chainFlag(nodeNames(2), addrs)
			gate, env := filepath.Join(dir, "go"), filepath.Join(dir, "task-env")
			task := []string{"--", "sh", "-c", `env > "$ENVFILE"; while [ ! -e "$GATE" ]; do sleep 0.05; done`}
			b := startProc(t, "B", []string{"NOTIFY_SOCKET=" + socket, "GATE=" + gate, "ENVFILE=" + env},
				append([]string{"run", "--chain", chain, "--name", "B", "--linger", "2s"}, task...)...)

			first, _ := sys.await(t, "READY=1", func(string) bool { return true })
			if !strings.HasPrefix(first, "READY=1\nSTATUS=") {
				t.Fatalf("first notification %q, want READY=1 with a STATUS", first)
			}
			c, err := net.DialTimeout("tcp", addrs[1], time.Second)
			if err != nil {
				t.Fatalf("READY=1 sent but B does not listen yet: %v", err)
			}
			c.Close()

			a := startProc(t, "A", []string{"GATE=" + gate, "ENVFILE=" + filepath.Join(dir, "a-env")},
				append([]string{"run", "--chain", chain, "--name", "A"}, task...)...)
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			last, seen := sys.await(t, "STOPPING=1", func(m string) bool { return strings.HasPrefix(m, "STOPPING=1\n") })
			if last != "STOPPING=1\nSTATUS=done" {
				t.Errorf("last notification %q, want STOPPING=1 and STATUS=done", last)
			}
			for _, m := range seen {
				if !strings.HasPrefix(m, "STATUS=") {
					t.Errorf("notification %q between READY=1 and STOPPING=1", m)
				}
			}
			if code := a.wait(t, 15*time.Second); code != 0 {
				t.Errorf("A exit %d", code)
			}
			if code := b.wait(t, 15*time.Second); code != 0 {
				t.Errorf("B exit %d", code)
			}
			if e, _ := os.ReadFile(env); strings.Contains(string(e), "NOTIFY_SOCKET") || len(e) == 0 {
				t.Errorf("B's task environment has NOTIFY_SOCKET or is missing:\n%s", e)
			}
		})
	}
}

// TestSystemdNotifyStatus: STATUS= follows the round while it waits: B,
// the Tail, says it waits for COMPLETE from its predecessor while A's task
// runs.
func TestSystemdNotifyStatus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	socket := filepath.Join(dir, "notify")
	sys := newFakeSystemd(t, socket)
	addrs := freeAddrs(t, 2)
	chain := chainFlag(nodeNames(2), addrs)
	gate := filepath.Join(dir, "go")
	b := startProc(t, "B", []string{"NOTIFY_SOCKET=" + socket}, "run", "--chain", chain, "--name", "B", "--linger", "2s", "--", "true")
	sys.await(t, "READY=1", func(m string) bool { return strings.HasPrefix(m, "READY=1\n") })
	a := startProc(t, "A", []string{"GATE=" + gate}, "run", "--chain", chain, "--name", "A", "--",
		"sh", "-c", `while [ ! -e "$GATE" ]; do sleep 0.05; done`)
	m, _ := sys.await(t, "saying B waits for A's task", func(m string) bool {
		return strings.Contains(m, "waiting for COMPLETE from the predecessor") && strings.Contains(m, "predecessor up")
	})
	t.Logf("status while A's task runs: %q", m)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if last, _ := sys.await(t, "STOPPING=1", func(m string) bool { return strings.HasPrefix(m, "STOPPING=1\n") }); last != "STOPPING=1\nSTATUS=done" {
		t.Errorf("last %q", last)
	}
	a.wait(t, 15*time.Second)
	b.wait(t, 15*time.Second)
}
