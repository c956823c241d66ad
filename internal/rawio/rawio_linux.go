package rawio

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
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

// NewConn returns c read and written with raw system calls, for a
// protocol layered on it (TLS): Read as NewReader reads, Write as a
// Writer's Write writes (at once what the socket takes, the rest with
// c's own Write, which waits for room); everything else is c's (its
// deadlines, Close, CloseWrite), and NetConn returns c. For a
// connection that is not a *net.TCPConn, or whose socket is in blocking
// mode, it returns c.
func NewConn(c net.Conn) net.Conn {
	if rawConn(c) == nil {
		return c
	}
	return &conn{TCPConn: c.(*net.TCPConn), r: NewReader(c), w: NewWriter(c)}
}

// conn is a TCP connection read and written with raw system calls.
type conn struct {
	*net.TCPConn
	r io.Reader
	w *Writer
}

// Read reads what has arrived into b, waiting for something if nothing
// has (NewReader).
func (c *conn) Read(b []byte) (int, error) { return c.r.Read(b) }

// Write writes all of b (Writer.Write).
func (c *conn) Write(b []byte) (int, error) { return c.w.Write(b) }

// NetConn returns the TCP connection c reads and writes.
func (c *conn) NetConn() net.Conn { return c.TCPConn }

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

// tlsUnder is the raw side of the TCP socket under c, if c is a TLS
// connection (a *tls.Conn, or a type that embeds one) over a TCP
// connection, directly or through wrappers that name the connection
// they wrap (a NetConn method, as *tls.Conn has); else nil.
func tlsUnder(c net.Conn) syscall.RawConn {
	if _, ok := c.(interface {
		ConnectionState() tls.ConnectionState
	}); !ok {
		return nil
	}
	for range 8 {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		if c = u.NetConn(); c == nil {
			return nil
		}
		if rc := tcpRaw(c); rc != nil {
			return rc
		}
	}
	return nil
}

// TakesNow reports whether the TCP socket under w's TLS connection
// would take n more bytes of its records at once, so that the
// connection's Write would not wait for the peer; false for any other
// connection, or more than maxTakes bytes. It asks the kernel how much
// the socket holds against its send buffer (SO_MEMINFO): Linux accepts
// a write while the bytes it holds, counted with their buffers'
// overhead, are below the buffer's size, so the answer is yes only with
// twice n and 8 KiB to spare (TLS adds a header and a tag to each
// record, and the kernel a buffer's overhead to each write).
func (w *Writer) TakesNow(n int) bool {
	if w.under == nil || n > maxTakes {
		return false
	}
	if w.room == nil {
		w.room = w.roomFd
	}
	w.need, w.takes = n, false
	if err := w.under.Control(w.room); err != nil {
		return false
	}
	return w.takes
}

// SO_MEMINFO and the two of its values roomFd reads (linux/sock_diag.h).
const (
	soMeminfo       = 55
	meminfoSndbuf   = 3
	meminfoQueued   = 5
	meminfoVarCount = 9
)

// roomFd sets w.takes to whether the socket fd has room for w.need bytes.
func (w *Writer) roomFd(fd uintptr) {
	var mi [meminfoVarCount]uint32
	size := uint32(unsafe.Sizeof(mi))
	_, _, e := syscall.RawSyscall6(syscall.SYS_GETSOCKOPT, fd, syscall.SOL_SOCKET, soMeminfo,
		uintptr(unsafe.Pointer(&mi[0])), uintptr(unsafe.Pointer(&size)), 0)
	w.takes = e == 0 && size >= 4*(meminfoQueued+1) &&
		int64(mi[meminfoQueued])+2*int64(w.need)+8<<10 <= int64(mi[meminfoSndbuf])
}
