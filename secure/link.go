package secure

import (
	"context"
	"net"
	"time"

	"github.com/chainsync-go/chainsync/transport"
)

// Handshaker secures one connection of a link. *Config is one; so is any
// type with the same two methods (the chainsync package's Securer). Dial
// and Accept take one; nil means plain TCP.
type Handshaker interface {
	Client(ctx context.Context, raw net.Conn, addr string) (net.Conn, error)
	Server(ctx context.Context, raw net.Conn) (net.Conn, error)
}

// AcceptTimeout bounds the handshake (TLS and PSK proof) of a connection
// a node accepts: a real predecessor finishes in a few round trips, and a
// stranger must not hold a pending slot for long.
const AcceptTimeout = 3 * time.Second

// Dial reaches the successor at addr the way a node does: it retries the
// connection (TCP, or dial's) with b until the successor answers or ctx
// ends (onRetry, if set, hears of each failed attempt and the delay
// before the next), then secures the connection with h, the handshake bounded by limit.
//
// An error wraps ctx's error if ctx ended before a connection was made;
// otherwise the handshake failed (usually a *RefusedError), the
// connection is closed, and the caller decides whether to dial again.
// Dial does not Reset b.
func Dial(ctx context.Context, h Handshaker, dial transport.DialFunc, addr string, b *transport.Backoff, limit time.Duration,
	onRetry func(err error, attempt int, next time.Duration)) (net.Conn, error) {
	c, err := transport.Dial(ctx, dial, addr, b, onRetry)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return c, nil
	}
	hctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	return h.Client(hctx, c, addr)
}

// Accept secures raw, accepted from a would-be predecessor, the way a node
// does: the handshake must end within AcceptTimeout, and by deadline if
// that is sooner (zero: no such bound). On error raw is closed.
func Accept(ctx context.Context, h Handshaker, raw net.Conn, deadline time.Time) (net.Conn, error) {
	if h == nil {
		return raw, nil
	}
	hs := time.Now().Add(AcceptTimeout)
	if !deadline.IsZero() && deadline.Before(hs) {
		hs = deadline
	}
	hctx, cancel := context.WithDeadline(ctx, hs)
	defer cancel()
	return h.Server(hctx, raw)
}
