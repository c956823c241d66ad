//go:build unix && !linux

package rawio

import (
	"io"
	"net"
	"syscall"
)

// NewReader returns c: outside Linux the standard reads are used.
func NewReader(c net.Conn) io.Reader { return c }

// rawConn is the raw side of c if it is a plain TCP connection (its
// writes are standard system calls here), else nil.
func rawConn(c net.Conn) syscall.RawConn { return tcpRaw(c) }

// write makes write system calls on fd until b is written or the socket
// takes no more now.
func write(fd uintptr, b []byte) (int, syscall.Errno) {
	wrote := 0
	for wrote < len(b) {
		n, err := syscall.Write(int(fd), b[wrote:])
		if n > 0 {
			wrote += n
		}
		switch err {
		case nil:
		case syscall.EINTR:
		default:
			e, _ := err.(syscall.Errno)
			if e == 0 {
				e = syscall.EIO
			}
			return wrote, e
		}
	}
	return wrote, 0
}

// tlsUnder is nil: outside Linux TakesNow cannot tell a socket's room.
func tlsUnder(net.Conn) syscall.RawConn { return nil }

// TakesNow is false: outside Linux a TLS link's lines all go through its
// writer.
func (w *Writer) TakesNow(int) bool { return false }

// NewConn returns c: outside Linux the standard reads and writes are used.
func NewConn(c net.Conn) net.Conn { return c }
