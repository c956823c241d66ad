//go:build !unix

package rawio

import (
	"io"
	"net"
	"syscall"
)

// NewReader returns c: outside Unix the standard reads are used.
func NewReader(c net.Conn) io.Reader { return c }

// rawConn is nil: outside Unix there is no non-blocking write to a
// socket's descriptor in the standard library.
func rawConn(net.Conn) syscall.RawConn { return nil }

// WriteNow writes nothing: the connection's blocking Write is the only
// write here.
func (w *Writer) WriteNow([]byte) (int, error) { return 0, nil }

// tlsUnder is nil: outside Unix TakesNow cannot tell a socket's room.
func tlsUnder(net.Conn) syscall.RawConn { return nil }

// TakesNow is false: outside Unix a TLS link's lines all go through its
// writer.
func (w *Writer) TakesNow(int) bool { return false }

// NewConn returns c: outside Unix the standard reads and writes are used.
func NewConn(c net.Conn) net.Conn { return c }
