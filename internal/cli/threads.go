package cli

import (
	"os"
	"runtime"
)

// nodeThreads runs the Go code of a node's process (chainsync run, and
// the bench agents that stand for it) on one thread, as GOMAXPROCS=1
// does, unless GOMAXPROCS is set in the environment. A node's protocol
// work is one goroutine, its loop, fed by one reader per link: on one
// thread each hand-off from a reader to the loop is a switch between
// goroutines, where with more threads the runtime often wakes another
// thread for it, which costs more than the work itself. Measured on 2
// cores (docs/BENCHMARKS.md, "One loop per node"): 16 processes in a
// chain, one round at a time, 1.30x the relay floor on one thread against
// 1.73-1.85x on two; 4 processes, 64 rounds in flight, 18,000 rounds/s
// against 8,900-9,700. Tasks are processes of their own and hooks too,
// so they do not share the thread; a blocking system call (an fsync)
// hands the thread's work to another one meanwhile.
func nodeThreads() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
