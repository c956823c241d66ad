package chainsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/transport"
	"github.com/chainsync-go/chainsync/wire"
)

// Identity on the link (docs/PROTOCOL.md, "The identity line"). A node
// placed by a whole chain (Config.Chain and ChainAddrs) with the extension lines on sends
// HELLO first on each link: its name, its place, and digests of its chain
// and its round settings. The neighbour compares them with its own and
// refuses a link to a node that is not the one its chain names there, or
// whose chain or round settings differ: a config-mismatch fault that says
// which ("C's --chain is A,C,B; this node's is A,B,C"), instead of a
// chain that runs wired wrongly. The line catches mistakes only: it
// authenticates nothing (TLS and pre-shared keys do).

// identity is what this node says of itself in HELLO, computed once.
type identity struct {
	pos    int           // this node's index in Config.Chain
	line   []byte        // its HELLO line, with LF
	chain  string        // the digest of Config.Chain
	rounds string        // the digest of Config.RoundSettings
	hb     time.Duration // Config.Heartbeat as the line says it (wire.HelloHeartbeat)
	names  []string
	// settings says what rounds this node runs, for a mismatch.
	settings string
}

// chainDigest is the digest of a chain: its names and addresses, in order.
func chainDigest(names, addrs []string) string {
	var b strings.Builder
	for i, name := range names {
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(addrs[i])
		b.WriteByte('\n')
	}
	return wire.Digest(b.String())
}

// newIdentity returns the node's identity, nil if it sends none: without
// Config.Chain or without the extension lines (the draft's wire is
// unchanged).
func newIdentity(cfg *Config) *identity {
	if len(cfg.Chain) == 0 || len(cfg.ChainAddrs) != len(cfg.Chain) || !extensionsOn(cfg) {
		return nil
	}
	pos := slices.Index(cfg.Chain, cfg.Name)
	if pos < 0 {
		return nil // Validate refuses it
	}
	id := &identity{pos: pos, chain: chainDigest(cfg.Chain, cfg.ChainAddrs), rounds: wire.Digest(cfg.RoundSettings), hb: wire.HelloHeartbeat(cfg.Heartbeat)}
	for _, name := range cfg.Chain {
		id.names = append(id.names, protocol.NoticeName(name))
	}
	h := wire.Hello{Name: id.names[pos], Pos: pos + 1, Size: len(cfg.Chain), Chain: id.chain, Rounds: id.rounds, Names: id.names, Heartbeat: id.hb}
	if len(cfg.Chain) > wire.MaxChainSize {
		return nil
	}
	id.line = wire.AppendHello(nil, h)
	id.settings = "this node runs " + runsText(cfg.Rounds)
	if cfg.RoundSettings != "" {
		id.settings = "this node runs " + cfg.RoundSettings
	}
	return id
}

// sendHello queues this node's identity line on l, first. Loop only.
func (lk *links) sendHello(l *link) {
	id := lk.id
	if id == nil || l.helloSent {
		return
	}
	l.helloSent = true
	lk.lp.cur.line(l, id.line, false, "")
}

// errMismatch closes a link whose identity line showed a neighbour
// configured differently (the fault says how).
var errMismatch = errors.New("chainsync: configuration mismatch (identity line)")

// helloArrived acts on the identity line h from l; first says it was the
// first line on l. A predecessor connection that passes is answered with
// this node's own line and is then admitted as the predecessor (or held,
// if the current one is alive: duplicate.go); true if it is now the
// predecessor link: the loop then steps it up. Loop only.
func (lk *links) helloArrived(l *link, h wire.Hello, first bool) (predUp bool) {
	if lk.lp.closed || l != lk.pred && l != lk.succ && !lk.adm.pending[l] {
		return false
	}
	if !first {
		lk.violation(l, fmt.Errorf("chainsync: an identity line (HELLO) after the first line: %s %d/%d", h.Name, h.Pos, h.Size))
		return false
	}
	id := lk.id
	if id == nil {
		// Nothing to compare it with: the line only says the peer is
		// alive, which may claim a live predecessor's place.
		if l.side == protocol.Pred && l != lk.pred {
			lk.dup.aliveFirst(l)
		}
		return false
	}
	if reason := id.compare(l.side, h); reason != "" {
		if l.side == protocol.Pred {
			// This node's own line goes first, so that the predecessor
			// can say what differs too (its notice follows).
			lk.sendHello(l)
		}
		lk.helloMismatch(l, h.Name, reason)
		lk.lp.trace(TraceEvent{Kind: TraceViolation, Side: l.side, Peer: l.peer, Err: errors.New(reason)})
		lk.drop(l, errMismatch)
		return false
	}
	l.helloHeard = true
	if l.side != protocol.Pred || l == lk.pred {
		return false
	}
	lk.sendHello(l)
	return lk.dup.admitPred(l)
}

