package chainsync

import "github.com/chainsync-go/chainsync/internal/rawio"

// writeNow writes as much of b as the socket takes without waiting
// (rawio.Writer.WriteNow); what is left is for the writer's blocking
// write. Called with writing set, by one goroutine at a time.
func (l *link) writeNow(b []byte) (int, error) {
	if l.now == nil || l.now.Conn() != l.c {
		l.now = rawio.NewWriter(l.c)
	}
	return l.now.WriteNow(b)
}
