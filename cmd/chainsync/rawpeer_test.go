//go:build unix

package main

// The built binary against scripted raw-socket neighbours: the exact bytes
// on the wire in both directions, named rounds, CR LF, and bad input.

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
)

// taskRecorder is a task that appends "ROLE|ROUND|NODE" to $DIR/task.
var taskRecorder = []string{"sh", "-c", `echo "$CHAINSYNC_ROLE|$CHAINSYNC_ROUND|$CHAINSYNC_NODE" >> "$DIR/task"`}

// TestRawHead: the binary as Head, its successor a raw listener (docs/DESIGN.md
// "Roles and connections": the Head only dials). Draft "Protocol
// Operation": READY when locally ready, the task on START, COMPLETE after
// it; done when COMPLETE comes back. docs/DESIGN.md "Wire format": exactly
// "COMMAND\n" for the unnamed round.
func TestRawHead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	succ := testnet.ListenPeer(t)
	p := startProc(t, "A", []string{"DIR=" + dir}, append([]string{"run", "--name", "A", "--next", succ.Addr(), "--"}, taskRecorder...)...)
	s := succ.Accept(t, 5*time.Second)
	s.Expect(t, "READY\n")
	s.Send(t, "START\n")
	s.Expect(t, "COMPLETE\n")
	if got := readLines(t, filepath.Join(dir, "task")); !slices.Equal(got, []string{"head||A"}) {
		t.Fatalf("task runs %q before COMPLETE, want exactly one as head", got)
	}
	s.Send(t, "COMPLETE\n")
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	s.ExpectClosed(t, 5*time.Second)
	if got := s.Received(); got != "READY\nCOMPLETE\n" {
		t.Fatalf("the successor received %q, want exactly %q", got, "READY\nCOMPLETE\n")
	}
	// Its task not before START; its end not before the exit wave's
	// COMPLETE.
	p.logOrder(t, "sent READY to succ", "received START from succ", "task started", "sent COMPLETE to succ",
		"received COMPLETE from succ", "round over", "node stopped")
}

// TestRawMiddle: the binary as an intermediate node between a raw
// predecessor (which dials its --listen) and a raw successor (which it
// dials): the full four-wave exchange, exact bytes both ways (draft
// "Protocol Operation", "Example Message Flow"). Variants: the
// reference-compatible "COMMAND:" form for the unnamed round
// (--unnamed-round-colon; docs/DESIGN.md "Wire format") and CR LF from the peers
// (docs/DESIGN.md "Wire format": "tolerate one CR before LF").
func TestRawMiddle(t *testing.T) {
	for _, tc := range []struct {
		name      string
		colon     bool   // --unnamed-round-colon
		peerColon string // what the raw peers put after the command
		eol       string // the raw peers' line end
	}{
		{"bare", false, "", "\n"},
		{"colon", true, ":", "\n"},
		{"colon-node-bare-peers", true, "", "\n"},
		{"crlf", false, "", "\r\n"},
		{"colon-crlf", true, ":", "\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			succ := testnet.ListenPeer(t)
			listen := freeAddrs(t, 1)[0]
			args := []string{"run", "--name", "B", "--listen", listen, "--prev", "127.0.0.1:9", "--next", succ.Addr()}
			if tc.colon {
				args = append(args, "--unnamed-round-colon")
			}
			p := startProc(t, "B", []string{"DIR=" + dir}, append(append(args, "--"), taskRecorder...)...)
			sfx := ""
			if tc.colon {
				sfx = ":"
			}
			out := func(cmd string) string { return cmd + tc.peerColon + tc.eol }
			in := func(cmd string) string { return cmd + sfx + "\n" }

			s := succ.Accept(t, 5*time.Second)
			pr := testnet.DialPeer(t, listen, 5*time.Second)
			pr.Send(t, out("READY"))
			s.Expect(t, in("READY"))
			s.Send(t, out("START"))
			pr.Expect(t, in("START"))
			pr.Send(t, out("COMPLETE"))
			s.Expect(t, in("COMPLETE"))
			if got := readLines(t, filepath.Join(dir, "task")); !slices.Equal(got, []string{"middle||B"}) {
				t.Fatalf("task runs %q before COMPLETE to the successor, want exactly one as middle", got)
			}
			s.Send(t, out("COMPLETE"))
			pr.Expect(t, in("COMPLETE"))
			pr.HangUp() // as a real predecessor does when it is done (run --linger)
			if code := p.wait(t, 5*time.Second); code != 0 {
				t.Fatalf("exit %d, want 0", code)
			}
			s.ExpectClosed(t, 5*time.Second)
			if got, want := s.Received(), in("READY")+in("COMPLETE"); got != want {
				t.Errorf("the successor received %q, want exactly %q", got, want)
			}
			if got, want := pr.Received(), in("START")+in("COMPLETE"); got != want {
				t.Errorf("the predecessor received %q, want exactly %q", got, want)
			}
			// Each message only once its cause came, the task only on
			// the predecessor's COMPLETE.
			p.logOrder(t, "received READY from pred", "sent READY to succ", "received START from succ", "sent START to pred",
				"received COMPLETE from pred", "task started", "sent COMPLETE to succ", "received COMPLETE from succ", "sent COMPLETE to pred")
		})
	}
}

