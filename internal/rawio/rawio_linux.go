package rawio

import (
	"io"
	"net"
	"os"
	"syscall"
)

// NewReader returns a reader of c whose reads are raw system calls on
// c's socket, waiting in Go's poller when nothing has arrived, as c.Read
// does: its errors are those c.Read returns (io.EOF at the end of the
// stream; a *net.OpError otherwise), and c's read deadline and Close
// apply. For a connection that is not a *net.TCPConn, or whose socket is
// in blocking mode, it returns c.
func NewReader(c net.Conn) io.Reader {
	rc := rawConn(c)
	if rc == nil {
		return c
	}
	r := &reader{c: c, rc: rc}
	r.f = r.read
	return r
}

// rawConn is the raw side of c if it is a plain TCP connection whose
// socket is in non-blocking mode (as Go's net package makes them), else
// nil. A raw call on a blocking socket could wait inside the system call
// without the scheduler knowing, and hold up the whole process.
func rawConn(c net.Conn) syscall.RawConn {
	rc := tcpRaw(c)
	if rc == nil {
		return nil
	}
	nonblocking := false
	if err := rc.Control(func(fd uintptr) {
		fl, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		nonblocking = e == 0 && fl&syscall.O_NONBLOCK != 0
	}); err != nil || !nonblocking {
		return nil
	}
	return rc
}

// reader is a TCP connection read with raw system calls.
type reader struct {
	c  net.Conn
	rc syscall.RawConn
	f  func(fd uintptr) bool // r.read, bound once

	// One Read's buffer and outcome, for f.
	buf   []byte
	n     int
	errno syscall.Errno
}

// Read reads what has arrived into b, waiting for something if nothing
// has.
func (r *reader) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r.buf, r.n, r.errno = b, 0, 0
	err := r.rc.Read(r.f)
	r.buf = nil
	switch {
	case err != nil:
		// Closed, or past the deadline: the poller's own error, under
		// the operation c.Read names.
		if oe, ok := err.(*net.OpError); ok {
			err = oe.Err
		}
		return 0, r.opError(err)
	case r.errno != 0:
		return 0, r.opError(os.NewSyscallError("read", r.errno))
	case r.n == 0:
		return 0, io.EOF
	}
	return r.n, nil
}

// read makes one read system call into r.buf; false if nothing had
// arrived (the poller waits, then calls it again).
func (r *reader) read(fd uintptr) bool {
	for {
		n, e := sysRead(fd, r.buf)
		switch e {
		case 0:
			r.n = n
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			r.errno = e
			return true
		}
	}
}

// opError is err as c.Read reports it.
func (r *reader) opError(err error) error {
	return &net.OpError{Op: "read", Net: "tcp", Source: r.c.LocalAddr(), Addr: r.c.RemoteAddr(), Err: err}
}

// write makes write system calls on fd until b is written or the socket
// takes no more now.
func write(fd uintptr, b []byte) (int, syscall.Errno) {
	wrote := 0
	for wrote < len(b) {
		n, e := sysWrite(fd, b[wrote:])
		switch e {
		case 0:
			wrote += n
		case syscall.EINTR:
		default:
			return wrote, e
		}
	}
	return wrote, 0
}
