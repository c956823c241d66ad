//go:build unix

package rawio

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// tcpRaw is the raw side of c if it is a plain TCP connection, else nil.
func tcpRaw(c net.Conn) syscall.RawConn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// WriteNow writes as much of b as the socket takes without waiting, and
// returns how much it wrote; an error only if the socket failed (not
// for a full socket: the rest is for a blocking write). Only a plain TCP
// connection in non-blocking mode can: for others it writes nothing.
func (w *Writer) WriteNow(b []byte) (int, error) {
	if w.rc == nil || len(b) == 0 {
		return 0, nil
	}
	if w.f == nil {
		w.f = w.writeFd
	}
	w.buf, w.wrote, w.errno = b, 0, 0
	cerr := w.rc.Write(w.f) // never waits: writeFd says it is done
	wrote, e := w.wrote, w.errno
	w.buf = nil
	var werr error
	if e != 0 && e != syscall.EAGAIN {
		werr = e
	}
	if werr == nil && !errors.Is(cerr, os.ErrDeadlineExceeded) {
		// An expired deadline is that of the last blocking write (which
		// renews it only when it writes): nothing went wrong here, so
		// leave the bytes to the next blocking write.
		werr = cerr
	}
	return wrote, werr
}

// writeFd writes w.buf on fd as far as the socket takes it now.
func (w *Writer) writeFd(fd uintptr) bool {
	w.wrote, w.errno = write(fd, w.buf)
	return true // never wait here: a blocking write does
}