// TestRawTail: the binary as Tail with a raw predecessor: READY -> START at
// once; COMPLETE -> task, then COMPLETE back (draft "Phase 2", "Phase 4":
// the Tail "immediately sends COMPLETE to its predecessor").
func TestRawTail(t *testing.T) {
	for _, eol := range []string{"\n", "\r\n"} {
		t.Run(fmt.Sprintf("eol=%q", eol), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			listen := freeAddrs(t, 1)[0]
			p := startProc(t, "C", []string{"DIR=" + dir}, append([]string{"run", "--name", "C", "--listen", listen, "--prev", "127.0.0.1:9", "--"}, taskRecorder...)...)
			pr := testnet.DialPeer(t, listen, 5*time.Second)
			pr.Send(t, "READY"+eol)
			pr.Expect(t, "START\n")
			pr.Send(t, "COMPLETE"+eol)
			pr.Expect(t, "COMPLETE\n")
			if got := readLines(t, filepath.Join(dir, "task")); !slices.Equal(got, []string{"tail||C"}) {
				t.Fatalf("task runs %q before the exit wave, want exactly one as tail", got)
			}
			// run --linger: the node stays while its predecessor is
			// connected, and exits once it hung up. The hang-up comes
			// once the node says it waits for it, as a predecessor that
			// lingers on does (else the two race).
			p.waitLog(t, 5*time.Second, "waiting for the hang-up", containsAll("waiting for the predecessor to hang up"))
			pr.HangUp()
			if code := p.wait(t, 5*time.Second); code != 0 {
				t.Fatalf("exit %d, want 0", code)
			}
			if got := pr.Received(); got != "START\nCOMPLETE\n" {
				t.Errorf("the predecessor received %q, want exactly %q", got, "START\nCOMPLETE\n")
			}
			p.logOrder(t, "received COMPLETE from pred", "task started", "sent COMPLETE to pred",
				"waiting for the predecessor to hang up", "predecessor link down", "node stopped")
		})
	}
}

// roundLine is what a node sends for a named round.
var roundLine = regexp.MustCompile(`^(READY|START|COMPLETE):([0-9]+)\n$`)

