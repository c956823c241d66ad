//go:build unix

package worker

import (
	"io"
	"os"
	"sync"
	"syscall"
)

// stdin is standard input made non-blocking, once; kept for the life of
// the process (a collected *os.File would close descriptor 0).
var stdin = sync.OnceValue(func() *os.File {
	var st syscall.Stat_t
	if syscall.Fstat(0, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil
	}
	if syscall.SetNonblock(0, true) != nil {
		return nil
	}
	return os.NewFile(0, "/dev/stdin") // non-blocking: read through the poller
})

// pollable returns r, or, if r is this process's standard input and that
// is a pipe (as the node gives a worker), standard input made
// non-blocking, so that waiting for the next request parks a goroutine
// instead of holding a thread in read(2): the handler of the request just
// read then runs at once on that thread. A terminal or a file is left as
// it is (a shell shares its terminal; a non-blocking one would break it).
func pollable(r io.Reader) io.Reader {
	if r != os.Stdin {
		return r
	}
	if f := stdin(); f != nil {
		return f
	}
	return r
}
