package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync/internal/bug"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/sdnotify"
)

// systemd Type=notify: run sends READY=1 once the node has started:
// chainsync.Start returned, so its listen port is bound (a predecessor can
// connect) and it has begun dialing its successor, and the status endpoint
// is up. That is before any link is up, and on purpose: "active" means
// "started", not "connected". Waiting for the links would hold
// `systemctl start` of each node until its neighbours' units start too,
// and fail it after TimeoutStartSec when the nodes of a chain are started
// one machine at a time. What the links and rounds are doing is in STATUS=
// (e.g. "... (links: predecessor down, successor up)"), sent whenever it
// changes, and STOPPING=1 carries the outcome at the end. A node that
// cannot start exits before READY=1. Outside systemd ($NOTIFY_SOCKET
// unset) all of this is a no-op.

// notifyPoll is how often the status is recomputed from Node.Snapshot.
const notifyPoll = time.Second

// sdStatus reports one node's state to systemd.
type sdStatus struct {
	n      *sdnotify.Notifier
	node   *chainsync.Node
	rounds []string
	cancel context.CancelFunc
	wg     sync.WaitGroup
	poke   chan struct{}

	mu   sync.Mutex
	done map[string]string // finished rounds: their outcome
}

// openNotify connects to $NOTIFY_SOCKET, if set, and takes it out of the
// environment, before any task can start and inherit it. A socket it
// cannot use is logged, not fatal: the node runs without reporting.
func openNotify(log *slog.Logger) *sdnotify.Notifier {
	n, err := sdnotify.FromEnv()
	if err != nil {
		log.Warn("cannot report to systemd; running without Type=notify reports", "err", err.Error())
	}
	return n
}

// startNotify sends READY=1 for a started node and keeps STATUS= current.
// It returns nil (whose stop does nothing) without a notifier.
func startNotify(n *sdnotify.Notifier, node *chainsync.Node, rounds []string, log *slog.Logger) *sdStatus {
	if n == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &sdStatus{n: n, node: node, rounds: rounds, cancel: cancel, poke: make(chan struct{}, 1), done: map[string]string{}}
	last := s.line()
	if err := n.Ready(last); err != nil {
		log.Warn("cannot report to systemd", "err", err.Error())
	}
	for _, r := range rounds {
		s.wg.Add(1)
		bug.Go(func() {
			defer s.wg.Done()
			if res, err := node.Wait(ctx, r); err == nil || res.Status != 0 {
				s.finished(res)
			}
		})
	}
	s.wg.Add(1)
	bug.Go(func() {
		defer s.wg.Done()
		t := time.NewTicker(notifyPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-s.poke:
			}
			if l := s.line(); l != last {
				last = l
				_ = n.Status(l)
			}
		}
	})
	return s
}

// finished records a round's outcome.
func (s *sdStatus) finished(res chainsync.Result) {
	out := res.Status.String()
	if res.Err != nil && res.Status != chainsync.StatusStopped {
		out += ": " + res.Err.Error()
	}
	s.mu.Lock()
	s.done[res.Round] = out
	s.mu.Unlock()
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// stop sends STOPPING=1 with the final status and closes the socket.
func (s *sdStatus) stop() {
	if s == nil {
		return
	}
	// Rounds that ended just now: their results are kept, Wait returns
	// at once.
	for _, r := range s.rounds {
		s.mu.Lock()
		_, ok := s.done[r]
		s.mu.Unlock()
		if !ok {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			if res, _ := s.node.Wait(ctx, r); res.Status != 0 {
				s.finished(res)
			}
			cancel()
		}
	}
	s.cancel()
	s.wg.Wait()
	_ = s.n.Stopping(s.line())
	s.n.Close()
}

// line is the status: each round's outcome or what it waits for, and the
// links.
func (s *sdStatus) line() string {
	snap := s.node.Snapshot()
	doing := map[string]string{}
	for _, r := range snap.Rounds {
		doing[r.Round] = r.Doing()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	finished := 0
	for _, r := range s.rounds {
		st, ok := s.done[r]
		if ok {
			finished++
		} else if st, ok = doing[r]; !ok {
			st = "starting"
		}
		if len(s.rounds) == 1 && r == "" {
			parts = append(parts, st)
		} else {
			parts = append(parts, "round "+roundLabel(r)+": "+st)
		}
	}
	if len(parts) > 3 { // many rounds: a count and the first unfinished one
		first := ""
		for i, r := range s.rounds {
			if _, ok := s.done[r]; !ok {
				first = "; " + parts[i]
				break
			}
		}
		parts = []string{fmt.Sprintf("%d of %d rounds finished%s", finished, len(s.rounds), first)}
	}
	var links []string
	if role := s.node.Role(); role.HasPred() {
		links = append(links, "predecessor "+upDown(snap.PredUp))
	}
	if s.node.Role().HasSucc() {
		links = append(links, "successor "+upDown(snap.SuccUp))
	}
	line := strings.Join(parts, "; ")
	if len(links) > 0 && finished < len(s.rounds) {
		line += " (links: " + strings.Join(links, ", ") + ")"
	}
	return line
}

func roundLabel(r string) string {
	if r == "" {
		return "(unnamed)"
	}
	return r
}
