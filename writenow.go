package chainsync

import (
	"time"

	"github.com/chainsync-go/chainsync/internal/rawio"
)

// writeNow writes as much of b as the socket takes without waiting
// (rawio.Writer.WriteNow); what is left is for the writer's blocking
// write. A TLS link whose last write was at least tlsQuiet ago (since)
// writes all of b through crypto/tls if the socket under it has room for
// it (then its Write does not wait), else nothing. Called with writing
// set, by one goroutine at a time.
func (l *link) writeNow(b []byte, since time.Duration) (int, error) {
	if l.now == nil || l.now.Conn() != l.c {
		l.now = rawio.NewWriter(l.c)
	}
	if !l.now.OverTLS() {
		return l.now.WriteNow(b)
	}
	if since < tlsQuiet || !l.now.TakesNow(len(b)) {
		return 0, nil
	}
	// The writer's write, deadline renewed (an expired one would fail
	// the write, and the TLS connection with it); with room for b it
	// does not wait.
	return l.writeBlocking(b)
}

// tlsQuiet is how long a TLS link must have been quiet for a write from
// the goroutine that ran the turn. A link that writes more often (more
// than 10,000 times a second: rounds in flight one after another) is
// busy: its writer sends what the turns queued meanwhile in one record
// and one system call, where writing each turn's lines at once would
// cost a record, a system call and a look at the socket each (measured,
// 64 rounds in flight: 6-11% more rounds a second than with every write
// made at once, and no fewer than with a threshold of a millisecond).
// On a quiet link the writer's hand-off (a goroutine woken, with more
// than one thread another thread too) is the longest part of a hop.
const tlsQuiet = 100 * time.Microsecond
