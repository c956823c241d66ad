//go:build unix

package chainsync

// Tests of the per-link writer and of Wait's bookkeeping (issue 8: "No I/O
// under the node lock"; "Wait on a round that never started must not leak
// an entry or outlive Close").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/secure"
)

// smallBufListener listens on loopback with a small, fixed send buffer,
// which the connections it accepts inherit: what the node writes to such
// a connection stops fitting in the kernel after a few kilobytes when the
// peer does not read (an autotuned buffer takes megabytes).
func smallBufListener(t *testing.T) net.Listener {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestStuckPeerStallsNothing: issue 8, "No I/O under the node lock": a
// neighbour that stops reading must not freeze the node. The test plays
// the Tail's predecessor: it opens 1000 rounds with READY and never reads
// the Tail's STARTs (about 130 KB; the socket takes a few KB, the rest
// waits in the link's outbox for its writer). Meanwhile Snapshot, Ready,
// and Wait stay fast (each call far from the write timeout; the slowest
// is logged, typically well under a millisecond), the Tail
// keeps reading and acting on the predecessor's lines, the predecessor is
// cut off once a write has waited WriteTimeout, and Close returns at once.
func TestStuckPeerStallsNothing(t *testing.T) {
	stuckPeer(t, nil, func(addr string) (net.Conn, error) {
		// A plain connection, not a testnet.Peer: it never reads.
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
		}
		return c, err
	})
}

// TestStuckTLSPeerStallsNothing is TestStuckPeerStallsNothing over TLS
// (a pre-shared key; the draft's Security Considerations). A TLS link
// writes its lines from the goroutine that ran the turn while the socket
// under it has room for them (writenow.go): once the predecessor stops
// reading, that check must hand every write to the link's writer, or
// the goroutine that reads the predecessor would wait in a write and the
// Tail would stop acting on its lines.
func TestStuckTLSPeerStallsNothing(t *testing.T) {
	tailSec, predSec := pskPair(t)
	stuckPeer(t, tailSec, func(addr string) (net.Conn, error) {
		raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return nil, err
		}
		_ = raw.(*net.TCPConn).SetReadBuffer(4096)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return predSec.Client(ctx, raw, addr) // reads the handshake, then nothing
	})
}

// stuckPeer runs TestStuckPeerStallsNothing on a Tail secured with sec
// (nil: plain TCP), whose predecessor dial connects.
func stuckPeer(t *testing.T, sec *secure.Config, dial func(addr string) (net.Conn, error)) {
	const rounds = 1000
	const writeTimeout = time.Second
	cfg := Config{Name: "T", Listener: smallBufListener(t), MaxRounds: rounds + 100, WriteTimeout: writeTimeout}
	if sec != nil {
		cfg.Secure = sec
	}
	tail := startWatched(t, cfg)
	id := func(i int) string { return fmt.Sprintf("r%05d-%s", i, strings.Repeat("x", 110)) }
	for i := range rounds + 50 {
		if err := tail.Ready(id(i)); err != nil {
			t.Fatal(err)
		}
	}
	pred, err := dial(tail.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer pred.Close()
	var lines strings.Builder
	for i := range rounds {
		lines.WriteString(wireLine("READY", id(i)))
	}
	sent := time.Now()
	if _, err := pred.Write([]byte(lines.String())); err != nil {
		t.Fatal(err)
	}

	var slowest time.Duration
	timed := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		d := time.Since(start)
		slowest = max(slowest, d)
		// A call that waited on the stuck write would take the write
		// timeout; half of it leaves room for a loaded machine.
		if d > writeTimeout/2 {
			t.Errorf("%s took %v while the predecessor is not reading (a stall waits for the %v write timeout)", what, d, writeTimeout)
		}
	}
	// Until the cut-off, every call that takes the node's lock is quick,
	// and the Tail acts on every READY although it cannot send the STARTs.
	var cut time.Duration
	var watching, i int
	probe := func() bool {
		defer func() { i++ }()
		watching = 0
		timed("Snapshot", func() {
			for _, r := range tail.Snapshot().Rounds {
				if r.State == protocol.StateWatch {
					watching++
				}
			}
		})
		timed("Ready", func() {
			if err := tail.Ready(id(i % rounds)); err != nil {
				t.Fatal(err)
			}
		})
		timed("Wait", func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			defer cancel()
			if _, err := tail.Wait(ctx, id(i%rounds)); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait: %v", err)
			}
		})
		if tail.logs.count(func(e capturedLog) bool { return strings.Contains(e.Msg, "write failed") }) == 0 {
			return false
		}
		cut = time.Since(sent)
		if watching < rounds {
			t.Errorf("%d of %d rounds in WATCH when the predecessor was cut off: the Tail stopped acting on its lines", watching, rounds)
		}
		return true
	}
	if !poll(writeTimeout+5*time.Second, 10*time.Millisecond, probe) {
		t.Fatalf("the predecessor that does not read was not cut off %v after its lines (WriteTimeout %v); %d rounds in WATCH",
			time.Since(sent).Round(time.Millisecond), writeTimeout, watching)
	}
	if cut < writeTimeout {
		t.Errorf("the predecessor was cut off %v after its lines, before WriteTimeout %v", cut, writeTimeout)
	}
	start := time.Now()
	tail.Close()
	closed := time.Since(start)
	if closed > 500*time.Millisecond {
		t.Errorf("Close took %v with a predecessor that does not read", closed)
	}
	t.Logf("slowest Snapshot/Ready/Wait while stuck: %v; cut off %v after the lines (WriteTimeout %v); Close took %v",
		slowest.Round(time.Microsecond), cut.Round(time.Millisecond), writeTimeout, closed.Round(time.Microsecond))
}

