package cli

import (
	"errors"

	"github.com/chainsync-go/chainsync"
)

// flagError restates a configuration error from chainsync.Config.Validate
// in terms of run's flags, as a usage error: the library decides what is
// valid, the command says which flag fixes it.
func flagError(err error) error {
	var ce *chainsync.ConfigError
	if !errors.As(err, &ce) {
		return usageError{err.Error()}
	}
	switch ce.Field {
	case "Listen":
		if ce.Value == "" {
			return usagef("--prev needs --listen, the address this node accepts its predecessor on")
		}
		return usagef("--listen %q: want HOST:PORT, e.g. 127.0.0.1:7001", ce.Value)
	case "Next":
		return usagef("--next %q: want HOST:PORT, e.g. 127.0.0.1:7001", ce.Value)
	case "Rounds":
		return usagef("--round %q: use 1-128 of A-Z a-z 0-9 - _ .", ce.Value)
	case "Heartbeat", "TaskTimeout":
		return usagef("--heartbeat and --task-timeout must not be negative")
	case "ConnectTimeout", "PhaseTimeout":
		return usagef("timeouts must not be negative")
	}
	return usageError{ce.Reason}
}