// compare says how the neighbour on side that sent h differs from the
// one this node's chain names there, or "" if it is that one. Loop only.
func (id *identity) compare(side protocol.Side, h wire.Hello) string {
	want := id.pos - 1
	what := "predecessor"
	if side == protocol.Succ {
		want, what = id.pos+1, "successor"
	}
	if want < 0 || want >= len(id.names) {
		return fmt.Sprintf("%s connected as this node's %s, but this node has none in its --chain (%s)", h.Name, what, strings.Join(id.names, ","))
	}
	exp := id.names[want]
	switch {
	case h.Chain != id.chain:
		return id.chainDiff(h)
	case h.Name != exp || h.Pos != want+1 || h.Size != len(id.names):
		return fmt.Sprintf("this node's %s is %s (node %d of %d in --chain), but %s answered there, saying it is node %d of %d: check that node's --name, and the addresses it dials and listens on",
			what, exp, want+1, len(id.names), h.Name, h.Pos, h.Size)
	case h.Heartbeat != 0 && h.Heartbeat != id.hb:
		return fmt.Sprintf("%s's --heartbeat is %s; this node's is %s: %s", h.Name, heartbeatText(h.Heartbeat), heartbeatText(id.hb), SameHeartbeat)
	case h.Rounds != id.rounds:
		return fmt.Sprintf("%s's round settings differ from this node's (%s): give every node the same --round or --rounds, and --serve, --undo and --receipts on every node or none",
			h.Name, id.settings)
	}
	return ""
}

// SameHeartbeat is the advice given with a --heartbeat that differs
// between neighbours, by a node and by chainsync check alike.
const SameHeartbeat = "give every node the same --heartbeat (a node calls its neighbour silent after three of its own intervals)"

// heartbeatText says a heartbeat interval as an identity line gives it.
func heartbeatText(d time.Duration) string {
	if d == wire.HeartbeatOff {
		return "off"
	}
	return d.String()
}

// chainDiff says how h's chain differs from this node's. Loop only.
func (id *identity) chainDiff(h wire.Hello) string {
	mine := strings.Join(id.names, ",")
	switch {
	case h.Names != nil && !slices.Equal(h.Names, id.names):
		return fmt.Sprintf("%s's --chain is %s; this node's is %s", h.Name, strings.Join(h.Names, ","), mine)
	case h.Names != nil:
		return fmt.Sprintf("%s's --chain has the same names in the same order as this node's (%s), with other addresses: give every node the same --chain", h.Name, mine)
	}
	here := "is not in it"
	if i := slices.Index(id.names, h.Name); i >= 0 {
		here = fmt.Sprintf("is node %d of %d", i+1, len(id.names))
	}
	return fmt.Sprintf("%s's --chain differs from this node's: there %s is node %d of %d; in this node's (%d nodes) it %s: give every node the same --chain",
		h.Name, h.Name, h.Pos, h.Size, len(id.names), here)
}

// dialFunc is how this node reaches its successor: Config.Dial, or TCP
// from Config.DialFrom if set and bindable, else from the address the
// system picks (nil).
func (cn *connector) dialFunc() func(ctx context.Context, addr string) (net.Conn, error) {
	if cn.cfg.Dial != nil || cn.cfg.DialFrom == "" {
		return cn.cfg.Dial
	}
	return transport.DialFrom(cn.cfg.DialFrom, func(err error) {
		level := slog.LevelInfo
		if !extensionsOn(&cn.cfg) && cn.cfg.Secure == nil {
			level = slog.LevelWarn // the successor checks this node's host
		}
		cn.log.Log(context.Background(), level, "cannot dial the successor from this node's own address; dialing from the address the system picks (a successor that checks its predecessor's host, on plain TCP without --heartbeat, refuses a connection from another)",
			"from", cn.cfg.DialFrom, "err", err.Error())
	})
}

