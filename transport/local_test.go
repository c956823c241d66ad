package transport

import (
	"context"
	"net"
	"testing"
	"time"
)

// docs/PROTOCOL.md, "The identity line" (the draft's wire): a node dials
// from its own host, so that its successor, which accepts it only from
// that host, sees it; of a name's addresses it takes one of the family
// dialled, and an address that is not this machine's falls back to the
// system's choice, said once.
func TestDialFrom(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dialFrom := func(from string) (net.IP, int) {
		t.Helper()
		fails := 0
		dial := DialFrom(from, func(error) { fails++ })
		if dial == nil {
			return nil, fails
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := dial(ctx, ln.Addr().String())
		if err != nil {
			t.Fatalf("from %s: %v", from, err)
		}
		defer c.Close()
		// A second dial reuses what the first learned.
		c2, err := dial(ctx, ln.Addr().String())
		if err != nil {
			t.Fatalf("from %s, again: %v", from, err)
		}
		c2.Close()
		return c.LocalAddr().(*net.TCPAddr).IP, fails
	}
	if ip, fails := dialFrom("127.0.0.7"); !ip.Equal(net.ParseIP("127.0.0.7")) || fails != 0 {
		t.Errorf("from 127.0.0.7: dialled from %v, %d failures", ip, fails)
	}
	if ip, fails := dialFrom("localhost"); ip == nil || !ip.IsLoopback() || fails != 0 {
		t.Errorf("from localhost: dialled from %v, %d failures", ip, fails)
	}
	// 192.0.2.1 (a documentation address) is not this machine's.
	if ip, fails := dialFrom("192.0.2.1"); ip == nil || fails != 1 {
		t.Errorf("from 192.0.2.1: dialled from %v, %d failures, want the system's choice and one", ip, fails)
	}
	if d := DialFrom("", nil); d != nil {
		t.Error(`DialFrom("") is not nil`)
	}
	if d := DialFrom("0.0.0.0", nil); d != nil {
		t.Error(`DialFrom("0.0.0.0") is not nil`)
	}
}
