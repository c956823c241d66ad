package testnet

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// connect listens on 10.0.0.2:7000 and dials it from 10.0.0.1.
func connect(t *testing.T, nw *Network) (client, server net.Conn) {
	t.Helper()
	ln, err := nw.Listen("10.0.0.2:7000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	client, err = nw.Dialer("10.0.0.1")(context.Background(), "10.0.0.2:7000")
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return client, server
}

func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}

func TestNetworkCarriesBytesBothWays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork()
		c, s := connect(t, nw)
		if got := s.RemoteAddr().String(); got[:9] != "10.0.0.1:" {
			t.Errorf("server sees the client at %s, want 10.0.0.1:port", got)
		}
		c.Write([]byte("READY\n"))
		c.Write([]byte("START\n"))
		if got := readN(t, s, 12); got != "READY\nSTART\n" {
			t.Errorf("got %q", got)
		}
		s.Write([]byte("COMPLETE\n"))
		if got := readN(t, c, 9); got != "COMPLETE\n" {
			t.Errorf("got %q", got)
		}
	})
}

func TestNetworkRefusesWhereNothingListens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork()
		_, err := nw.Dialer("10.0.0.1")(context.Background(), "10.0.0.9:7000")
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial: %v, want connection refused", err)
		}
		ln, _ := nw.Listen("10.0.0.9:7000")
		if _, err := nw.Listen("10.0.0.9:7000"); !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("second listen: %v, want address in use", err)
		}
		ln.Close()
		if _, err := nw.Dialer("10.0.0.1")(context.Background(), "10.0.0.9:7000"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dial after close: %v, want refused", err)
		}
	})
}

// A partition holds what is sent until it heals, and a dial across it
// hangs until its context ends.
func TestNetworkPartitionHoldsThenDelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork()
		c, s := connect(t, nw)
		nw.Partition("10.0.0.1", "10.0.0.2")
		c.Write([]byte("READY\n"))
		got := make(chan string, 1)
		go func() { got <- readN(t, s, 6) }()
		time.Sleep(time.Hour)
		synctest.Wait()
		select {
		case g := <-got:
			t.Fatalf("read %q across a partition", g)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := nw.Dialer("10.0.0.1")(ctx, "10.0.0.2:7000"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("dial across the partition: %v, want the context's deadline", err)
		}
		nw.Heal("10.0.0.1", "10.0.0.2")
		if g := <-got; g != "READY\n" {
			t.Errorf("after heal: %q", g)
		}
	})
}

func TestNetworkDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork()
		c, s := connect(t, nw)
		nw.SetDelay(250 * time.Millisecond)
		start := time.Now()
		c.Write([]byte("x"))
		readN(t, s, 1)
		if d := time.Since(start); d != 250*time.Millisecond {
			t.Errorf("arrived after %v, want 250ms", d)
		}
	})
}

func TestNetworkResetAndDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork()
		c, s := connect(t, nw)
		c.Write([]byte("sent"))
		if k := nw.Reset("10.0.0.1"); k != 1 {
			t.Errorf("Reset: %d connections, want 1", k)
		}
		if _, err := s.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("server write after reset: %v, want ECONNRESET", err)
		}
		if got := readN(t, s, 4); got != "sent" {
			t.Errorf("read before the reset's error: %q", got)
		}
		if _, err := s.Read(make([]byte, 4)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("server read after reset: %v, want ECONNRESET", err)
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("client write after reset: %v, want ECONNRESET", err)
		}

		ln, _ := nw.Listen("10.0.0.3:7000")
		c2, _ := nw.Dialer("10.0.0.1")(context.Background(), "10.0.0.3:7000")
		s2, _ := ln.Accept()
		c2.Write([]byte("bye"))
		if k := nw.Drop("10.0.0.1"); k != 1 {
			t.Errorf("Drop: %d connections, want 1", k)
		}
		if got := readN(t, s2, 3); got != "bye" {
			t.Errorf("read before EOF: %q", got)
		}
		if _, err := s2.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("read after drop: %v, want EOF", err)
		}
		if _, err := s2.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
			t.Errorf("write to a dropped peer: %v, want EPIPE", err)
		}
	})
}

// A read deadline set while a Read waits ends that Read.
func TestNetworkReadDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := NewNetwork()
		_, s := connect(t, nw)
		errc := make(chan error, 1)
		go func() {
			_, err := s.Read(make([]byte, 1))
			errc <- err
		}()
		synctest.Wait()
		start := time.Now()
		s.SetReadDeadline(time.Now().Add(3 * time.Second))
		err := <-errc
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("read: %v, want a timeout", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("timed out after %v, want 3s", d)
		}
		s.Close()
		if _, err := s.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("read after close: %v, want ErrClosed", err)
		}
	})
}
