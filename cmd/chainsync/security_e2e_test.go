//go:build unix

package main

// End-to-end attacks on the built binary's secure modes (draft "Security
// Considerations": mutual TLS, pinning or pre-shared keys "to prevent node
// impersonation"): a PSK connection redirected to the wrong node or looped
// back, strangers flooding a listener, weak keys, and a certificate writer
// that fails part-way.

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
)

// forwarder stands at an address and relays every connection to target,
// as an attacker who can redirect TCP (on the path, or by ARP or DNS
// spoofing) would.
type forwarder struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
	count atomic.Int64
}

func forward(t *testing.T, at, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.count.Add(1)
			d, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, d)
			f.mu.Unlock()
			f.wg.Add(2)
			go func() { defer f.wg.Done(); io.Copy(d, c); d.Close() }()
			go func() { defer f.wg.Done(); io.Copy(c, d); c.Close() }()
		}
	}()
	t.Cleanup(f.stop)
	return f
}

// stop closes the listener and every relayed connection.
func (f *forwarder) stop() {
	f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// runBin runs the binary to completion and returns its exit code, stdout
// and stderr.
func runBin(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	var out, errb syncBuf
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// newPSK writes a key with chainsync psk and returns its path.
func newPSK(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "chain.psk")
	if code, _, stderr := runBin(t, "psk", p); code != 0 {
		t.Fatalf("chainsync psk exited %d: %s", code, stderr)
	}
	return p
}

// taskArgs is a task that appends the node's name to DIR/tasks.
var taskArgs = []string{"--", "sh", "-c", `echo "$CHAINSYNC_NODE" >> "$DIR/tasks"`}

// secureModes are the two ways a chain proves who is who: a pre-shared key
// (chainsync psk) and mutual TLS with certificates from chainsync certs,
// all on 127.0.0.1, so that certificates alone (same IP SAN) cannot tell the
// nodes apart. args gives a node its flags.
func secureModes(t *testing.T, names ...string) map[string]func(node string) []string {
	t.Helper()
	key := newPSK(t)
	certDir := t.TempDir()
	if code, _, stderr := runBin(t, "certs", "--dir", certDir, "--nodes", strings.Join(names, ",")); code != 0 {
		t.Fatalf("certs: %s", stderr)
	}
	return map[string]func(string) []string{
		"PSK": func(string) []string { return []string{"--psk-file", key} },
		"mTLS": func(node string) []string {
			return []string{"--tls-cert", filepath.Join(certDir, node+".pem"), "--tls-key", filepath.Join(certDir, node+"-key.pem"),
				"--tls-ca", filepath.Join(certDir, "ca.pem")}
		},
	}
}

// TestRedirectRefused: a TCP forwarder stands at B's address and relays to
// C, so A's connection for B reaches C. With a shared PSK, C refuses A (A is
// not its predecessor) and A refuses C (C is not its successor); both say
// "position mismatch" and name the positions. With mutual TLS, A refuses
// C's certificate (it names C, not B) and C logs the refusal. No task runs.
// Once the forwarder is gone and the real B is up, the chain runs A, B, C in
// order.
func TestRedirectRefused(t *testing.T) {
	names := []string{"A", "B", "C"}
	modes := secureModes(t, names...)
	for _, mode := range []string{"PSK", "mTLS"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			addrs := freeAddrs(t, 3)
			chain := chainFlag(names, addrs)
			env := []string{"DIR=" + dir}
			node := func(name string) *proc {
				args := append([]string{"run", "--chain", chain, "--name", name, "--linger", "2s"}, modes[mode](name)...)
				return startProc(t, name, env, append(args, taskArgs...)...)
			}
			fwd := forward(t, addrs[1], addrs[2])
			c := node("C")
			a := node("A")
			if mode == "PSK" {
				c.waitLog(t, 10*time.Second, "refusing A as C's predecessor",
					containsAll("refused would-be predecessor", "position mismatch", `is \"A\" dialing its successor \"B\"`, `this node is \"C\" and its predecessor is \"B\"`))
				a.waitLog(t, 10*time.Second, "refusing C as A's successor",
					containsAll("successor refused or failed authentication", "position mismatch", `answered is \"C\", whose predecessor is \"B\"`))
			} else {
				c.waitLog(t, 10*time.Second, "refusing A as C's predecessor", containsAll("refused would-be predecessor", "refused this node"))
				a.waitLog(t, 10*time.Second, "refusing C as A's successor",
					containsAll("successor refused or failed authentication", "position mismatch", `chain node \"C\", not of \"B\"`))
			}
			// A keeps retrying and is refused each time; nothing runs.
			if !poll(10*time.Second, func() bool { return fwd.count.Load() >= 3 }) {
				n := fwd.count.Load()
				t.Fatalf("A dialed through the forwarder %d times, want at least 3 (retries)", n)
			}
			if got := readLines(t, filepath.Join(dir, "tasks")); len(got) != 0 {
				t.Fatalf("tasks ran through the redirect: %v", got)
			}
			if strings.Contains(a.err.String(), "link up") || strings.Contains(c.err.String(), "link up") {
				t.Fatal("a link came up through the redirect")
			}

			// The attacker goes away; the real B takes its address.
			fwd.stop()
			b := node("B")
			for _, p := range []*proc{a, b, c} {
				if code := p.wait(t, 20*time.Second); code != 0 {
					t.Errorf("%s exited %d, want 0", p.name, code)
				}
			}
			if got := strings.Join(readLines(t, filepath.Join(dir, "tasks")), ","); got != "A,B,C" {
				t.Errorf("tasks ran %q, want A,B,C", got)
			}
		})
	}
}

