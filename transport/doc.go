// Package transport holds the TCP plumbing of a ChainSync node: capped
// exponential backoff with jitter, dialing a successor that may not be up
// yet, and socket tuning (TCP_NODELAY, keepalive). It knows nothing of the
// protocol; package chainsync drives it.
package transport
