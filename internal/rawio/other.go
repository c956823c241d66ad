//go:build !unix

package rawio

import (
	"io"
	"net"
)

// NewReader returns c: outside Unix the standard reads are used.
func NewReader(c net.Conn) io.Reader { return c }

// WriteNow writes nothing on systems without a non-blocking write to a
// socket's descriptor in the standard library: the blocking write is the
// only one.
func WriteNow(net.Conn, []byte) (int, error) { return 0, nil }