// TestLoopbackRefused: B's successor address forwards to B's own listener,
// so B dials itself. B refuses itself and says its connection looped back
// (with a PSK on both ends of that connection; with mutual TLS as the
// dialer, and the listener logs the refusal).
func TestLoopbackRefused(t *testing.T) {
	names := []string{"A", "B", "C"}
	modes := secureModes(t, names...)
	for _, mode := range []string{"PSK", "mTLS"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			addrs := freeAddrs(t, 3)
			chain := chainFlag(names, addrs)
			forward(t, addrs[2], addrs[1])
			args := append([]string{"run", "--chain", chain, "--name", "B"}, modes[mode]("B")...)
			b := startProc(t, "B", []string{"DIR=" + dir}, append(args, taskArgs...)...)
			if mode == "PSK" {
				b.waitLog(t, 10*time.Second, "B refusing itself as predecessor",
					containsAll("refused would-be predecessor", "position mismatch", `this node itself (\"B\" dialing its successor \"C\")`, "looped back"))
				b.waitLog(t, 10*time.Second, "B refusing itself as successor",
					containsAll("successor refused or failed authentication", "position mismatch", `this node itself (\"B\")`, "looped back"))
			} else {
				b.waitLog(t, 10*time.Second, "B refusing itself as successor",
					containsAll("successor refused or failed authentication", "position mismatch", `this node's own (\"B\")`, "looped back"))
				b.waitLog(t, 10*time.Second, "B's listener logging the refusal", containsAll("refused would-be predecessor"))
			}
			if strings.Contains(b.err.String(), "link up") {
				t.Fatal("B accepted its own connection as a link")
			}
			b.signal(t, os.Interrupt)
			b.wait(t, 10*time.Second)
		})
	}
}

// flood keeps n connections from 127.0.0.1 to addr open, each replaced
// every 150-300ms: a third say nothing, a third send a TLS record header
// one byte every 50ms, and a third complete a TLS handshake (no client
// certificate) and then say nothing.
//
// Its connections come from source ports below the kernel's ephemeral
// range, each used once: hundreds of ephemeral ports taken within a second
// could otherwise collide with a port another test reserved for a listener.
type flood struct {
	opened atomic.Int64
	stop   chan struct{}
	wg     sync.WaitGroup
}

// floodPort counts the source ports floods use: 20000 + floodPort%12000,
// starting at an offset of this process's own.
var floodPort atomic.Int64

func init() { floodPort.Store(int64(os.Getpid() * 7919 % 12000)) }

