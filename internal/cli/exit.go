package cli

// Exit codes of chainsync run (documented in the README and in --help).
const (
	ExitOK          = 0   // this node's part of every round is done
	ExitError       = 1   // could not start (e.g. the listen port is taken) or an internal error
	ExitUsage       = 2   // bad flags or arguments; nothing was started
	ExitTaskFailed  = 3   // this node's task failed: the chain halts here (no COMPLETE sent on)
	ExitFault       = 4   // a configured timeout fired (a neighbour or the chain did not come back)
	ExitCancelled   = 5   // the round was cancelled at the Head (chainsync cancel)
	ExitInterrupted = 130 // stopped by SIGINT or SIGTERM
)
