// Package rawio reads and writes a node's TCP links with system calls
// that do not tell Go's scheduler about themselves.
//
// A read or a write of a non-blocking socket never waits: it returns what
// the socket has, or takes, at once (waiting for more is Go's poller's
// job). Made the standard way, each such call still enters and leaves the
// scheduler's "in a system call" state, and the first one a process makes
// after all its threads went idle wakes the runtime's monitor thread,
// which then polls every 20 µs until the process is idle again. A chain's
// process goes idle and wakes again at every hop of every round, so that
// wake-up (a futex wake-up on the hop's way, and the monitor's thread
// competing for a CPU with the hop) was paid at every hop. The raw calls
// here skip it; the waiting is still done by Go's poller, with the
// connection's deadlines and Close working as for its own Read.
//
// On Linux the calls are raw (but under the race detector, whose build
// makes the standard ones, so that it still sees what the kernel reads
// and writes); elsewhere NewReader returns the connection itself and
// WriteNow makes a standard non-blocking write (Unix) or none.
//
// A TLS connection reads and writes the socket under it the same way
// when that socket is wrapped with NewConn. Its own Write waits when the
// socket is full; for it, a Writer tells whether the socket would take
// a write of some size at once (TakesNow, Linux only), so that a link
// can write its lines from the goroutine that queued them, without
// waiting, and hand them to its writer only when the peer is slow.
package rawio

import (
	"net"
	"syscall"
)

// Writer writes a connection as a link does: WriteNow without waiting,
// Write all of it. Make one per connection with NewWriter; one goroutine
// at a time may write with it.
type Writer struct {
	c net.Conn
	// rc is the connection's raw side; nil where WriteNow writes nothing
	// (not a plain TCP connection, a socket in blocking mode, or not a
	// Unix system).
	rc syscall.RawConn
	// under is the raw side of the TCP socket under a TLS connection
	// (TakesNow); nil for any other connection.
	under syscall.RawConn

	// One WriteNow's bytes and outcome, for f (w.writeFd, bound once: no
	// allocation per write).
	f     func(fd uintptr) bool
	buf   []byte
	wrote int
	errno syscall.Errno

	// One TakesNow's size and answer, for room (w.roomFd, bound once).
	room  func(fd uintptr)
	need  int
	takes bool
}

// NewWriter returns the Writer of c.
func NewWriter(c net.Conn) *Writer {
	w := &Writer{c: c, rc: rawConn(c)}
	if w.rc == nil {
		w.under = tlsUnder(c)
	}
	return w
}

// OverTLS reports whether w writes a TLS connection over a TCP socket
// whose room TakesNow can tell (WriteNow writes nothing to it).
func (w *Writer) OverTLS() bool { return w.under != nil }

// maxTakes is the most TakesNow vouches for: one TLS record's worth.
const maxTakes = 16 << 10

// Conn is the connection w writes.
func (w *Writer) Conn() net.Conn { return w.c }

// Write writes all of b: what the socket takes now with WriteNow, the
// rest with the connection's Write, which waits for room (and reports a
// failed socket as the connection's Write does).
func (w *Writer) Write(b []byte) (int, error) {
	k, err := w.WriteNow(b)
	if err == nil && k == len(b) {
		return k, nil
	}
	m, err := w.c.Write(b[k:])
	return k + m, err
}
