//go:build unix

package chainsync

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// writeNow writes as much of b as the socket takes without waiting. Only
// a plain TCP connection can; others leave everything to the writer.
func (l *link) writeNow(b []byte) (int, error) {
	tc, ok := l.c.(*net.TCPConn)
	if !ok {
		return 0, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0, nil
	}
	wrote := 0
	var werr error
	cerr := rc.Write(func(fd uintptr) bool {
		for wrote < len(b) {
			k, err := syscall.Write(int(fd), b[wrote:])
			if k > 0 {
				wrote += k
			}
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				if !errors.Is(err, syscall.EAGAIN) {
					werr = err
				}
				break
			}
		}
		return true // never wait here: the writer does
	})
	if werr == nil && !errors.Is(cerr, os.ErrDeadlineExceeded) {
		// An expired deadline is the writer's, from its last blocking
		// write (writeBlocking renews it only when it writes): nothing
		// went wrong here, so leave the bytes to the writer.
		werr = cerr
	}
	return wrote, werr
}