func (f *flood) dial(addr string) (net.Conn, error) {
	var err error
	for range 20 { // a port still in TIME_WAIT, or taken: try the next
		p := 20000 + floodPort.Add(1)%12000
		d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(p)}}
		var c net.Conn
		if c, err = d.Dial("tcp", addr); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func startFlood(t *testing.T, addr string, n int) *flood {
	f := &flood{stop: make(chan struct{})}
	for i := range n {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for k := 0; ; k++ {
				select {
				case <-f.stop:
					return
				default:
				}
				life := time.Duration(150+(i*37+k*53)%150) * time.Millisecond
				c, err := f.dial(addr)
				if err != nil {
					time.Sleep(20 * time.Millisecond) // the flood's own pace: a refused client comes back soon
					continue
				}
				f.opened.Add(1)
				end := time.Now().Add(life)
				switch i % 3 {
				case 1: // slow
					hdr := []byte{0x16, 0x03, 0x01, 0x01, 0x00, 0x01}
					for j := 0; j < len(hdr) && time.Now().Before(end); j++ {
						c.SetWriteDeadline(end)
						if _, err := c.Write(hdr[j : j+1]); err != nil {
							break
						}
						time.Sleep(50 * time.Millisecond) // slowloris: one byte at a time is the attack
					}
				case 2: // TLS, then idle
					tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
					tc.SetDeadline(end)
					tc.Handshake()
				}
				select {
				case <-f.stop:
					c.Close()
					return
				case <-time.After(time.Until(end)):
				}
				c.Close()
			}
		}()
	}
	t.Cleanup(func() { close(f.stop); f.wg.Wait() })
	return f
}

// TestFloodDoesNotLockOutPredecessor: 40 idle or slow connections from
// 127.0.0.1, renewed several times a second, hold the listener of the Tail
// of a 2-node chain, far more than its 16 pending slots. The real Head, from
// the same address, still gets in: in mutual TLS and in PSK mode the round
// completes within 10 s, and the Tail's log stays under 100 KB.
func TestFloodDoesNotLockOutPredecessor(t *testing.T) {
	modes := secureModes(t, "A", "B")
	for _, tc := range []struct {
		name string
		sec  func(node string) []string
	}{{"mTLS", modes["mTLS"]}, {"PSK", modes["PSK"]}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			addrs := freeAddrs(t, 2)
			chain := chainFlag([]string{"A", "B"}, addrs)
			node := func(name string) *proc {
				args := append([]string{"run", "--chain", chain, "--name", name, "--linger", "1s"}, tc.sec(name)...)
				return startProc(t, name, []string{"DIR=" + dir}, append(args, taskArgs...)...)
			}
			b := node("B")
			b.waitLog(t, 10*time.Second, "B listening", containsAll("node started"))
			f := startFlood(t, addrs[1], 40)
			// The flood first fills every pending slot, several times over.
			if !poll(10*time.Second, func() bool { return f.opened.Load() >= 120 }) {
				t.Fatalf("the flood opened only %d connections", f.opened.Load())
			}
			start := time.Now()
			a := node("A")
			if code := a.wait(t, 10*time.Second); code != 0 {
				t.Fatalf("A exited %d", code)
			}
			took := time.Since(start)
			if code := b.wait(t, 5*time.Second); code != 0 {
				t.Fatalf("B exited %d", code)
			}
			opened := f.opened.Load()
			if got := strings.Join(readLines(t, filepath.Join(dir, "tasks")), ","); got != "A,B" {
				t.Errorf("tasks ran %q, want A,B", got)
			}
			logSize := len(b.err.String())
			t.Logf("%s: round done %v after A started, through %d flood connections; B's log %d bytes", tc.name, took.Round(time.Millisecond), opened, logSize)
			if logSize > 100<<10 {
				t.Errorf("B's log grew to %d bytes under the flood, want < 100 KB", logSize)
			}
			sum := ""
			for _, l := range strings.Split(b.err.String(), "\n") {
				if strings.Contains(l, "would-be predecessors refused, evicted or closed") {
					sum = l
				}
			}
			if sum == "" {
				t.Error("B's log has no summary line for the flood")
			}
			t.Logf("%s: B's summary: %s", tc.name, sum)
		})
	}
}

