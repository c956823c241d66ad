// Package bug is the chainsync command's panic handler: a panic is a bug
// in chainsync, never a verdict on the chain. The runtime would exit 2,
// which the command keeps for usage errors (nothing was started); so the
// command's entry point and every goroutine it starts (Go) recover a
// panic, print that it is a bug, with the stack, and exit 1.
package bug

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
)

// ExitStatus is the status a process exits with after a panic: the
// command's "error", never 2 (usage).
const ExitStatus = 1

var (
	mu  sync.Mutex
	out io.Writer = os.Stderr // where a recovered panic is reported
)

// SetOutput makes w the writer Report writes to (the command's stderr).
func SetOutput(w io.Writer) {
	mu.Lock()
	out = w
	mu.Unlock()
}

// Report writes the recovered panic r, with the stack, as a bug.
func Report(r any) {
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(out, "chainsync: internal error: %v\nThis is a bug in chainsync, not in the chain or its configuration; please report it with this message.\n%s", r, debug.Stack())
}

// Go runs f on a goroutine of its own; a panic in it is reported as a
// bug and the process exits ExitStatus.
func Go(f func()) {
	go func() {
		defer func() {
			if r := recover(); r != nil {
				Report(r)
				os.Exit(ExitStatus)
			}
		}()
		f()
	}()
}