// playPred plays a predecessor for the given rounds: it opens them with
// READY (in random order), answers START with COMPLETE, and returns what it
// received per round once each round's exit-wave COMPLETE has arrived.
func playPred(c *testnet.Peer, rounds []string, rng *rand.Rand, eol string) (map[string][]string, error) {
	var wmu sync.Mutex
	write := func(s string) error { wmu.Lock(); defer wmu.Unlock(); return c.TrySend([]byte(s)) }
	for _, i := range rng.Perm(len(rounds)) {
		if err := write("READY:" + rounds[i] + eol); err != nil {
			return nil, err
		}
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // random spacing is the test's subject
	}
	got := map[string][]string{}
	for done := 0; done < len(rounds); {
		l, err := c.Line(10 * time.Second)
		if err != nil {
			return got, err
		}
		m := roundLine.FindStringSubmatch(l)
		if m == nil {
			return got, fmt.Errorf("predecessor received %q, want START:id or COMPLETE:id", l)
		}
		got[m[2]] = append(got[m[2]], m[1])
		switch m[1] {
		case "START":
			delay := time.Duration(rng.IntN(30)) * time.Millisecond
			time.AfterFunc(delay, func() { _ = write("COMPLETE:" + m[2] + eol) })
		case "COMPLETE":
			done++
		}
	}
	return got, nil
}

// playSucc plays a successor: it answers READY with START and the task's
// COMPLETE with the exit wave's COMPLETE.
func playSucc(c *testnet.Peer, rounds []string, rng *rand.Rand, eol string) (map[string][]string, error) {
	var wmu sync.Mutex
	write := func(s string) error { wmu.Lock(); defer wmu.Unlock(); return c.TrySend([]byte(s)) }
	got := map[string][]string{}
	for done := 0; done < len(rounds); {
		l, err := c.Line(10 * time.Second)
		if err != nil {
			return got, err
		}
		m := roundLine.FindStringSubmatch(l)
		if m == nil {
			return got, fmt.Errorf("successor received %q, want READY:id or COMPLETE:id", l)
		}
		got[m[2]] = append(got[m[2]], m[1])
		reply := "START:"
		if m[1] == "COMPLETE" {
			reply = "COMPLETE:"
			done++
		}
		delay := time.Duration(rng.IntN(30)) * time.Millisecond
		time.AfterFunc(delay, func() { _ = write(reply + m[2] + eol) })
	}
	return got, nil
}

// TestRawRounds: --rounds 3 against raw neighbours, in each role. The round
// ids are 0, 1, 2 on the wire ("READY:0\n", ...) as the reference
// implementation's --n-rounds uses them (docs/DESIGN.md "Roles and connections":
// interoperate with it on the wire); the peers interleave the rounds at
// random (draft "Message Types": concurrent rounds on one connection).
func TestRawRounds(t *testing.T) {
	rounds := []string{"0", "1", "2"}
	for _, role := range []string{"head", "middle", "tail"} {
		t.Run(role, func(t *testing.T) {
			t.Parallel()
			rng := newRand(t)
			dir := t.TempDir()
			args := []string{"run", "--name", "N", "--rounds", "3"}
			var succ *testnet.PeerListener
			var listen string
			if role != "tail" {
				succ = testnet.ListenPeer(t)
				args = append(args, "--next", succ.Addr())
			}
			if role != "head" {
				listen = freeAddrs(t, 1)[0]
				args = append(args, "--listen", listen, "--prev", "127.0.0.1:9")
			}
			p := startProc(t, "N", []string{"DIR=" + dir}, append(append(args, "--"), taskRecorder...)...)

			type result struct {
				side string
				got  map[string][]string
				err  error
			}
			results := make(chan result, 2)
			players := 0
			if succ != nil {
				s := succ.Accept(t, 5*time.Second)
				r2 := rand.New(rand.NewPCG(rng.Uint64(), 1))
				players++
				go func() { got, err := playSucc(s, rounds, r2, "\n"); results <- result{"successor", got, err} }()
			}
			if listen != "" {
				pr := testnet.DialPeer(t, listen, 5*time.Second)
				r2 := rand.New(rand.NewPCG(rng.Uint64(), 2))
				players++
				go func() {
					got, err := playPred(pr, rounds, r2, "\n")
					pr.HangUp()
					results <- result{"predecessor", got, err}
				}()
			}
			for range players {
				res := <-results
				if res.err != nil {
					t.Fatalf("%s: %v (received so far %v)", res.side, res.err, res.got)
				}
				want := []string{"READY", "COMPLETE"}
				if res.side == "predecessor" {
					want = []string{"START", "COMPLETE"}
				}
				for _, r := range rounds {
					if !slices.Equal(res.got[r], want) {
						t.Errorf("%s received %v for round %s, want %v", res.side, res.got[r], r, want)
					}
				}
				if len(res.got) != len(rounds) {
					t.Errorf("%s received messages for rounds %v, want %v", res.side, res.got, rounds)
				}
			}
			if code := p.wait(t, 10*time.Second); code != 0 {
				t.Fatalf("exit %d, want 0", code)
			}
			got := readLines(t, filepath.Join(dir, "task"))
			sort.Strings(got)
			var want []string
			for _, r := range rounds {
				want = append(want, role+"|"+r+"|N")
			}
			if !slices.Equal(got, want) {
				t.Errorf("task runs %q, want %q", got, want)
			}
		})
	}
}

