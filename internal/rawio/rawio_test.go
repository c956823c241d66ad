//go:build unix

package rawio

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// pair returns the two ends of a loopback TCP connection.
func pair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// TestLinesBothWays checks that lines written with WriteNow and Write
// arrive whole and in order through NewReader, in both directions, and
// that the end of the stream reads as io.EOF, as from the connection's
// own Read (the transport under every link of the draft's section 3).
func TestLinesBothWays(t *testing.T) {
	a, b := pair(t)
	for _, dir := range []struct {
		from, to *net.TCPConn
	}{{a, b}, {b, a}} {
		r := bufio.NewReader(NewReader(dir.to))
		w := NewWriter(dir.from)
		for i := range 100 {
			line := strings.Repeat("x", i) + "\n"
			var err error
			if i%2 == 0 {
				_, err = w.Write([]byte(line))
			} else {
				var k int
				k, err = w.WriteNow([]byte(line))
				if err == nil && k != len(line) {
					t.Fatalf("WriteNow wrote %d of %d bytes to an empty socket", k, len(line))
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.ReadString('\n')
			if err != nil || got != line {
				t.Fatalf("line %d: read %q, %v", i, got, err)
			}
		}
	}
	a.Close()
	if n, err := NewReader(b).Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("at the end of the stream: %d, %v; want 0, io.EOF", n, err)
	}
}

// TestReadErrorsAsConnRead checks that a read past its deadline and a
// read of a closed connection fail as the connection's own Read does:
// the same error values inside a *net.OpError of operation "read".
func TestReadErrorsAsConnRead(t *testing.T) {
	a, _ := pair(t)
	r := NewReader(a)
	_ = a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := r.Read(make([]byte, 10))
	var oe *net.OpError
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &oe) || oe.Op != "read" || !oe.Timeout() {
		t.Fatalf("past the deadline: %v (%T); want a read OpError of os.ErrDeadlineExceeded", err, err)
	}
	_ = a.SetReadDeadline(time.Time{})

	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 10))
		done <- err
	}()
	// Whether the read waits in the poller by then or has not begun, it
	// ends with the connection closed.
	a.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) || !errors.As(err, &oe) || oe.Op != "read" {
			t.Fatalf("closed while reading: %v (%T); want a read OpError of net.ErrClosed", err, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a waiting read")
	}
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v; want net.ErrClosed", err)
	}
}

// TestWriteNowStopsAtAFullSocket checks that WriteNow never waits: to a
// peer that does not read it writes what the socket takes and returns,
// and Write then waits until the peer reads and delivers the rest.
func TestWriteNowStopsAtAFullSocket(t *testing.T) {
	a, b := pair(t)
	big := make([]byte, 64<<20)
	w := NewWriter(a)
	k, err := w.WriteNow(big)
	if err != nil || k <= 0 || k >= len(big) {
		t.Fatalf("WriteNow to a peer that does not read: %d of %d bytes, %v; want some, not all", k, len(big), err)
	}
	rest := big[k:][:1<<20]
	done := make(chan error, 1)
	go func() {
		_, err := w.Write(rest)
		done <- err
	}()
	got, err := io.ReadFull(NewReader(b), make([]byte, k+len(rest)))
	if err != nil || got != k+len(rest) {
		t.Fatalf("read %d bytes, %v; want %d", got, err, k+len(rest))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestOtherConnsPassThrough checks that a connection that is not plain
// TCP is read as it is, and that WriteNow leaves it to a blocking write.
func TestOtherConnsPassThrough(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	if r := NewReader(c1); r != io.Reader(c1) {
		t.Fatalf("NewReader of a pipe: %T, want the pipe itself", r)
	}
	if k, err := NewWriter(c1).WriteNow([]byte("x\n")); k != 0 || err != nil {
		t.Fatalf("WriteNow to a pipe: %d, %v; want 0, nil", k, err)
	}
}

// TestWriteFailsAsConnWrite checks that Write to a closed connection
// fails as the connection's own Write does.
func TestWriteFailsAsConnWrite(t *testing.T) {
	a, _ := pair(t)
	a.Close()
	_, want := a.Write([]byte("x\n"))
	_, err := NewWriter(a).Write([]byte("x\n"))
	if err == nil || want == nil || err.Error() != want.Error() {
		t.Fatalf("Write to a closed connection: %v; want %v", err, want)
	}
}
