package chainsync

import (
	"sync"
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
func (n *Node) Rounds() <-chan string { return n.feed.ch }

// opened notes a round this node just heard of (ActOpened): by its
// predecessor's READY (upstream), or by Ready. Loop only.
func (b *roundBook) opened(id string, upstream bool) {
	if b.follow {
		b.get(id) // when it was opened, for Snapshot
	}
	b.lp.trace(TraceEvent{Kind: TraceRoundOpened, Round: id})
	if upstream && b.follow {
		if infoOn(b.log) {
			b.log.Info("round opened by the predecessor", "round", id)
		}
		b.feed.add(id)
	}
}

// roundFeed is the follow queue (Config.Follow): the rounds learned from
// the predecessor, queued by the loop and handed to the application, in
// order, by a goroutine of its own (run), so that the loop never waits
// for the application.
type roundFeed struct {
	ch  chan string   // Rounds
	sig chan struct{} // q grew
	mu  sync.Mutex    // guards q, shared by the loop and run
	q   []string
}

func newRoundFeed() *roundFeed {
	return &roundFeed{ch: make(chan string), sig: make(chan struct{}, 1)}
}

// add queues id for Rounds. Loop only.
func (f *roundFeed) add(id string) {
	f.mu.Lock()
	f.q = append(f.q, id)
	f.mu.Unlock()
	select {
	case f.sig <- struct{}{}:
	default:
	}
}

// run hands the queued rounds to the application, in order, until done;
// then it closes the channel.
func (f *roundFeed) run(done <-chan struct{}) {
	defer close(f.ch)
	var batch []string
	for {
		f.mu.Lock()
		batch, f.q = f.q, batch[:0]
		f.mu.Unlock()
		for _, id := range batch {
			select {
			case f.ch <- id:
			case <-done:
				return
			}
		}
		select {
		case <-f.sig:
		case <-done:
			return
		}
	}
}
