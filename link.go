package chainsync

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chainsync-go/chainsync/internal/rawio"
	"github.com/chainsync-go/chainsync/protocol"
	"github.com/chainsync-go/chainsync/wire"
)

// maxOutbox bounds the bytes queued for one link. A neighbour that lets
// this much pile up is not reading: the link is closed (everything in it
// is re-sent on reconnect, docs/DESIGN.md "Roles and connections").
const maxOutbox = 1 << 20

// link is one connection to a neighbour: its reader, and an outbox with its
// own writer, so that the node's loop never waits on a socket.
//
// The node's loop queues lines with enqueue once the turn's journal
// records are synced, and after the turn (off the loop's token) flush
// tries to write the queue at once without blocking, in one system call
// for everything queued (a TLS link: in one crypto/tls write, and only if
// the socket under it has room for all of it, so that the write does not
// wait; writenow.go);
// whatever the socket does not take at once goes to the link's writer
// goroutine, which waits up to WriteTimeout for the peer to read. A peer
// that stops reading therefore stalls nothing but its own link. wmu
// guards the outbox, shared by the loop and the writer; a connection is
// closed on a goroutine of its own (a TLS close writes), never on the
// loop.
type link struct {
	c    net.Conn
	side protocol.Side
	peer string
	r    *wire.Reader
	// The node, as far as a link reaches it: its loop, its goroutines'
	// crew, and how long a write may wait for the peer.
	loop         linkLoop
	crew         *crew
	writeTimeout time.Duration

	wmu   sync.Mutex
	out   []byte   // queued lines, not yet written
	spare []byte   // the other buffer, reused
	marks []string // rounds whose final exit-wave COMPLETE is in out
	// markSpare is a marks slice to reuse: one that held a single round,
	// which drain hands on in the input itself.
	markSpare []string
	writing   bool // a write is in progress (flush or the writer)
	dead      bool // closed: queue nothing more
	wake      chan struct{}
	quit      chan struct{}
	wdl       time.Time     // when to renew the write deadline (whoever writes, under writing)
	now       *rawio.Writer // writeNow's, for c (whoever writes, under writing)

	helloSent  bool                  // this node's identity line was queued on it (loop only)
	helloHeard bool                  // the peer's identity line was read on it and checked out (loop only)
	rasm       wire.ReceiptAssembler // RECEIPT lines read so far (reader only; receipts.go)
	closing    bool                  // its last words are queued: closed after them (loop only)
	dropped    bool                  // the loop dropped it: how its stream ends says nothing more (loop only)
	firstLine  string                // the first line queued on it, HEARTBEAT included (wmu)
	firstAt    time.Time             // when (zero: none yet)
	lastRecv   atomic.Int64          // UnixNano of the last line read from the peer (0: none yet)
	lastSent   atomic.Int64          // UnixNano of the last write of lines queued to the peer (drain)
}

// heard records that a line arrived from the peer.
func (l *link) heard() { l.lastRecv.Store(time.Now().UnixNano()) }

// heardAt is when the last line arrived from the peer (UnixNano, 0: never).
func (l *link) heardAt() int64 { return l.lastRecv.Load() }

// linkLoop is how a link reaches its node's loop: an input from its
// writer, or from the goroutine that flushed it after a turn.
type linkLoop interface {
	inbox
}

func (cn *connector) newLink(c net.Conn, side protocol.Side) *link {
	l := &link{c: c, side: side, peer: c.RemoteAddr().String(), loop: cn.loop, crew: cn.crew, writeTimeout: cn.cfg.WriteTimeout,
		wake: make(chan struct{}, 1), quit: make(chan struct{})}
	l.lastSent.Store(time.Now().UnixNano())
	return l
}

// startWriter starts l's writer goroutine. Loop only.
func (l *link) startWriter() { l.crew.spawn(l.writer) }

// enqueue queues one encoded line; exitWave marks the round's final
// COMPLETE to the predecessor, whose delivery is reported to the node. It
// reports false if the outbox is full (the caller drops the link). Loop
// only.
func (l *link) enqueue(line []byte, exitWave bool, round string) bool {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.dead {
		return true // being dropped; the machine re-sends on reconnect
	}
	if len(l.out)+len(line) > maxOutbox {
		return false
	}
	if l.firstAt.IsZero() {
		l.firstAt, l.firstLine = time.Now(), string(line[:len(line)-1])
	}
	l.out = append(l.out, line...)
	if exitWave {
		if l.marks == nil {
			l.marks, l.markSpare = l.markSpare, nil
		}
		l.marks = append(l.marks, round)
	}
	return true
}

// closeConn closes l's connection on a goroutine of its own: a TLS close
// writes close_notify, and the loop never waits on a socket.
func (l *link) closeConn() {
	if !l.crew.spawn(func() { closeQuick(l.c) }) {
		closeQuick(l.c) // Close is waiting: it waits for this too
	}
}