// helloMismatch reports, once per side, that the node that sent its
// identity line on l (who) is not the neighbour this node's chain names
// there, or is configured differently: a config-mismatch fault blaming
// who, the node that really answered; a notice tells it where l is still
// pending (the only way to reach it); under FaultHalt every unfinished
// round ends. The caller closes l. Loop only.
func (lk *links) helloMismatch(l *link, who, reason string) {
	key := mismatchKey{l.side, "chain", ""}
	if !lk.faults.firstMismatch(key) {
		return
	}
	fe := &FaultError{Kind: FaultConfigMismatch, Side: l.side, Peer: who,
		Reason: reason + "; compare the nodes' flags (chainsync check compares them)"}
	f := fe.fault()
	lk.faults.record(f)
	if l != lk.pred && l != lk.succ {
		note := lk.faults.noticeOf(f)
		lk.wbuf = wire.Append(lk.wbuf[:0], protocol.Message{Cmd: protocol.FaultNotice, Note: &note}, false)
		lk.lp.lastWords(l, lk.wbuf)
	}
	lk.faults.announceLater(f, true, fe)
}

// mismatchedOn reports whether a config-mismatch with the neighbour on
// side was reported already: that neighbour refuses this node's lines
// for it, which says nothing new. Loop only.
func (fb *faultBook) mismatchedOn(side protocol.Side) bool {
	for k := range fb.mismatched {
		if k.side == side {
			return true
		}
	}
	return false
}

// extensionsRefused: with heartbeats or receipts, a successor that closed
// the connection right after this node's first line (its identity line,
// or a protocol line) without a word runs without the extension lines,
// so without them: a config-mismatch, which under FaultHalt ends this
// node's rounds rather than re-dialing a successor that will refuse every
// connection alike. It reports whether it did. Loop only.
func (lk *links) extensionsRefused(l *link) bool {
	if lk.cfg.Heartbeat <= 0 && !lk.cfg.Receipts {
		return false
	}
	who := lk.peerName(l.side)
	why := fmt.Sprintf("so without --heartbeat; this node's --heartbeat is %v: set the same --heartbeat on every node of the chain, or on none", lk.cfg.Heartbeat)
	if lk.cfg.Heartbeat <= 0 {
		why = "so without --receipts; this node runs with --receipts: set --receipts on every node of the chain, or on none"
	}
	fe := &FaultError{Kind: FaultConfigMismatch, Side: l.side, Peer: who,
		Reason: fmt.Sprintf("%s closed the connection right after this node's first line (%s) without a word: it runs without the extension lines, %s; compare both nodes' flags (chainsync check compares them)",
			who, l.firstLine, why)}
	f := fe.fault()
	lk.faults.record(f)
	lk.faults.announceLater(f, true, fe)
	return true
}

// identityUnsaid: with the extension lines and an identity line, a
// predecessor connection whose first line is msg, not its identity line
// (HELLO), comes from a node without the extension lines (a node with
// them always says who it is first): so without --heartbeat (when msg is
// one of the draft's lines) or without --receipts. That is a
// config-mismatch before any task runs, not a link that flaps for ever
// or a round whose receipts cannot be chained. While a predecessor is up
// the connection is a stranger's, and its line only bad input. It
// reports whether it refused l. Loop only.
func (lk *links) identityUnsaid(l *link, msg protocol.Message) bool {
	if lk.id == nil || l.side != protocol.Pred || l.helloHeard || lk.pred != nil {
		return false
	}
	var why string
	switch {
	case lk.cfg.Receipts:
		why = "so without --receipts; this node runs with --receipts: set --receipts on every node of the chain, or on none"
	case msg.Cmd == protocol.Ready || msg.Cmd == protocol.Start || msg.Cmd == protocol.Complete:
		why = fmt.Sprintf("so without --heartbeat; this node's --heartbeat is %v: set the same --heartbeat on every node of the chain, or on none", lk.cfg.Heartbeat)
	default:
		return false // an extension line: the peer has them
	}
	lk.mismatch(l, "extension", "", fmt.Sprintf("%s sends %s as its first line, not its identity line (HELLO): it runs without the extension lines, %s",
		lk.peerName(l.side), msg.Cmd, why))
	lk.drop(l, errMismatch)
	return true
}

// stray logs at ERROR, once per node, a predecessor connection refused
// because it came from the address the chain gives another node: on the
// draft's wire that is how a mis-ordered --chain shows. Loop only.
func (lk *links) stray(err error) {
	var se *strayError
	if !errors.As(err, &se) || lk.dup.strays[se.node] {
		return
	}
	if lk.dup.strays == nil {
		lk.dup.strays = make(map[string]bool)
	}
	lk.dup.strays[se.node] = true
	lk.log.Error(se.Error(), "peer", se.from)
}
