package cli

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/status"
)

// Liveness flags (docs/FAULTS.md, "Liveness: which settings for which
// scenario"): --restart-grace, for a node whose task restarts it (the
// switch stack), and --on-recover, the page that a fault is over. A
// served chain finds a dead node in bounded time: --serve implies
// --connect-timeout 30s as it implies --heartbeat 2s.

// servedConnectTimeout is --connect-timeout for a served node that does
// not set it: a neighbour whose link stays down this long, outside any
// restart grace, is reported by both its neighbours.
const servedConnectTimeout = 30 * time.Second

// liveOpts are the liveness flags of chainsync run.
type liveOpts struct {
	restartGrace time.Duration
	onRecover    string
	connectGiven bool // --connect-timeout was set (noteGiven)
}

func (l *liveOpts) flags(fs *flag.FlagSet) {
	fs.DurationVar(&l.restartGrace, "restart-grace", 0, "this node's task may restart the node (a switch that reboots): just before each task it tells the chain it may be gone for up to `D`, and no node reports it (silence, down link, phase timeout) until it is back or D has passed; then every node reports peer-unreachable blaming it. Needs --heartbeat on every node; use with --state-dir and --resume-task done (0: none)")
	fs.StringVar(&l.onRecover, "on-recover", "", "under --fault-policy wait, run `CMD` with sh -c once when a node blamed for a fault (silent or unreachable) is heard from again (env: CHAINSYNC_FAULT, the kind that cleared, CHAINSYNC_PEER, CHAINSYNC_ROUND, CHAINSYNC_NODE)")
}

// noteGiven records whether --connect-timeout was given.
func (l *liveOpts) noteGiven(f *flag.Flag) {
	if f.Name == "connect-timeout" {
		l.connectGiven = true
	}
}

// config checks the liveness flags and puts them in cfg: --restart-grace
// needs --heartbeat; a served node gets --connect-timeout 30s unless it
// set one.
func (o *runOpts) liveConfig(cfg *chainsync.Config) error {
	l := &o.live
	switch {
	case l.restartGrace < 0:
		return usagef("--restart-grace must not be negative")
	case l.restartGrace > 0 && o.heartbeat <= 0:
		return usagef("--restart-grace needs --heartbeat: the grace is announced on the extension lines, which heartbeats turn on (add --heartbeat 1s here and on every other node of the chain)")
	case l.restartGrace > 7*24*time.Hour:
		return usagef("--restart-grace %v is too long: at most 168h (a week)", l.restartGrace)
	case l.onRecover != "" && o.faultPolicy != "wait":
		return usagef("--on-recover needs --fault-policy wait: under halt a fault ends the rounds, and nothing recovers")
	}
	cfg.RestartGrace = l.restartGrace
	if o.serving() && !l.connectGiven {
		// Without it a node that died without a word would leave its
		// neighbours, and the Head, waiting for ever.
		cfg.ConnectTimeout = servedConnectTimeout
		o.connectTimeout = servedConnectTimeout
	}
	return nil
}

// statusLinks is the link part of the periodic status line: up, down, or
// silent (up, but nothing heard for two heartbeat intervals).
func statusLinks(node *chainsync.Node, snap chainsync.Snapshot) []any {
	word := func(up, silent bool) string {
		switch {
		case silent:
			return "silent"
		case up:
			return "up"
		}
		return "down"
	}
	var links []any
	if node.Role().HasPred() {
		links = append(links, "pred_link", word(snap.PredUp, snap.PredSilent))
	}
	if node.Role().HasSucc() {
		links = append(links, "succ_link", word(snap.SuccUp, snap.SuccSilent))
	}
	return links
}

// reportGraces logs, with the periodic status, each restart grace in
// force: "B is restarting (grace 10m, 2m left)".
func reportGraces(snap chainsync.Snapshot, log *slog.Logger) []any {
	var args []any
	for _, g := range snap.Restarting {
		log.Info(g.String(), "node", g.Node, "round", g.Round)
		args = append(args, "restarting", g.String())
	}
	return args
}

// printRestarting lists the restart graces the nodes know of, each node's
// once (every node knows of every other's): "B is restarting (grace 10m,
// 2m left)", as the node that knows the least time left says it.
func printRestarting(w io.Writer, nodes []status.Node) {
	least := map[string]status.Restarting{}
	var order []string
	for _, n := range nodes {
		if n.Doc == nil {
			continue
		}
		for _, g := range n.Doc.Restarting {
			cur, ok := least[g.Node]
			if !ok {
				order = append(order, g.Node)
			}
			if !ok || g.Left < cur.Left {
				least[g.Node] = g
			}
		}
	}
	if len(order) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, node := range order {
		fmt.Fprintln(w, least[node].Text)
	}
}