// TestWaitUnknownRound: issue 8: "Wait on a round that never started must
// not leak an entry or outlive Close (return ErrStopped)". Waits on round
// ids nobody starts (a typo, a round the chain never runs) leave nothing
// in the rounds table when their contexts end; one still waiting when the
// node closes returns ErrStopped at once; and so does a Wait after Close.
func TestWaitUnknownRound(t *testing.T) {
	w := startWatched(t, Config{Name: "T", Listen: "127.0.0.1:0"})
	before := w.driverRounds()
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			res, err := w.Wait(ctx, fmt.Sprintf("typo-%d", i%20)) // several waiters per id
			if !errors.Is(err, context.DeadlineExceeded) || res.Status != 0 {
				t.Errorf("Wait on an unknown round: %v %v, want the context's error", res, err)
			}
		}()
	}
	wg.Wait()
	if n := w.driverRounds(); n != before {
		t.Errorf("%d rounds in the table after the waits ended, want %d: Wait leaked entries", n, before)
	}

	// A Wait still blocked when the node closes.
	errc := make(chan error, 1)
	go func() {
		res, err := w.Wait(context.Background(), "never")
		if err == nil && res.Status != StatusStopped {
			err = fmt.Errorf("status %v", res.Status)
		}
		errc <- err
	}()
	waitCond(t, 5*time.Second, "the Wait to register", func() bool { return w.driverRounds() == before+1 })
	start := time.Now()
	w.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrStopped) {
			t.Errorf("Wait on a round that never started returned %v after Close, want ErrStopped", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("Wait on a round that never started outlived Close by 2s")
	}
	t.Logf("a blocked Wait returned %v after Close began", time.Since(start).Round(time.Microsecond))
	if _, err := w.Wait(context.Background(), "after-close"); !errors.Is(err, ErrStopped) {
		t.Errorf("Wait after Close: %v, want ErrStopped", err)
	}
}

// nopInbox takes a link's inputs and drops them (a link under test has
// no node).
type nopInbox struct{}

func (nopInbox) post(input) bool { return true }
func (nopInbox) hold(input) bool { return true }

