package chainsync

import (
	"time"

	"github.com/chainsync-go/chainsync/protocol"
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
}

// Rounds returns the rounds this node learns from its predecessor's READY
// (Config.Follow), in the order it learned them, which is the order the
// Head opened them; after a restart with Config.StateDir, first the
// resumed rounds it was not yet locally ready for. The application
// answers each with Ready once it is ready for it. The channel is closed
// by Close; without Follow it delivers nothing.
func (n *Node) Rounds() <-chan string { return n.roundsCh }

// opening reports whether msg, from side, would open a round this node
// has not heard of. Caller holds mu.
func (n *Node) opening(side protocol.Side, msg protocol.Message) bool {
	if side != protocol.Pred || msg.Cmd != protocol.Ready {
		return false
	}
	_, known := n.m.State(msg.Round)
	return !known
}

// opened notes a round this node just heard of: by its predecessor's
// READY (upstream), or by Ready. Caller holds mu.
func (n *Node) opened(id string, upstream bool) {
	if _, known := n.m.State(id); !known {
		return // the READY was refused
	}
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

// announceRound queues id for Rounds. Caller holds mu.
func (n *Node) announceRound(id string) {
	n.roundsQ = append(n.roundsQ, id)
	select {
	case n.roundsSig <- struct{}{}:
	default:
	}
}

// handOutRounds hands the queued rounds to the application, in order, until
// the node closes; then it closes the Rounds channel.
func (n *Node) handOutRounds() {
	defer n.wg.Done()
	defer close(n.roundsCh)
	var batch []string
	for {
		n.lock()
		batch, n.roundsQ = n.roundsQ, batch[:0]
		n.unlock()
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