// badInputs are hostile first lines from a would-be predecessor, with what
// the node's log must say about each (docs/DESIGN.md "Wire format": a line
// longer than 256 bytes, an unknown command, a NUL/control byte, and a
// message impossible in the receiver's state are protocol violations).
var badInputs = []struct {
	name, data, reason string
}{
	{"unknown command", "HELLO\n", "unknown command"},
	{"64 KiB line", strings.Repeat("A", 64<<10) + "\n", "longer than 256 bytes"},
	{"binary garbage", "\x00\xff\xfe\x01\x1b[31mREADY\x07\n", "control byte"},
	{"COMPLETE before WATCH", "COMPLETE\n", "before this node is in WATCH"},
	{"START from the predecessor", "START\n", "START travels backward"},
}

// sendBad plays one hostile client against the node's --listen address and
// checks what docs/DESIGN.md "Wire format" promises: "Bad input never kills a
// node and never moves its state. The node reports the violation clearly
// (peer address, ...), closes that connection, and keeps waiting".
func sendBad(t *testing.T, p *proc, listen, data, reason string) {
	t.Helper()
	c := testnet.DialPeer(t, listen, 5*time.Second)
	_ = c.TrySend([]byte(data)) // the node may reset the connection mid-write
	l := p.waitLog(t, 5*time.Second, fmt.Sprintf("reporting %q from %s", reason, c.Addr()), containsAll("bad input", c.Addr(), reason))
	if !strings.Contains(l, "WARN") {
		t.Errorf("violation logged below WARN: %s", l)
	}
	if strings.Contains(reason, "WATCH") || strings.Contains(reason, "backward") {
		if !strings.Contains(l, "state SYNC") {
			t.Errorf("the violation report does not name the round's state (SYNC): %s", l)
		}
	}
	c.ExpectClosed(t, 5*time.Second)
	if !p.running() {
		t.Fatalf("%s exited (%d) after bad input", p.name, p.code)
	}
}

