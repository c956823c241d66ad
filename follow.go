package chainsync

import (
	"time"
)

// keepHistory is how many finished rounds Snapshot lists.
const keepHistory = 32

// RoundResult is one finished round in a Snapshot: how it ended here, and
// when this node first heard of it and when it ended.
type RoundResult struct {
	Round         string
	Status        Status
	Opened, Ended time.Time
	Err           string // why, for every status but StatusDone
	Undo          string // how its undo wave ended (Result.Undo), if it had one
}

// Rounds returns the rounds this node learns from its predecessor's READY
// (Config.Follow), in the order it learned them, which is the order the
// Head opened them; after a restart with Config.StateDir, first the
// resumed rounds it was not yet locally ready for. The application
// answers each with Ready once it is ready for it. The channel is closed
// by Close; without Follow it delivers nothing.
func (n *Node) Rounds() <-chan string { return n.roundsCh }

// opened notes a round this node just heard of (ActOpened): by its
// predecessor's READY (upstream), or by Ready. Loop only.
func (n *Node) opened(id string, upstream bool) {
	if n.cfg.Follow {
		n.round(id) // when it was opened, for Snapshot
	}
	n.trace(TraceEvent{Kind: TraceRoundOpened, Round: id})
	if upstream && n.cfg.Follow {
		if n.infoOn() {
			n.log.Info("round opened by the predecessor", "round", id)
		}
		n.announceRound(id)
	}
}

// announceRound queues id for Rounds. Loop only.
func (n *Node) announceRound(id string) {
	n.rmu.Lock()
	n.roundsQ = append(n.roundsQ, id)
	n.rmu.Unlock()
	select {
	case n.roundsSig <- struct{}{}:
	default:
	}
}

// handOutRounds hands the queued rounds to the application, in order, until
// the node closes; then it closes the Rounds channel.
func (n *Node) handOutRounds() {
	defer close(n.roundsCh)
	var batch []string
	for {
		n.rmu.Lock()
		batch, n.roundsQ = n.roundsQ, batch[:0]
		n.rmu.Unlock()
		for _, id := range batch {
			select {
			case n.roundsCh <- id:
			case <-n.ctx.Done():
				return
			}
		}
		select {
		case <-n.roundsSig:
		case <-n.ctx.Done():
			return
		}
	}
}
