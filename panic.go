package chainsync

import (
	"runtime/debug"
	"sync/atomic"
)

// panicHandler is SetPanicHandler's handler, if any.
var panicHandler atomic.Pointer[func(v any, stack []byte)]

// SetPanicHandler makes h the handler of a panic in any of the library's
// own goroutines (readers, writers, the dialer, the acceptor, a node's
// loop, tasks' goroutines): h gets the panic's value and stack, on that
// goroutine, instead of the runtime crashing the process with exit status
// 2. A panic is a bug in this library; a command that keeps exit status 2
// for usage errors reports it and exits otherwise (chainsync exits 1).
// nil restores the runtime's behaviour. A panic in a Task, Verify or
// Trace callback is the application's and reaches h too when it happens
// on one of these goroutines.
func SetPanicHandler(h func(v any, stack []byte)) {
	if h == nil {
		panicHandler.Store(nil)
		return
	}
	panicHandler.Store(&h)
}

// goSafe runs f on a goroutine of its own, under the panic handler. It
// is the package's only go statement.
func goSafe(f func()) { go safely(f) }

// safely runs f under the panic handler: what goSafe starts, and the
// callbacks of time.AfterFunc (which run on goroutines of the runtime's).
func safely(f func()) {
	if h := panicHandler.Load(); h != nil {
		defer func() {
			if r := recover(); r != nil {
				(*h)(r, debug.Stack())
			}
		}()
	}
	f()
}