// TestWeakKeysRefused: a passphrase, a short key, a patterned key and key
// files others can read are refused at start with exit 2 and a message
// saying how to make a good key; PSK mode without --chain is refused too.
// A key from chainsync psk is accepted (the chains above use one), never
// overwritten without --force, and mode 0600.
func TestWeakKeysRefused(t *testing.T) {
	dir := t.TempDir()
	addrs := freeAddrs(t, 2)
	chain := chainFlag([]string{"A", "B"}, addrs)
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	good := newPSK(t)
	goodKey, _ := os.ReadFile(good)
	certDir := t.TempDir()
	if code, _, stderr := runBin(t, "certs", "--dir", certDir, "--nodes", "A,B"); code != 0 {
		t.Fatalf("certs: %s", stderr)
	}
	tlsKey := filepath.Join(certDir, "B-key.pem")
	os.Chmod(tlsKey, 0o640)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"passphrase", []string{"--psk-file", write("pass", "passwordpassword\n", 0o600)}, []string{"12 bytes of key material", "need at least 32 random bytes", "chainsync psk FILE"}},
		{"sentence", []string{"--psk-file", write("sentence", "my chain key is very secret\n", 0o600)}, []string{"several words", "passphrase", "chainsync psk FILE"}},
		{"short key", []string{"--psk-file", write("short", "9f86d081884c7d659a2feaa0c55ad015\n", 0o600)}, []string{"16 bytes of key material (read as hex)", "chainsync psk FILE"}},
		{"pattern", []string{"--psk-file", write("pattern", strings.Repeat("Pass1234", 6), 0o600)}, []string{"does not look random", "chainsync psk FILE"}},
		{"readable PSK file", []string{"--psk-file", write("readable", string(goodKey), 0o644)}, []string{"accessible by group or others (mode 0644)", "chmod 600"}},
		{"readable TLS key", []string{"--tls-cert", filepath.Join(certDir, "B.pem"), "--tls-key", tlsKey, "--tls-ca", filepath.Join(certDir, "ca.pem")},
			[]string{"--tls-key " + tlsKey + " is accessible by group or others (mode 0640)", "chmod 600"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"run", "--chain", chain, "--name", "B"}, tc.args...), "--", "true")
			code, _, stderr := runBin(t, args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
	t.Run("PSK without --chain", func(t *testing.T) {
		code, _, stderr := runBin(t, "run", "--listen", addrs[1], "--prev", addrs[0], "--psk-file", good, "--", "true")
		if code != 2 || !strings.Contains(stderr, "--psk-file needs the chain's names") {
			t.Fatalf("exit %d, stderr:\n%s", code, stderr)
		}
	})
	t.Run("chainsync psk", func(t *testing.T) {
		fi, err := os.Stat(good)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("key file: %v, mode %v", err, fi.Mode())
		}
		code, _, stderr := runBin(t, "psk", good)
		if code != 1 || !strings.Contains(stderr, "exists; nothing written") {
			t.Errorf("second psk: exit %d: %s", code, stderr)
		}
		if again, _ := os.ReadFile(good); string(again) != string(goodKey) {
			t.Error("the refused psk changed the key")
		}
		if code, _, stderr := runBin(t, good, "--force"); code == 0 || stderr == "" {
			t.Error("a key file given as a command was accepted")
		}
		if code, _, _ := runBin(t, "psk", good, "--force"); code != 0 {
			t.Errorf("psk --force: exit %d", code)
		}
		if again, _ := os.ReadFile(good); string(again) == string(goodKey) {
			t.Error("psk --force kept the old key")
		}
		if code, out, _ := runBin(t, "psk", "--help"); code != 0 || !strings.Contains(out, "Usage: chainsync psk") {
			t.Errorf("psk --help: exit %d:\n%s", code, out)
		}
		if code, _, _ := runBin(t, "psk"); code != 2 {
			t.Errorf("psk without FILE: exit %d, want 2", code)
		}
	})
}

// dirState reads every entry of dir: name -> content ("<dir>" for a
// directory).
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		if e.IsDir() {
			m[e.Name()] = "<dir>"
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		m[e.Name()] = string(b)
	}
	return m
}