// TestTLSFlushNeverWaits: a TLS link (the draft's Security
// Considerations) whose peer does not read. Each
// flush comes after a quiet spell, so it writes at once (writenow.go)
// while the socket under the TLS connection has room, and once it has
// none, hands the lines to the link's writer instead: no flush may wait
// in a write, which would hold the goroutine that ran the turn (a reader
// of the other link, with its tasks) for the write timeout.
func TestTLSFlushNeverWaits(t *testing.T) {
	srvSec, cliSec := pskPair(t)
	ln := smallBufListener(t)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, _ := srvSec.Server(ctx, raw) // then never reads
		accepted <- c
	}()
	raw, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = raw.(*net.TCPConn).SetWriteBuffer(32 << 10) // room for some lines at once, and fills soon
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := cliSec.Client(ctx, raw, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := <-accepted
	if peer == nil {
		t.Fatal("the server's handshake failed")
	}
	defer peer.Close()

	const writeTimeout = 3 * time.Second
	l := &link{c: c, side: protocol.Succ, loop: nopInbox{}, crew: &crew{}, writeTimeout: writeTimeout,
		wake: make(chan struct{}, 1), quit: make(chan struct{})}
	pad := strings.Repeat("x", 100)
	direct := 0
	for i := 0; ; i++ {
		if i == 100_000 {
			t.Fatal("100,000 lines written at once to a peer that does not read")
		}
		l.lastSent.Store(0) // quiet for long: the flush may write at once
		if !l.enqueue([]byte(wireLine("START", fmt.Sprintf("r%06d-%s", i, pad))), false, "") {
			t.Fatal("the outbox is full")
		}
		start := time.Now()
		l.flush()
		if d := time.Since(start); d > writeTimeout/2 {
			t.Fatalf("line %d: a flush took %v: it waited in a write on a full socket", i, d)
		}
		l.wmu.Lock()
		handed := len(l.out) > 0
		l.wmu.Unlock()
		if handed {
			if direct == 0 {
				t.Fatal("the first flush already handed its line to the writer: nothing was written at once")
			}
			t.Logf("%d lines written at once; the socket then had no room and the next went to the writer", direct)
			return
		}
		direct++
	}
}

// pskPair returns the TLS settings of a node T and of its predecessor P,
// with one pre-shared key.
func pskPair(t *testing.T) (tail, pred *secure.Config) {
	t.Helper()
	psk := filepath.Join(t.TempDir(), "psk")
	if err := secure.WritePSKFile(psk, false); err != nil {
		t.Fatal(err)
	}
	return mustLoad(t, secure.Options{PSKFile: psk, SelfName: "T", PrevName: "P"}),
		mustLoad(t, secure.Options{PSKFile: psk, SelfName: "P", NextName: "T"})
}

// TestCloseDoesNotResetThePeer: a link closed while the peer's lines sit
// unread in its socket ends its side and drains them first, so the peer
// reads the last line written to it (a halting node's fault notice) and
// then the end of the stream, not a reset that can cost it that line.
// The draft's Error Handling: every node hears of a halt.
func TestCloseDoesNotResetThePeer(t *testing.T) {
	peer, c := loopbackPair(t)
	if _, err := peer.Write([]byte("COMPLETE:r3\nCOMPLETE:r4\n")); err != nil { // unread by c
		t.Fatal(err)
	}
	waitUnread(t, c, len("COMPLETE:r3\nCOMPLETE:r4\n"))
	if _, err := c.Write([]byte("FAULT:halt\n")); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { closeQuick(c); close(closed) }()
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	buf := make([]byte, 64)
	for {
		n, err := peer.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("the peer read %q, then %v: want the line, then the end of the stream", got, err)
			}
			break
		}
	}
	if string(got) != "FAULT:halt\n" {
		t.Fatalf("the peer read %q", got)
	}
	peer.Close() // as a node does at the end of the stream: the linger ends
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("closeQuick did not return")
	}
}

// waitUnread waits until c's socket holds n bytes unread (peeked, not
// taken).
func waitUnread(t *testing.T, c net.Conn, n int) {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, n)
	got := 0
	if err := rc.Read(func(fd uintptr) bool {
		got, _, _ = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK)
		return got >= n
	}); err != nil {
		t.Fatal(err)
	}
}
