package chainsync

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A link's write deadline is renewed only by blocking writes, so it is
// often in the past when a line goes out on the non-blocking path; that
// must not count as a failed write. Seen in a served chain: every ten
// seconds or so a link was closed with "raw-write ...: i/o timeout" and
// came back. Draft: Protocol Operation (messages are delivered on a
// persistent connection); docs/DESIGN.md, "Reconnects".
func TestExpiredWriteDeadlineIsNotAFailure(t *testing.T) {
	var downs atomic.Int32
	tr := func(ev TraceEvent) {
		if ev.Kind == TraceLinkDown {
			downs.Add(1)
		}
	}
	b, err := Start(Config{Name: "B", Listen: "127.0.0.1:0", Trace: tr})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a, err := Start(Config{Name: "A", Next: b.Addr().String(), Trace: tr})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range []string{"r1", "r2", "r3"} {
		// As if the writers' last blocking writes were long ago.
		for _, n := range []*Node{a, b} {
			n.call(func() {
				for _, l := range []*link{n.d.links.pred, n.d.links.succ} {
					if l != nil {
						l.wmu.Lock()
						l.wdl = time.Now().Add(-time.Second)
						_ = l.c.SetWriteDeadline(l.wdl)
						l.wmu.Unlock()
					}
				}
			})
		}
		if err := a.Ready(r); err != nil {
			t.Fatal(err)
		}
		if err := b.Ready(r); err != nil {
			t.Fatal(err)
		}
		for _, n := range []*Node{a, b} {
			if res, err := n.Wait(ctx, r); err != nil || res.Status != StatusDone {
				t.Fatalf("round %s: %v %v", r, res.Status, err)
			}
		}
	}
	if d := downs.Load(); d != 0 {
		t.Errorf("links went down %d times over three rounds with expired write deadlines", d)
	}
}