func sameState(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	if len(before) != len(after) {
		t.Errorf("%s: %d entries before, %d after: %v", what, len(before), len(after), keys(after))
	}
	for k, v := range after {
		if b, ok := before[k]; !ok || b != v {
			t.Errorf("%s: %s changed or appeared", what, k)
		}
	}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestCertsFailPartway: chainsync certs leaves no unusable mix of files
// when it fails part-way: an existing file (nothing written), a name it
// cannot replace with --force (every old file restored), a read-only
// directory (nothing written).
func TestCertsFailPartway(t *testing.T) {
	t.Run("existing file", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "B.pem"), []byte("mine"), 0o644)
		before := dirState(t, dir)
		code, _, stderr := runBin(t, "certs", "--dir", dir, "--nodes", "A,B")
		if code != 1 || !strings.Contains(stderr, "B.pem exists; nothing written") || !strings.Contains(stderr, "--force") {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		sameState(t, "existing file", before, dirState(t, dir))
	})
	t.Run("force fails part-way", func(t *testing.T) {
		dir := t.TempDir()
		if code, _, stderr := runBin(t, "certs", "--dir", dir, "--nodes", "A,B"); code != 0 {
			t.Fatal(stderr)
		}
		// B-key.pem is now a non-empty directory: with --force the CA and
		// A's files are replaced first, then B-key.pem cannot be.
		kb := filepath.Join(dir, "B-key.pem")
		os.Remove(kb)
		os.MkdirAll(filepath.Join(kb, "keep"), 0o755)
		before := dirState(t, dir)
		code, _, stderr := runBin(t, "certs", "--dir", dir, "--nodes", "A,B", "--force")
		if code != 1 || !strings.Contains(stderr, "B-key.pem") {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		sameState(t, "--force part-way", before, dirState(t, dir))
		// The old files still work together.
		if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "A.pem"), filepath.Join(dir, "A-key.pem")); err != nil {
			t.Errorf("A's pair after the failure: %v", err)
		}
	})
	t.Run("read-only directory", func(t *testing.T) {
		dir := t.TempDir()
		var code int
		var stderr string
		if os.Geteuid() == 0 {
			// root writes through permission bits: use a read-only mount
			// in a private mount namespace.
			if _, err := exec.LookPath("unshare"); err != nil {
				t.Skip("root without unshare: cannot make a read-only directory")
			}
			cmd := exec.Command("unshare", "-m", "sh", "-c", `mount --bind -o ro "$1" "$1" && exec "$2" certs --dir "$1" --nodes A,B`, "sh", dir, bin)
			cmd.Env = cleanEnv()
			out, err := cmd.CombinedOutput()
			stderr = string(out)
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if strings.Contains(stderr, "mount") && !strings.Contains(stderr, "chainsync certs") {
				t.Skipf("cannot make a read-only mount here: %s", stderr)
			}
		} else {
			os.Chmod(dir, 0o555)
			defer os.Chmod(dir, 0o755)
			code, _, stderr = runBin(t, "certs", "--dir", dir, "--nodes", "A,B")
		}
		if code != 1 || !strings.Contains(stderr, "cannot write") {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if st := dirState(t, dir); len(st) != 0 {
			t.Errorf("files left in the read-only directory: %v", keys(st))
		}
	})
}

