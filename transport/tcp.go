package transport

import (
	"context"
	"net"
	"time"
)

// KeepAlive is the TCP keepalive configuration applied to every link: probe
// after 15s idle, every 5s, give up after 4 unanswered probes, so a peer
// that vanished without a FIN is noticed within about 35s.
var KeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 4}

// UserTimeout is how long data sent on a link may stay unacknowledged
// before the connection is dropped (TCP_USER_TIMEOUT, Linux): the same 35s
// as keepalive, for the case keepalive does not cover, a peer that
// vanished while a message to it was in flight.
const UserTimeout = 35 * time.Second

// Tune sets TCP_NODELAY (protocol lines are tiny and latency-bound),
// keepalive and the user timeout on c if it is a TCP connection.
func Tune(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetKeepAliveConfig(KeepAlive)
		setUserTimeout(tc, UserTimeout)
	}
}

// Listen opens a TCP listener whose accepted connections get keepalive.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAliveConfig: KeepAlive}
	return lc.Listen(ctx, "tcp", addr)
}

// DialFunc makes one attempt to connect to addr. Config.Dial takes one, so
// that tests can put a node on an in-memory network.
type DialFunc func(ctx context.Context, addr string) (net.Conn, error)

// DialTimeout bounds one attempt to connect.
const DialTimeout = 5 * time.Second

// Dial connects to addr with dial (nil: TCP), retrying with b until it
// succeeds or ctx ends: a successor that is not up yet is normal. Each
// attempt is bounded by DialTimeout. Each failed attempt is passed to
// onRetry (if set) with the delay before the next one. The connection is
// tuned with Tune. Dial does not Reset b: the caller does once the
// connection has proved useful, so a peer that accepts and at once closes
// is not re-dialed in a hot loop.
func Dial(ctx context.Context, dial DialFunc, addr string, b *Backoff, onRetry func(err error, attempt int, next time.Duration)) (net.Conn, error) {
	if dial == nil {
		d := net.Dialer{KeepAliveConfig: KeepAlive}
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	for {
		actx, cancel := context.WithTimeout(ctx, DialTimeout)
		c, err := dial(actx, addr)
		cancel()
		if err == nil {
			Tune(c)
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		wait := b.Next()
		if onRetry != nil {
			onRetry(err, b.Attempts(), wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
