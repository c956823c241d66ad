package chainsync

import (
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"

	"github.com/chainsync-go/chainsync/internal/testnet"
)

// Draft "Roles" (a node's predecessor is one fixed node): with
// PrevHostOnly, a connection from a host other than Prev's is closed
// before it can say anything, and a connection from Prev's host (any
// loopback address for a loopback host) is served as the predecessor.
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
		s := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
		s.Send(t, "READY\n")
		s.Expect(t, "START\n")
		w.waitState(t, "", protocol.StateWatch)
		if v := w.violations(); v != 0 {
			t.Errorf("%d violations for the predecessor's own host", v)
		}
	})
}