// TestHalfAuthenticatedNodeRefused (issue: a node with --tls-cert,
// --tls-key and --pin-next but no --tls-ca, --pin-prev or --psk-file
// accepted a TLS client without a certificate as its predecessor, which
// then started B's and C's tasks): such a node now refuses to start (exit
// 2, naming the flags that fix it), and so does chainsync check; the same
// for a successor side that only the system's trust roots would check.
// Only --insecure-accept-any-predecessor brings the old behaviour back,
// with a warning: a TLS client without a certificate then starts the task.
func TestHalfAuthenticatedNodeRefused(t *testing.T) {
	t.Parallel()
	certs := makeCerts(t, "A,B,C")
	key := func(n string) []string {
		return []string{"--tls-cert", filepath.Join(certs, n+".pem"), "--tls-key", filepath.Join(certs, n+"-key.pem")}
	}
	addrs := freeAddrs(t, 3)
	dir := t.TempDir()
	task := []string{"--", "sh", "-c", "touch " + filepath.Join(dir, "task")}
	middle := append([]string{"--name", "B", "--listen", addrs[1], "--prev", addrs[0], "--next", addrs[2],
		"--pin-next", pinOf(t, filepath.Join(certs, "C.pem"))}, key("B")...)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"run, predecessor side", append(append([]string{"run"}, middle...), task...), "--insecure-accept-any-predecessor"},
		{"check, predecessor side", append([]string{"check", "--timeout", "1s"}, middle...), "--insecure-accept-any-predecessor"},
		{"run, successor side by system roots", append(append([]string{"run", "--name", "A", "--next", addrs[1],
			"--tls-server-name", "B"}, key("A")...), task...), "--insecure-accept-any-successor"},
		{"run, tail without pin", append(append([]string{"run", "--name", "C", "--listen", addrs[2], "--prev", addrs[1]},
			key("C")...), task...), "authenticate no predecessor"},
	} {
		p := startProc(t, tc.name, nil, tc.args...)
		if code := p.wait(t, 10*time.Second); code != 2 || !strings.Contains(p.err.String(), tc.want) {
			t.Errorf("%s: exit %d, want 2 with %q:\n%s", tc.name, code, tc.want, p.err.String())
		}
	}
	if exists(filepath.Join(dir, "task")) {
		t.Fatal("a refused node ran its task")
	}

	// Said explicitly: anyone may be the predecessor, and a TLS client
	// without a certificate is.
	tail := startProc(t, "C", nil, append(append([]string{"run", "--name", "C", "--listen", addrs[2], "--prev", addrs[1],
		"--linger", "1s", "--insecure-accept-any-predecessor"}, key("C")...), task...)...)
	tail.waitLog(t, 10*time.Second, "the warning", containsAll("any TLS client can become this node's predecessor"))
	var c *tls.Conn
	var err error
	if !poll(10*time.Second, func() bool {
		c, err = tls.Dial("tcp", addrs[2], &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		return err == nil
	}) {
		t.Fatal(err)
	}
	stranger := testnet.NewPeer(t, c)
	stranger.Send(t, "READY\n")
	stranger.Expect(t, "START\n")
	stranger.Send(t, "COMPLETE\n")
	stranger.Expect(t, "COMPLETE\n")
	stranger.HangUp()
	if code := tail.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("C exited %d", code)
	}
	if !exists(filepath.Join(dir, "task")) {
		t.Error("with --insecure-accept-any-predecessor, the stranger did not start the task")
	}
}

