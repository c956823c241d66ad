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
package rawio

import "net"

// Write writes all of b to c: what c's socket takes now with WriteNow,
// the rest with c.Write, which waits for room (and reports a failed
// socket as c.Write does).
func Write(c net.Conn, b []byte) (int, error) {
	k, err := WriteNow(c, b)
	if err == nil && k == len(b) {
		return k, nil
	}
	m, err := c.Write(b[k:])
	return k + m, err
}
