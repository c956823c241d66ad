package chainsync

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/transport"

	"github.com/chainsync-go/chainsync/protocol"

	"github.com/chainsync-go/chainsync/internal/testnet"
)

// Draft "Roles" (a node's predecessor is one fixed node): with
// PrevHostOnly, a connection from a host other than Prev's is closed
// before it can say anything, and a connection from Prev's host is served
// as the predecessor. The match is exact (docs/PROTOCOL.md, "The identity
// line"): on one machine, 127.0.0.3 is not 127.0.0.2.
func TestPrevHostOnly(t *testing.T) {
	t.Run("other host refused", func(t *testing.T) {
		// 192.0.2.1 is a documentation address: this test's loopback
		// connection cannot come from it.
		w := startWatched(t, Config{Name: "B", Listen: "127.0.0.1:0", Prev: "192.0.2.1:7000", PrevHostOnly: true})
		if err := w.Ready(""); err != nil {
			t.Fatal(err)
		}
		s := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
		_ = s.TrySend([]byte("READY\n"))
		s.AwaitClosed(t, 5*time.Second)
		waitCond(t, 5*time.Second, "the refusal to be traced", func() bool { return w.violations() > 0 })
		if w.predUp() || w.state("") != protocol.StateSync {
			t.Errorf("a connection from another host became the predecessor (state %v)", w.state(""))
		}
		if n := w.logs.count(func(e capturedLog) bool {
			return e.Msg == "refused would-be predecessor" && e.Attrs["peer"] != ""
		}); n != 1 {
			t.Errorf("%d refusals logged, want 1:\n%s", n, w.logs.tail(10))
		}
	})
	t.Run("its host accepted", func(t *testing.T) {
		w := startWatched(t, Config{Name: "B", Listen: "127.0.0.1:0", Prev: "127.0.0.2:7000", PrevHostOnly: true})
		if err := w.Ready(""); err != nil {
			t.Fatal(err)
		}
		s := dialFrom(t, "127.0.0.2", w.Addr().String())
		s.Send(t, "READY\n")
		s.Expect(t, "START\n")
		w.waitState(t, "", protocol.StateWatch)
		if v := w.violations(); v != 0 {
			t.Errorf("%d violations for the predecessor's own host", v)
		}
	})
	t.Run("another loopback address refused", func(t *testing.T) {
		w := startWatched(t, Config{Name: "B", Listen: "127.0.0.1:0", Prev: "127.0.0.2:7000", PrevHostOnly: true})
		if err := w.Ready(""); err != nil {
			t.Fatal(err)
		}
		s := dialFrom(t, "127.0.0.3", w.Addr().String())
		_ = s.TrySend([]byte("READY\n"))
		s.AwaitClosed(t, 5*time.Second)
		waitCond(t, 5*time.Second, "the refusal to be traced", func() bool { return w.violations() > 0 })
		if w.predUp() || w.state("") != protocol.StateSync {
			t.Errorf("a connection from 127.0.0.3 became the predecessor 127.0.0.2's (state %v)", w.state(""))
		}
		if n := w.logs.count(func(e capturedLog) bool {
			return e.Msg == "refused would-be predecessor" && strings.Contains(fmt.Sprint(e.Attrs["reason"]), "from 127.0.0.3")
		}); n != 1 {
			t.Errorf("%d refusals naming 127.0.0.3 logged, want 1:\n%s", n, w.logs.tail(10))
		}
	})
}

// dialFrom connects to addr from the local address from, as a node with
// DialFrom does.
func dialFrom(t *testing.T, from, addr string) *testnet.Peer {
	t.Helper()
	dial := transport.DialFrom(from, func(err error) { t.Fatalf("cannot dial from %s: %v", from, err) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.LocalAddr().(*net.TCPAddr).IP.String(); got != from {
		t.Fatalf("dialed from %s, want %s", got, from)
	}
	return testnet.NewPeer(t, c)
}

// docs/PROTOCOL.md, "The identity line" (the draft's wire): a node placed
// by a chain, without PrevHostOnly, refuses a predecessor connection from
// the address its chain gives another node, naming that node, and lets
// one from an address its chain does not name pass (a predecessor with
// several addresses, NAT).
func TestStrayFromAnotherNode(t *testing.T) {
	names := []string{"A", "B", "C"}
	cfg := func() Config {
		return Config{Name: "C", Listen: "127.0.0.1:0", Prev: "127.0.0.2:7000", PrevName: "B",
			Chain: names, ChainAddrs: []string{"127.0.0.5:7000", "127.0.0.2:7000", "127.0.0.1:0"}}
	}
	w := startWatched(t, cfg())
	if err := w.Ready(""); err != nil {
		t.Fatal(err)
	}
	a := dialFrom(t, "127.0.0.5", w.Addr().String())
	_ = a.TrySend([]byte("READY\n"))
	a.AwaitClosed(t, 5*time.Second)
	waitCond(t, 5*time.Second, "the refusal naming A", func() bool {
		return w.logs.count(func(e capturedLog) bool {
			return e.Level == slog.LevelError && strings.Contains(e.Msg, "the address of A in --chain")
		}) == 1
	})
	other := dialFrom(t, "127.0.0.7", w.Addr().String())
	other.Send(t, "READY\n")
	other.Expect(t, "START\n")

	// With the extension lines the identity line does the check instead.
	c := cfg()
	c.Heartbeat = time.Second
	if newPrevHost(&c).strays {
		t.Error("the address check is on with the extension lines")
	}
}