// TestStatePathsNotFollowed (issue: with a --state-dir of mode 0777 holding
// lock -> victim1 and journal.tmp -> victim2, and --trace a symbolic link,
// the node truncated victim1, overwrote victim2 and appended to the trace
// link's target): a state directory that group or others can write is
// refused (exit 2, its mode in octal); each planted link is refused or
// removed as a link, and every victim keeps its bytes and its mode; a
// trace file is created 0600.
func TestStatePathsNotFollowed(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	victim := func(name string) string {
		p := filepath.Join(base, name)
		if err := os.WriteFile(p, []byte("precious "+name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	untouched := func(p string) {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil || string(b) != "precious "+filepath.Base(p)+"\n" {
			t.Errorf("%s changed: %q, %v", filepath.Base(p), b, err)
		}
	}
	node := func(st string, extra ...string) *proc {
		args := append([]string{"run", "--name", "S", "--state-dir", st}, extra...)
		p := startProc(t, "S", nil, append(args, "--", "true")...)
		p.wait(t, 20*time.Second)
		return p
	}
	stateDir := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil { // not subject to umask
			t.Fatal(err)
		}
		return d
	}

	// A world-writable state directory, with the links in it.
	open := stateDir("open", 0o777)
	v1, v2 := victim("victim1"), victim("victim2")
	os.Symlink(v1, filepath.Join(open, "lock"))
	os.Symlink(v2, filepath.Join(open, "journal.tmp"))
	if p := node(open); p.code != 2 || !strings.Contains(p.err.String(), "--state-dir") || !strings.Contains(p.err.String(), "mode 0777") {
		t.Errorf("mode 0777: exit %d, want 2 naming --state-dir and mode 0777:\n%s", p.code, p.err.String())
	}
	for _, mode := range []os.FileMode{0o770, 0o702} {
		d := stateDir(fmt.Sprintf("mode%o", mode), mode)
		if p := node(d); p.code != 2 || !strings.Contains(p.err.String(), fmt.Sprintf("mode %04o", mode)) {
			t.Errorf("mode %04o: exit %d, want 2 naming the mode:\n%s", mode, p.code, p.err.String())
		}
	}

	// Mode 0700, lock -> victim1: refused, victim1 untouched.
	d := stateDir("locklink", 0o700)
	os.Symlink(v1, filepath.Join(d, "lock"))
	if p := node(d); p.code == 0 || !strings.Contains(p.err.String(), "symbolic link") {
		t.Errorf("lock link: exit %d, want a refusal naming the link:\n%s", p.code, p.err.String())
	}
	// journal -> victim: refused, untouched.
	v3 := victim("victim3")
	d = stateDir("journallink", 0o700)
	os.Symlink(v3, filepath.Join(d, "journal"))
	if p := node(d); p.code == 0 || !strings.Contains(p.err.String(), "symbolic link") {
		t.Errorf("journal link: exit %d, want a refusal naming the link:\n%s", p.code, p.err.String())
	}
	// journal.tmp -> victim2: a stale temporary name; the link is removed,
	// never written through, and the round runs.
	d = stateDir("tmplink", 0o700)
	os.Symlink(v2, filepath.Join(d, "journal.tmp"))
	if p := node(d); p.code != 0 {
		t.Errorf("journal.tmp link: exit %d, want 0:\n%s", p.code, p.err.String())
	}
	if fi, err := os.Lstat(filepath.Join(d, "journal")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("journal is not a regular file: %v %v", fi, err)
	}
	// --trace a link: refused, its target untouched; a new trace is 0600.
	v4 := victim("victim4")
	link := filepath.Join(base, "trace.link")
	os.Symlink(v4, link)
	if p := node(stateDir("trace1", 0o700), "--trace", link); p.code == 0 || !strings.Contains(p.err.String(), "symbolic link") {
		t.Errorf("--trace link: exit %d, want a refusal naming the link:\n%s", p.code, p.err.String())
	}
	trace := filepath.Join(base, "trace.jsonl")
	if p := node(stateDir("trace2", 0o700), "--trace", trace); p.code != 0 {
		t.Errorf("--trace: exit %d:\n%s", p.code, p.err.String())
	}
	if fi, err := os.Stat(trace); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("trace file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	for _, v := range []string{v1, v2, v3, v4} {
		untouched(v)
		if fi, _ := os.Stat(v); fi.Mode().Perm() != 0o644 {
			t.Errorf("%s's mode changed to %v", v, fi.Mode().Perm())
		}
	}
}

// TestJunkFloodLogBounded (issue: 2,000 plain-TCP connections in 10 s,
// each sending one bad first line, cost 2,000 WARN and 2,000 INFO lines,
// 656 KB of log and a 778 KB trace): the same flood at the Tail of a plain
// TCP chain leaves well under 64 KB of log and of trace; the log keeps a
// sample and a summary with the counts, the trace a sample and a record
// counting the rest; the real Head then runs the round.
func TestJunkFloodLogBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addrs := freeAddrs(t, 2)
	chain := chainFlag([]string{"A", "B"}, addrs)
	trace := filepath.Join(dir, "b.trace")
	b := startProc(t, "B", []string{"DIR=" + dir}, append([]string{"run", "--chain", chain, "--name", "B", "--round", "r1",
		"--linger", "1s", "--trace", trace}, taskArgs...)...)
	b.waitLog(t, 10*time.Second, "B listening", containsAll("node started"))
	junk := []string{"HELLO\n", "START r1\n", "COMPLETE r1\n", "READY other-round\n", "READY r1 extra\n"}
	const total = 2000
	var sent atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < total; i += 8 {
				c, err := net.DialTimeout("tcp", addrs[1], 2*time.Second)
				if err != nil {
					continue
				}
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				if _, err := io.WriteString(c, junk[i%len(junk)]); err == nil {
					sent.Add(1)
				}
				// The node answers bad input by closing: wait for that,
				// so every line is judged before the next connection.
				_, _ = io.Copy(io.Discard, c)
				c.Close()
			}
		})
	}
	wg.Wait()
	if sent.Load() < total*9/10 {
		t.Fatalf("only %d of %d junk connections went through", sent.Load(), total)
	}
	a := startProc(t, "A", []string{"DIR=" + dir}, append([]string{"run", "--chain", chain, "--name", "A", "--round", "r1"}, taskArgs...)...)
	if code := a.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("A exited %d", code)
	}
	if code := b.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("B exited %d", code)
	}
	if got := strings.Join(readLines(t, filepath.Join(dir, "tasks")), ","); got != "A,B" {
		t.Errorf("tasks ran %q, want A,B", got)
	}
	log := b.err.String()
	tb, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d junk connections: B's log %d bytes, trace %d bytes", sent.Load(), len(log), len(tb))
	if len(log) >= 64<<10 || len(tb) >= 64<<10 {
		t.Errorf("log %d bytes, trace %d bytes: want each well under 64 KB", len(log), len(tb))
	}
	if n := strings.Count(log, "bad input from predecessor"); n == 0 || n > 20 {
		t.Errorf("%d bad-input lines logged one by one, want a sample (1..20)", n)
	}
	if !strings.Contains(log, "bad_input=") {
		t.Error("no summary line counting the bad input")
	}
	counted := 0
	for _, l := range strings.Split(string(tb), "\n") {
		var r struct {
			Kind  string
			Count int
		}
		if json.Unmarshal([]byte(l), &r) == nil && r.Kind == "violation" {
			counted += max(r.Count, 1)
		}
	}
	if counted < int(sent.Load())*9/10 {
		t.Errorf("the trace accounts for %d violations, want about %d (a sample plus counts)", counted, sent.Load())
	}
}