// TestBadInputToMiddle: hostile clients connect to a middle node's --listen
// port before the honest predecessor and send bad input. Each is reported
// and closed; nothing is acted on (no task, nothing to the successor); the
// process stays up; the round then completes with a well-behaved
// predecessor (docs/DESIGN.md "Roles and connections": a new connection is
// pending until it sent a well-formed protocol line; "Wire format": "Bad
// input never kills a node and never moves its state").
func TestBadInputToMiddle(t *testing.T) {
	t.Run("raw-neighbours", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		succ := testnet.ListenPeer(t)
		listen := freeAddrs(t, 1)[0]
		p := startProc(t, "B", []string{"DIR=" + dir}, append([]string{"run", "--name", "B", "--listen", listen,
			"--prev", "127.0.0.1:9", "--next", succ.Addr(), "--"}, taskRecorder...)...)
		s := succ.Accept(t, 5*time.Second)
		p.waitLog(t, 5*time.Second, "locally ready", containsAll("locally ready"))
		for _, bad := range badInputs {
			sendBad(t, p, listen, bad.data, bad.reason)
			// Reported as it was handled: anything the node did about it
			// (it logs a message before it sends it, a task before it
			// starts it) is in its log by now.
			if exists(filepath.Join(dir, "task")) || p.logCount("task started") > 0 || p.sentCount("") > 0 {
				t.Fatalf("after %s: the task ran or the node sent something", bad.name)
			}
		}
		if strings.ContainsRune(p.err.String(), 0) {
			t.Errorf("the log contains a raw NUL byte: offending bytes must be escaped")
		}
		// Now the honest predecessor.
		pr := testnet.DialPeer(t, listen, 5*time.Second)
		pr.Send(t, "READY\n")
		s.Expect(t, "READY\n")
		// A stray that connects mid-round with garbage changes nothing.
		sendBad(t, p, listen, "HELLO\n", "unknown command")
		finishMiddle(t, p, pr, s, dir)
		s.ExpectClosed(t, 5*time.Second)
	})

	t.Run("real-neighbours", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		names := nodeNames(3)
		addrs := freeAddrs(t, 3)
		run := func(i int) *proc {
			args := append([]string{"run"}, placeArgs("chain", names, addrs, i)...)
			return startProc(t, names[i], []string{"DIR=" + dir}, append(append(args, "--"), taskRecorder...)...)
		}
		c := run(2)
		b := run(1)
		b.waitLog(t, 5*time.Second, "link up to the successor", containsAll("link up to succ"))
		b.waitLog(t, 5*time.Second, "locally ready", containsAll("locally ready"))
		for _, bad := range badInputs {
			sendBad(t, b, addrs[1], bad.data, bad.reason)
		}
		// sendBad waited for B to report each input, which it does as it
		// handles it, and a node logs what it sends and each task it
		// starts before doing either: anything B did about the input is
		// in its log by now.
		if exists(filepath.Join(dir, "task")) || strings.Contains(b.err.String(), "task started") {
			t.Fatalf("a task ran after bad input: %q", readLines(t, filepath.Join(dir, "task")))
		}
		if strings.Contains(c.err.String(), "received") || strings.Contains(b.err.String(), "sent ") {
			t.Fatalf("B acted on bad input: it sent something to C")
		}
		if !c.running() {
			t.Fatalf("C exited (%d)", c.code)
		}
		a := run(0)
		for i, pp := range []*proc{a, b, c} {
			if code := pp.wait(t, 10*time.Second); code != 0 {
				t.Errorf("%s exited %d, want 0", names[i], code)
			}
		}
		if got, want := readLines(t, filepath.Join(dir, "task")), []string{"head||A", "middle||B", "tail||C"}; !slices.Equal(got, want) {
			t.Errorf("task runs %q, want %q", got, want)
		}
	})

	// Bad input from the successor's side (READY travels forward only):
	// the node reports it, drops the connection, re-dials, and nothing
	// reaches the predecessor (docs/DESIGN.md "Wire format": "re-dialing, if it
	// is the dialing side").
	t.Run("bad-successor", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		succ := testnet.ListenPeer(t)
		listen := freeAddrs(t, 1)[0]
		p := startProc(t, "B", []string{"DIR=" + dir}, append([]string{"run", "--name", "B", "--listen", listen,
			"--prev", "127.0.0.1:9", "--next", succ.Addr(), "--"}, taskRecorder...)...)
		pr := testnet.DialPeer(t, listen, 5*time.Second)
		s1 := succ.Accept(t, 5*time.Second)
		pr.Send(t, "READY\n")
		s1.Expect(t, "READY\n")
		s1.Send(t, "READY\n")
		p.waitLog(t, 5*time.Second, "reporting READY from the successor", containsAll("bad input from successor", "READY travels forward"))
		s1.ExpectClosed(t, 5*time.Second)
		// The node re-dials and re-sends its READY.
		s2 := succ.Accept(t, 5*time.Second)
		s2.Expect(t, "READY\n")
		finishMiddle(t, p, pr, s2, dir)
		// Nothing reached the predecessor but its own round's messages,
		// after their causes.
		if got := pr.Received(); got != "START\nCOMPLETE\n" {
			t.Errorf("the predecessor received %q, want exactly %q", got, "START\nCOMPLETE\n")
		}
		p.logOrder(t, "READY travels forward", "received START from succ", "sent START to pred")
		if n := p.sentCount("pred"); n != 2 {
			t.Errorf("B logged %d messages to the predecessor, want START and COMPLETE only", n)
		}
	})
}

