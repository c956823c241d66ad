package chainsync

import (
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"

	"github.com/chainsync-go/chainsync/protocol"
)

// stepper is the one caller of protocol.Machine.Step (docs/DESIGN.md,
// "The shape of the code"). It stamps each event with the node's time
// and queues the step's journal records in the turn's batch ahead of its
// actions, which the node then carries out (perform). Once the journal
// has failed it steps no more. The machine's facts reach the rest of the
// driver through actions, or read-only through view.
type stepper struct {
	m       *protocol.Machine
	acts    []protocol.Action // scratch: the last step's actions
	timing  bool              // events carry the time since epoch
	epoch   time.Time
	at      time.Duration // the time the last step's event carried (timing)
	durable bool          // the records are journalled (Config.StateDir)
	broken  error         // the journal failed: the node acts no more
	lp      *loop         // the turn whose batch the records join
}

// machineView is what the driver may read of the machine: no Step.
type machineView interface {
	State(id string) (protocol.State, bool)
	Gate(id string) protocol.Wait
	Steers() []protocol.Steer
	View() []protocol.RoundView
	TaskOK(id string) bool
	Undo(id string) (protocol.UndoPhase, protocol.Wave, bool)
	Graces() []protocol.GraceView
	Active() int
}

// step feeds ev to the machine, its records to recs, and returns the
// actions (valid until the next step). Loop only.
func (s *stepper) step(ev protocol.Event, recs *[]protocol.Record) ([]protocol.Action, error) {
	if s.broken != nil {
		return nil, s.broken
	}
	if s.timing && ev.At == 0 {
		ev.At = time.Since(s.epoch)
	}
	s.at = ev.At
	acts, err := s.m.Step(ev, s.acts[:0])
	s.acts = acts
	if err != nil {
		return nil, err
	}
	if s.durable {
		for _, a := range acts {
			if a.Kind == protocol.ActSave {
				*recs = append(*recs, *a.Record)
			}
		}
	}
	return acts, nil
}

// restore reinstates the journal's rounds in the machine (Start, before
// the loop runs).
func (s *stepper) restore(recs []protocol.Record) error {
	for _, rec := range recs {
		if err := s.m.Restore(rec); err != nil {
			return err
		}
	}
	return nil
}

// stepTime is when the last step was taken: the time its event carried
// (one clock reading a step, not one for each action that asks), or
// without timing the turn's (one reading a turn).
func (s *stepper) stepTime() time.Time {
	if s.at > 0 {
		return s.epoch.Add(s.at)
	}
	return s.lp.turnTime()
}

// now is the machine's time now.
func (s *stepper) now() time.Duration { return time.Since(s.epoch) }

// since converts a UnixNano time (0: none) to the machine's time.
func (s *stepper) since(unixNano int64) time.Duration {
	if unixNano == 0 {
		return 0
	}
	return max(time.Unix(0, unixNano).Sub(s.epoch), 1)
}

// saveSteerFile queues the steering file's content for the turn's
// write (store.go); the journal's error if it has failed. Loop only.
func (s *stepper) saveSteerFile(data []byte) error {
	if s.broken != nil {
		return s.broken
	}
	s.lp.cur.steer = data
	return nil
}

// journalFault queues a fault record, round ended by a fault of kind,
// for the turn's write, with a state directory that has not failed.
// Loop only.
func (s *stepper) journalFault(f journal.Fault) {
	if s.durable && s.broken == nil {
		s.lp.cur.faults = append(s.lp.cur.faults, f)
	}
}

// receipts returns the receipts the machine holds for round (receipts.go).
func (s *stepper) receipts(round string) []protocol.ReceiptNote { return s.m.Receipts(round) }

// receiptsToSign returns the ActSignReceipt of each restored round whose
// receipt is still to be signed (receipts.go).
func (s *stepper) receiptsToSign() []protocol.Action { return s.m.ReceiptsToSign(nil) }
