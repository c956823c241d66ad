package chainsync

import "github.com/chainsync-go/chainsync/internal/rawio"

// writeNow writes as much of b as the socket takes without waiting
// (rawio.WriteNow); what is left is for the writer's blocking write.
func (l *link) writeNow(b []byte) (int, error) { return rawio.WriteNow(l.c, b) }
