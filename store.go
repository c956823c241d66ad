package chainsync

import (
	"log/slog"
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
)

// store is a node's state directory (Config.StateDir): the journal of its
// rounds and the steering file. What the steps and requests of one turn
// changed is written at the end of the turn, in one place (save: the
// steering file if it changed, then the journal records, each with one
// fsync), before anything the turn did acts (docs/DESIGN.md, "Restarts
// and durable state"). A node without a state directory has none (nil).
type store struct {
	j *journal.Journal
}

// save writes what batch b holds for the disk. Loop only.
func (s *store) save(b *batch) error {
	if b.steer != nil {
		if err := s.j.SaveSteer(b.steer); err != nil {
			return err
		}
	}
	if len(b.faults) > 0 || len(b.recs) > 0 {
		return s.j.SaveAll(b.faults, b.recs)
	}
	return nil
}

// loadSteer returns the steering file's content, nil if there is none.
func (s *store) loadSteer() ([]byte, error) { return s.j.LoadSteer() }

// taskRestarted records that the task of round starts again after a
// restart (--resume-task rerun), before it runs, so that the journal shows
// two runs, the first cut short, not one across the restart.
func (s *store) taskRestarted(round string) error { return s.j.SaveTaskStart(round) }

// syncs is how many fsyncs the journal made since Start.
func (s *store) syncs() uint64 { return s.j.Syncs() }

// close writes the end record, if end (every round over in a process that
// ends normally), and closes the journal; the loop has ended.
func (s *store) close(end bool, log *slog.Logger) {
	if end {
		if err := s.j.SaveEnd(time.Now().Unix()); err != nil {
			log.Warn("cannot record the node's end in the state journal; a rerun on it would resume instead of refusing", "err", err.Error())
		}
	}
	s.j.Close()
}