// closeQuick closes c without waiting for a peer that stopped reading: a
// TLS connection whose socket has no room left for its closing alert
// has the connection under it closed first, so that its close_notify
// fails at once instead of waiting up to five seconds (crypto/tls's
// bound on it; Close waits for every link's close). Otherwise it ends
// its side first and reads what the peer still sends, for at most
// lingerWait (linger): a socket closed with bytes unread resets the
// connection, and the reset can cost the peer the last lines written to
// it before it read them (a halting node's fault notice).
func closeQuick(c net.Conn) {
	raw := c
	if u, ok := c.(interface{ NetConn() net.Conn }); ok {
		raw = u.NetConn()
	}
	if w := rawio.NewWriter(c); w.OverTLS() {
		if !w.TakesNow(closeAlertRoom) {
			_ = raw.Close()
			_ = c.Close()
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite() // its close_notify
		}
	}
	linger(raw)
	_ = c.Close()
}

// closeAlertRoom is room enough for a TLS close_notify record.
const closeAlertRoom = 64

// lingerWait and lingerMax bound what linger reads: a peer that neither
// closes nor stops writing is cut off.
const (
	lingerWait = 300 * time.Millisecond
	lingerMax  = 64 << 10
)

// linger ends the writing side of the TCP connection c (its last bytes
// go out, then its end) and reads and drops what the peer sends until it
// closes its side, for at most lingerWait and lingerMax bytes.
func linger(c net.Conn) {
	tc, ok := c.(interface{ CloseWrite() error })
	if !ok || tc.CloseWrite() != nil {
		return
	}
	if c.SetReadDeadline(time.Now().Add(lingerWait)) != nil {
		return
	}
	var buf [4096]byte
	for n := 0; n < lingerMax; {
		k, err := c.Read(buf[:])
		if err != nil {
			return
		}
		n += k
	}
}

// shut closes l; what is still queued on it (a fault notice) is written
// first, waiting at most shutWait for the peer, by a goroutine of its own,
// so that no caller blocks on a socket; when Close is waiting for the
// node's goroutines (none can start), by the caller, before Close
// returns. Loop only.
func (l *link) shut() {
	l.wmu.Lock()
	rest := l.out
	if l.dead || l.writing || len(rest) > shutMax {
		rest = nil // a peer that does not read gets nothing more
	}
	l.out = nil
	if !l.dead {
		l.dead = true
		close(l.quit)
	}
	l.wmu.Unlock()
	if len(rest) == 0 {
		l.closeConn()
		return
	}
	last := func() {
		_ = l.c.SetWriteDeadline(time.Now().Add(shutWait))
		_, _ = l.c.Write(rest)
		closeQuick(l.c)
	}
	if !l.crew.spawn(last) {
		last()
	}
}

// shutWait and shutMax bound what a closing link still writes: a few
// lines (a fault notice), for a short while.
const (
	shutWait = 300 * time.Millisecond
	shutMax  = 1024
)

// flush writes what is queued without blocking, if no other write is in
// progress, and hands any rest to the writer: after a turn, by the
// goroutine that ran it, off the loop's token.
func (l *link) flush() { l.drain(false) }

func (l *link) writer() {
	for {
		select {
		case <-l.wake:
			l.drain(true)
		case <-l.quit:
			return
		}
	}
}

// drain writes the queue: at once and without blocking (block false), or
// waiting for the peer up to WriteTimeout (block true, the writer only).
func (l *link) drain(block bool) {
	l.wmu.Lock()
	if l.writing || l.dead || len(l.out) == 0 {
		l.wmu.Unlock()
		return
	}
	l.writing = true
	batch, marks := l.out, l.marks
	l.out, l.marks = l.spare[:0], nil
	l.wmu.Unlock()
	now := time.Now().UnixNano()
	since := time.Duration(now - l.lastSent.Swap(now)) // once a write, not once a line

	var wrote int
	var err error
	if block {
		wrote, err = l.writeBlocking(batch)
	} else {
		wrote, err = l.writeNow(batch, since)
	}

	l.wmu.Lock()
	l.writing = false
	if err != nil {
		l.wmu.Unlock()
		l.loop.post(input{kind: inWriteFailed, l: l, err: err})
		return
	}
	if wrote < len(batch) {
		// The socket took only part: the rest goes first, to the writer.
		rest := append(batch[wrote:len(batch):len(batch)], l.out...)
		l.out, l.marks = rest, append(marks, l.marks...)
		l.wmu.Unlock()
		l.kick()
		return
	}
	l.spare = batch[:0]
	in := input{kind: inDelivered, rounds: marks}
	if len(marks) == 1 {
		// The usual case: one round (its id may be empty), carried in
		// the input itself, and the slice is kept for the next.
		in.round, in.rounds, in.flag = marks[0], nil, true
		marks[0] = ""
		l.markSpare = marks[:0]
	}
	more := len(l.out) > 0
	l.wmu.Unlock()
	if more {
		l.kick()
	}
	if in.flag || in.rounds != nil {
		l.loop.post(in)
	}
}

func (l *link) kick() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// writeBlocking writes all of b, waiting up to WriteTimeout for the peer.
func (l *link) writeBlocking(b []byte) (int, error) {
	// Renew the deadline only when half of it is used up (setting it
	// costs more than a write on the fast path): a write never starts
	// with less than half of it left.
	if now := time.Now(); now.After(l.wdl) {
		l.wdl = now.Add(l.writeTimeout / 2)
		_ = l.c.SetWriteDeadline(now.Add(l.writeTimeout))
	}
	return l.c.Write(b)
}
