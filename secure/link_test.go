package secure

import (
	"context"
	"errors"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/chainsync-go/chainsync/transport"
)

// Accept bounds an accepted connection's handshake by AcceptTimeout, or
// by the caller's deadline if sooner, as a node does for a would-be
// predecessor (draft "Security Considerations": TLS on every link; a
// stranger must not hold a pending slot). Fake time over net.Pipe.
func TestAcceptBound(t *testing.T) {
	certs := chain(t, "B")
	b := mustLoad(t, mtls(certs["B"]))
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: none
		want     time.Duration
	}{
		{"no deadline", 0, AcceptTimeout},
		{"later deadline", 10 * time.Second, AcceptTimeout},
		{"sooner deadline", time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, c := net.Pipe()
				defer c.Close()
				var dl time.Time
				if tc.deadline > 0 {
					dl = time.Now().Add(tc.deadline)
				}
				start := time.Now()
				conn, err := Accept(context.Background(), b, s, dl)
				if conn != nil {
					t.Fatal("Accept returned a connection from a silent peer")
				}
				wantRefused(t, "server", err, ReasonTimeout)
				if d := time.Since(start); d != tc.want {
					t.Errorf("refused after %v, want %v", d, tc.want)
				}
			})
		})
	}
}

// Dial and Accept with no Handshaker are plain TCP: the connection as
// made, unchanged.
func TestDialAcceptPlain(t *testing.T) {
	ln, err := transport.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		c, _ := Accept(context.Background(), nil, raw, time.Time{})
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, nil, nil, ln.Addr().String(), &transport.Backoff{}, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	defer s.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Errorf("plain Dial returned %T, want the TCP connection itself", c)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := s.Read(b[:]); err != nil || b[0] != 'x' {
		t.Fatalf("read %q, %v", b, err)
	}
}

// Dial keeps retrying a successor that is not up until ctx ends, and then
// returns ctx's error (not a refusal); a successor that answers but fails
// the handshake is a *RefusedError at once, not retried.
func TestDialRetriesThenRefuses(t *testing.T) {
	// A port with nothing listening: refused until ctx ends.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	tries := 0
	_, err = Dial(ctx, nil, nil, addr, &transport.Backoff{Min: 10 * time.Millisecond, Max: 20 * time.Millisecond}, time.Second,
		func(error, int, time.Duration) { tries++ })
	if !errors.Is(err, context.DeadlineExceeded) || tries < 2 {
		t.Errorf("nothing listening: err %v after %d tries, want the context's error after retries", err, tries)
	}

	// A plain-TCP listener that hangs up: the TLS client is refused.
	certs := chain(t, "A", "B")
	a := mustLoad(t, mtls(certs["A"]))
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	go func() {
		for {
			c, err := pl.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("READY\n"))
			c.Close()
		}
	}()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	_, err = Dial(ctx2, a, nil, pl.Addr().String(), &transport.Backoff{}, 2*time.Second, nil)
	var re *RefusedError
	if !errors.As(err, &re) || ctx2.Err() != nil {
		t.Errorf("a successor that is not TLS: err %v, want a *RefusedError before the context ends", err)
	}
}
