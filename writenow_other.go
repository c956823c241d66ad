//go:build !unix

package chainsync

// writeNow leaves everything to the writer on systems without a
// non-blocking write to a socket's descriptor in the standard library:
// the writer's blocking write is the only one.
func (l *link) writeNow([]byte) (int, error) { return 0, nil }
