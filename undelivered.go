package chainsync

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
)

// UndeliveredError is the error of a StatusUndelivered round: a fault
// (Cause) ended it after this node's COMPLETE went on to the successor,
// before the exit wave came back, so nothing is known of the nodes after
// Beyond: their tasks may have run. docs/FAULTS.md, "Undelivered rounds".
type UndeliveredError struct {
	Round string
	// Beyond is the node past which no word came: the node the fault
	// blames, when it is after this one, else this node's successor.
	Beyond string
	// After names the nodes after Beyond, where the chain is known
	// (Config.Chain); Last says Beyond is the chain's last node.
	After []string
	Last  bool
	Cause *FaultError // the fault that ended the round; nil if not known
}

// Error says what is known and what is not, in one line.
func (e *UndeliveredError) Error() string {
	return fmt.Sprintf("chainsync: round %s undelivered: %s", roundName(e.Round), e.Known())
}

// Unwrap returns the fault that ended the round.
func (e *UndeliveredError) Unwrap() error {
	if e.Cause == nil {
		return nil
	}
	return e.Cause
}

// Known is Error without its prefix: "no word from beyond B; the tasks
// after B may have run (ask C and D, or read their journals)", then the
// fault that ended the round.
func (e *UndeliveredError) Known() string {
	b := e.Beyond
	if b == "" {
		b = "the successor"
	}
	var s string
	switch {
	case e.Last:
		s = fmt.Sprintf("no word from %s, the last node; its task may have run (ask %s, or read its journal)", b, b)
	case len(e.After) > 0:
		s = fmt.Sprintf("no word from beyond %s; the tasks after %s may have run (ask %s, or read their journals)", b, b, andList(e.After))
	default:
		s = fmt.Sprintf("no word from beyond %s; the tasks after %s may have run (ask the nodes after %s, or read their journals)", b, b, b)
	}
	if c := e.Cause; c != nil {
		s += fmt.Sprintf("; the round ended by a %s fault: %s", c.Kind, c.Reason)
		if c.Peer != "" && c.Side != 0 {
			s += fmt.Sprintf(" (blames the %s %s)", c.Side, c.Peer)
		} else if c.Peer != "" {
			s += " (blames " + c.Peer + ")"
		}
	}
	return s
}

// andList joins names as "C", "C and D", "C, D and E".
func andList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// undelivered describes round id, which the machine ended NoExitWave;
// cause is the error the round would have ended with as a fault; cfg is
// the node's configuration, succ names its successor.
func undelivered(cfg *Config, succ, id string, cause error) *UndeliveredError {
	e := &UndeliveredError{Round: id, Beyond: succ}
	var fe *FaultError
	if errors.As(cause, &fe) {
		e.Cause = fe
	}
	self := slices.Index(cfg.Chain, cfg.Name)
	if fe != nil && fe.Peer != "" {
		switch k := slices.Index(cfg.Chain, fe.Peer); {
		case self >= 0 && k > self:
			e.Beyond = fe.Peer
		case self < 0 && fe.Side == protocol.Succ:
			e.Beyond = fe.Peer
		}
	}
	if k := slices.Index(cfg.Chain, e.Beyond); self >= 0 && k > self {
		e.After = slices.Clone(cfg.Chain[k+1:])
		e.Last = len(e.After) == 0
	}
	return e
}

// failedAfter reports whether err, the fault that ended a round this node
// had sent its COMPLETE on for, is a task failure further down the chain
// (a fault notice): then it is known that the round failed there and that
// no task after that node ran, so the round is a fault, not undelivered.
func failedAfter(err error) bool {
	var fe *FaultError
	return errors.As(err, &fe) && fe.Origin != "" && (fe.Cause == FaultTaskFailed || fe.Cause == FaultTaskTimeout)
}

// journalFault is the journal's record of round's fault of kind, err:
// with, for a fault another node found, that node and what it found, so
// that a node restarted on it (and chainsync journal) knows what failedAfter
// knew.
func journalFault(round string, kind FaultKind, err error) journal.Fault {
	f := journal.Fault{Round: round, Kind: string(kind)}
	var fe *FaultError
	if errors.As(err, &fe) && fe.Origin != "" && fe.Cause != "" && protocol.NoticeName(fe.Origin) == fe.Origin {
		f.Cause, f.Origin = string(fe.Cause), fe.Origin
	}
	return f
}

// undeliveredIn is the UndeliveredError in err's chain, nil if none.
func undeliveredIn(err error) *UndeliveredError {
	var ue *UndeliveredError
	if errors.As(err, &ue) {
		return ue
	}
	return nil
}
