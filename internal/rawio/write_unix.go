//go:build unix

package rawio

import (
	"errors"
	"os"
	"syscall"
)

// WriteNow writes as much of b as the socket takes without waiting, and
// returns how much it wrote; an error only if the socket failed (not
// for a full socket: the rest is for a blocking write). Only a plain TCP
// connection in non-blocking mode can: for others it writes nothing.
func (w *Writer) WriteNow(b []byte) (int, error) {
	if w.rc == nil || len(b) == 0 {
		return 0, nil
	}
	wrote := 0
	var werr error
	cerr := w.rc.Write(func(fd uintptr) bool {
		var e syscall.Errno
		wrote, e = write(fd, b)
		if e != 0 && e != syscall.EAGAIN {
			werr = e
		}
		return true // never wait here: a blocking write does
	})
	if werr == nil && !errors.Is(cerr, os.ErrDeadlineExceeded) {
		// An expired deadline is that of the last blocking write (which
		// renews it only when it writes): nothing went wrong here, so
		// leave the bytes to the next blocking write.
		werr = cerr
	}
	return wrote, werr
}
