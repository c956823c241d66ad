package dashboard

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync/internal/status"
)

// Every is how often the Poller reads the nodes: each node's status
// endpoint is asked at most once in this time, however many pages are
// open.
const Every = time.Second

// Fetcher reads every node's status document, in chain order (a node that
// does not answer has Err set). It returns within its context's life.
type Fetcher func(ctx context.Context) []status.Node

// Poller reads the nodes once a second and keeps the View of the last
// poll, for every page at once.
type Poller struct {
	fetch Fetcher
	tr    *tracker

	mu      sync.Mutex
	view    []byte        // the JSON of the last View; nil before the first poll
	panel   *SteerPanel   // what the steered node takes, from the last poll
	changed chan struct{} // closed, and replaced, when view changes
}

// NewPoller returns a Poller reading the nodes with fetch. control names
// the node the dashboard steers (its name or its status address; "" for a
// read-only dashboard) and user who steers it.
func NewPoller(fetch Fetcher, control, user string) *Poller {
	return &Poller{fetch: fetch, tr: newTracker(control, user), changed: make(chan struct{})}
}

// Run polls until ctx is done: at once, then every Every. A poll that
// takes longer than Every (a node that does not answer in time) delays
// the next one: a node is never asked twice at once.
func (p *Poller) Run(ctx context.Context) {
	for {
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, 5*Every)
		nodes := p.fetch(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		p.take(nodes, start)
		t := time.NewTimer(time.Until(start.Add(Every)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// take makes the View of one poll and tells the pages if it changed.
func (p *Poller) take(nodes []status.Node, at time.Time) {
	v := p.tr.update(nodes, at)
	b, err := json.Marshal(v)
	if err != nil {
		return // a View is always encodable; nothing to show otherwise
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.panel = v.Steer
	if string(b) == string(p.view) {
		return
	}
	p.view = b
	close(p.changed)
	p.changed = make(chan struct{})
}

// Latest returns the JSON of the last View (nil before the first poll)
// and a channel closed when a newer one is in.
func (p *Poller) Latest() ([]byte, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.view, p.changed
}

// Panel returns what the steered node takes, as of the last poll; nil
// for a read-only dashboard or before the first poll.
func (p *Poller) Panel() *SteerPanel {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.panel
}
