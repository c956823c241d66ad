package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync/internal/status"
)

// Every is how often the Poller reads the nodes: each node's status
// endpoint is asked at most once in this time, however many pages are
// open.
const Every = time.Second

// Grace is how long a poll waits for the nodes' answers before it makes
// its view: a node slower than that (hung, or far away) keeps its last
// answer in this view, and its new one goes into the next.
const Grace = Every / 4

// Fetcher reads one node's status document from its address, within
// ctx's life.
type Fetcher func(ctx context.Context, addr string) (*status.Doc, error)

// Poller reads the nodes once a second and keeps the View of the last
// poll, for every page at once.
type Poller struct {
	addrs   []string
	fetch   Fetcher
	timeout time.Duration
	tr      *tracker
	ask     func(context.Context) (string, error) // AskControl

	mu      sync.Mutex
	view    []byte           // the JSON of the last View; nil before the first poll
	panel   *SteerPanel      // what the steered node takes, from the last poll
	ladders map[string][]Msg // the ladders of the last view's grid rows
	changed chan struct{}    // closed, and replaced, when view changes
}

// NewPoller returns a Poller reading the nodes at addrs (in chain order)
// with fetch, giving each node timeout to answer. control names the node
// the dashboard steers (its name or its status address; "" for a
// read-only dashboard) and user who steers it.
func NewPoller(addrs []string, fetch Fetcher, timeout time.Duration, control, user string) *Poller {
	return &Poller{addrs: addrs, fetch: fetch, timeout: timeout, tr: newTracker(control, user), changed: make(chan struct{})}
}

// answer is one node's answer to one request.
type answer struct {
	i   int
	doc *status.Doc
	err error
}

// Run polls until ctx is done: at once, then every Every. Each node has
// at most one request out at a time, so it is never asked more than once
// a second; a node that is slow to answer (hung, or its network) does not
// hold up the view of the others: a poll waits for the answers until just
// before the next one, and a node still asked keeps its last answer until
// its request fails.
func (p *Poller) Run(ctx context.Context) {
	n := len(p.addrs)
	last := make([]status.Node, n)
	for i, a := range p.addrs {
		last[i] = status.Node{Addr: a, Err: errors.New("not asked yet")}
	}
	busy := make([]bool, n)
	answers := make(chan answer, n)
	named := make(chan string, 1) // AskControl's answer ("": none yet)
	asking := false
	for {
		start := time.Now()
		select {
		case name := <-named:
			asking = false
			if name != "" {
				p.tr.control = name
			}
		default:
		}
		if p.ask != nil && p.tr.control == "" && !asking {
			asking = true
			go func() {
				actx, cancel := context.WithTimeout(ctx, p.timeout)
				defer cancel()
				name, err := p.ask(actx)
				if err != nil {
					name = ""
				}
				named <- name
			}()
		}
		for i := range n {
			if busy[i] {
				continue
			}
			busy[i] = true
			go func() {
				actx, cancel := context.WithTimeout(ctx, p.timeout)
				defer cancel()
				d, err := p.fetch(actx, p.addrs[i])
				answers <- answer{i, d, err}
			}()
		}
		deadline := time.NewTimer(time.Until(start.Add(Grace)))
		for slices.Contains(busy, true) {
			select {
			case a := <-answers:
				busy[a.i] = false
				last[a.i] = status.Node{Addr: p.addrs[a.i], Doc: a.doc, Err: a.err}
				continue
			case <-deadline.C:
			case <-ctx.Done():
				deadline.Stop()
				return
			}
			break
		}
		deadline.Stop()
		p.take(slices.Clone(last), start)
		next := time.NewTimer(time.Until(start.Add(Every)))
		select {
		case <-ctx.Done():
			next.Stop()
			return
		case <-next.C:
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
	p.panel, p.ladders = v.Steer, p.tr.ladders
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

// AskControl has the Poller learn the name of the node it steers from
// ask (what the node's control socket says), while it does not know it:
// for a dashboard given --control without --node. Call it before Run.
func (p *Poller) AskControl(ask func(context.Context) (string, error)) { p.ask = ask }

// Panel returns what the steered node takes, as of the last poll; nil
// for a read-only dashboard or before the first poll.
func (p *Poller) Panel() *SteerPanel {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.panel
}

// Ladder returns the ladder of round id's row in the last view; false if
// the row is not in it.
func (p *Poller) Ladder(id string) ([]Msg, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.ladders[id]
	return m, ok
}