// finishMiddle plays the rest of a round for a middle node B between raw
// peers pr and s once both saw READY: START back, COMPLETE forward, the
// exit wave back; then B must exit 0 having run its task exactly once.
func finishMiddle(t *testing.T, p *proc, pr, s *testnet.Peer, dir string) {
	t.Helper()
	s.Send(t, "START\n")
	pr.Expect(t, "START\n")
	pr.Send(t, "COMPLETE\n")
	s.Expect(t, "COMPLETE\n")
	s.Send(t, "COMPLETE\n")
	pr.Expect(t, "COMPLETE\n")
	pr.HangUp()
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if got := readLines(t, filepath.Join(dir, "task")); !slices.Equal(got, []string{"middle||B"}) {
		t.Errorf("task runs %q, want exactly one", got)
	}
}

// TestRawReconnect: a Tail whose raw predecessor drops the link mid-round
// and again after the last COMPLETE. docs/DESIGN.md "Roles and connections":
// after reconnecting each side re-sends the last message it sent on the
// link for every unfinished round; an exact duplicate is a no-op; "a
// transient disconnect loses nothing and never triggers a task twice". And
// run --linger: a node that is done still answers a predecessor that
// reconnects and re-sends its COMPLETE (its exit-wave COMPLETE may have
// been lost).
func TestRawReconnect(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	listen := freeAddrs(t, 1)[0]
	p := startProc(t, "C", []string{"DIR=" + dir}, append([]string{"run", "--name", "C", "--listen", listen, "--prev", "127.0.0.1:9", "--"}, taskRecorder...)...)
	pr1 := testnet.DialPeer(t, listen, 5*time.Second)
	pr1.Send(t, "READY\n")
	pr1.Expect(t, "START\n")
	pr1.HangUp()

	// Mid-round: the predecessor comes back and re-sends READY; the Tail
	// re-sends START once, and nothing runs yet.
	pr2 := testnet.DialPeer(t, listen, 5*time.Second)
	pr2.Send(t, "READY\n")
	pr2.Expect(t, "START\n")
	pr2.Send(t, "COMPLETE\n")
	pr2.Expect(t, "COMPLETE\n")
	pr2.HangUp()

	// After the round: the predecessor reconnects at once (within --linger's
	// grace) and re-sends COMPLETE, as if the exit wave had been lost.
	pr3 := testnet.DialPeer(t, listen, 5*time.Second)
	pr3.Send(t, "COMPLETE\n")
	pr3.Expect(t, "COMPLETE\n")
	pr3.HangUp()
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if got := readLines(t, filepath.Join(dir, "task")); !slices.Equal(got, []string{"tail||C"}) {
		t.Errorf("task runs %q, want exactly one", got)
	}
	// START once per READY, COMPLETE once per COMPLETE, and the task
	// only once COMPLETE came.
	if st, co := p.logCount("sent START to pred"), p.logCount("sent COMPLETE to pred"); st != 2 || co != 2 {
		t.Errorf("the Tail sent START %d and COMPLETE %d times, want each twice (once, then once on the new connection)", st, co)
	}
	p.logOrder(t, "received COMPLETE from pred", "task started")
	if got := pr2.Received() + pr3.Received(); got != "START\nCOMPLETE\nCOMPLETE\n" {
		t.Errorf("the reconnected predecessor received %q, want exactly %q", got, "START\nCOMPLETE\nCOMPLETE\n")
	}
}
