package chainsync

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/testnet"
)

// Draft "Error Handling" (the operator is told what went wrong): each
// fault is one ERROR line. The rounds it ends say so at WARN, naming the
// fault's kind, instead of repeating it at ERROR; a fault that ends two
// rounds is still one ERROR line.
func TestOneErrorLinePerFault(t *testing.T) {
	errorLines := func(w *watched) []capturedLog {
		return w.logs.find(func(e capturedLog) bool { return e.Level >= slog.LevelError })
	}
	roundOver := func(w *watched, kind FaultKind) int {
		return w.logs.count(func(e capturedLog) bool {
			return e.Level == slog.LevelWarn && strings.HasPrefix(e.Msg, "round over") &&
				(e.Attrs["status"] == StatusFault.String() || e.Attrs["status"] == StatusTaskFailed.String()) &&
				e.Attrs["fault"] == string(kind)
		})
	}

	t.Run("task-failed", func(t *testing.T) {
		w := startWatched(t, Config{Name: "A", Task: func(context.Context, string) error { return errors.New("boom") }})
		if err := w.Ready(""); err != nil {
			t.Fatal(err)
		}
		if res := waitResult(t, w, "", 5*time.Second); res.Status != StatusTaskFailed {
			t.Fatalf("result %v, want task failed", res.Status)
		}
		if got := errorLines(w); len(got) != 1 || got[0].Attrs["kind"] != string(FaultTaskFailed) {
			t.Errorf("ERROR lines %v, want exactly the task-failed fault", got)
		}
		if n := roundOver(w, FaultTaskFailed); n != 1 {
			t.Errorf("%d WARN round-over lines naming fault=task-failed, want 1:\n%s", n, w.logs.tail(20))
		}
	})

	t.Run("peer-silent-ends-two-rounds", func(t *testing.T) {
		fs := testnet.ListenPeer(t)
		w := startWatched(t, Config{Name: "A", Next: fs.Addr(), NextName: "B", Heartbeat: 30 * time.Millisecond})
		for _, r := range []string{"r1", "r2"} {
			if err := w.Ready(r); err != nil {
				t.Fatal(err)
			}
		}
		s := fs.Accept(t, 5*time.Second)
		s.Expect(t, "READY:r1\n")
		s.Expect(t, "READY:r2\n")
		for _, r := range []string{"r1", "r2"} {
			if res := waitResult(t, w, r, 5*time.Second); res.Status != StatusFault {
				t.Fatalf("round %s: %v, want fault", r, res.Status)
			}
		}
		if got := errorLines(w); len(got) != 1 || got[0].Attrs["kind"] != string(FaultPeerSilent) {
			t.Errorf("ERROR lines %v, want exactly one peer-silent fault", got)
		}
		if n := roundOver(w, FaultPeerSilent); n != 2 {
			t.Errorf("%d WARN round-over lines naming fault=peer-silent, want 2:\n%s", n, w.logs.tail(20))
		}
	})
}