// TestStatusFloodCannotHaltChain (issue: a node under ulimit -n 150 with
// about 135 keep-alive connections to its --status-addr, each after one
// GET /healthz, could not accept its predecessor, and its task failed
// with "open /dev/null: too many open files"): the status endpoint serves
// at most 32 connections at once (the rest wait in the kernel's backlog,
// holding none of the node's descriptors) and closes idle ones after 2 s,
// so the same node accepts its predecessor, runs its task and exits 0.
func TestStatusFloodCannotHaltChain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addrs := freeAddrs(t, 3)
	chain := chainFlag([]string{"A", "B"}, addrs[:2])
	statusAddr := addrs[2]
	b := startCommand(t, "B", []string{"DIR=" + dir}, "ulimit -n 150; chainsync run B", "sh",
		append([]string{"-c", `ulimit -n 150 && exec "$0" "$@"`, bin, "run", "--chain", chain, "--name", "B",
			"--linger", "1s", "--status-addr", statusAddr, "--state-dir", filepath.Join(dir, "st")}, taskArgs...)...)
	b.waitLog(t, 10*time.Second, "status endpoint up", containsAll("status endpoint up"))
	const flood = 135
	var answered atomic.Int64
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range flood {
		c, err := net.Dial("tcp", statusAddr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		go func() {
			buf := make([]byte, 512)
			if n, _ := c.Read(buf); n > 0 {
				answered.Add(1)
			}
			_, _ = io.Copy(io.Discard, c) // hold it open until the node closes it
		}()
	}
	// The first 32 are served at once; then B holds at most that many.
	if !poll(10*time.Second, func() bool { return answered.Load() >= 32 }) {
		t.Fatalf("only %d status requests answered", answered.Load())
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", b.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d status connections open, %d answered so far; B holds %d descriptors", flood, answered.Load(), len(fds))
	if len(fds) > 32+40 {
		t.Errorf("B holds %d descriptors under %d status connections: not bounded by the cap of 32", len(fds), flood)
	}
	a := startProc(t, "A", []string{"DIR=" + dir}, append([]string{"run", "--chain", chain, "--name", "A"}, taskArgs...)...)
	if code := a.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("A exited %d", code)
	}
	if code := b.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("B exited %d", code)
	}
	if got := strings.Join(readLines(t, filepath.Join(dir, "tasks")), ","); got != "A,B" {
		t.Errorf("tasks ran %q, want A,B", got)
	}
	if strings.Contains(b.err.String(), "too many open files") {
		t.Errorf("B ran out of descriptors:\n%s", b.err.String())
	}
}
