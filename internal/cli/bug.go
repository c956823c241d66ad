package cli

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
)

// A panic is a bug in chainsync, never a verdict on the chain: the runtime
// would exit 2, which the command keeps for usage errors (nothing was
// started). So Main and the goroutines the command starts recover a panic,
// print that it is a bug, with the stack, and exit 1.

// bugOut is where a recovered panic is reported: Main's stderr.
var (
	bugMu  sync.Mutex
	bugOut io.Writer = os.Stderr
)

func setBugOut(w io.Writer) {
	bugMu.Lock()
	bugOut = w
	bugMu.Unlock()
}

// reportBug writes a recovered panic r to bugOut.
func reportBug(r any) {
	bugMu.Lock()
	defer bugMu.Unlock()
	fmt.Fprintf(bugOut, "chainsync: internal error: %v\nThis is a bug in chainsync, not in the chain or its configuration; please report it with this message.\n%s", r, debug.Stack())
}

// goSafe runs f on a goroutine of its own; a panic in it is reported as
// a bug and the process exits 1 (ExitError), not 2.
func goSafe(f func()) {
	go func() {
		defer func() {
			if r := recover(); r != nil {
				reportBug(r)
				os.Exit(ExitError)
			}
		}()
		f()
	}()
}
