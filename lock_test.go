package chainsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// curGoid returns the calling goroutine's id (test build only: slow).
func curGoid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// checkLocks makes every socket write and fsync of every node check, until
// the test ends, that its goroutine does not hold the node's lock; it
// returns what was written or synced under it.
func checkLocks(t *testing.T) func() []string {
	var (
		mu  sync.Mutex
		bad []string
	)
	lockCheck.Store(&lockChecker{goid: curGoid, fail: func(n *Node, what string) {
		mu.Lock()
		defer mu.Unlock()
		bad = append(bad, fmt.Sprintf("node %s: %s while holding its lock", n.cfg.Name, what))
	}})
	t.Cleanup(func() { lockCheck.Store(nil) })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), bad...)
	}
}

// No socket write and no fsync happens while a node holds its lock
// (docs/DESIGN.md, "The shape of the code": collect, persist, act), on
// every path a round takes: durable nodes (journal records and exit-wave
// deliveries synced), heartbeats, quick tasks and tasks on goroutines,
// logging and Trace, a restart that resumes from the journal.
func TestNoWriteOrFsyncUnderLock(t *testing.T) {
	violations := checkLocks(t)
	for _, quick := range []bool{false, true} {
		t.Run(fmt.Sprint("quick=", quick), func(t *testing.T) {
			const n = 3
			cfgs := chainConfigs(t, n)
			dirs := make([]string, n)
			var traced sync.Map
			for i := range cfgs {
				dirs[i] = t.TempDir()
				cfgs[i].StateDir = dirs[i]
				cfgs[i].QuickTask = quick
				cfgs[i].Heartbeat = 500 * time.Millisecond
				cfgs[i].Logger = slog.New(slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelDebug}))
				cfgs[i].Trace = func(ev TraceEvent) { traced.Store(ev.Kind, true) }
			}
			order := []int{0, 1, 2}
			nodes := startAll(t, cfgs, order)
			for r := range 20 {
				id := "r" + strconv.Itoa(r)
				for i := n - 1; i >= 0; i-- {
					if err := nodes[i].Ready(id); err != nil {
						t.Fatal(err)
					}
				}
				waitDone(t, nodes, id, "")
			}
			syncs := nodes[1].Snapshot().JournalSyncs
			if syncs == 0 {
				t.Fatal("a durable middle node made no fsync: the check saw nothing")
			}
			// A restart from the state directory: resumes, re-syncs.
			nodes[1].Close()
			nd, err := Start(cfgs[1])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { nd.Close() })
			nodes[1] = nd
			for i := n - 1; i >= 0; i-- {
				nodes[i].Ready("after")
			}
			waitDone(t, nodes, "after", "")
			if _, ok := traced.Load(TraceSent); !ok {
				t.Fatal("no TraceSent traced")
			}
		})
	}
	t.Run("fault-and-end", func(t *testing.T) {
		// A round ended by a fault: its fault record is journalled (before
		// the abort's record, in the same write); a node that closes with
		// every round over records its end; neither fsync under the lock.
		dir := t.TempDir()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close() // nobody listens there: the round waits for START in vain
		nd, err := Start(Config{Name: "A", Next: ln.Addr().String(), StateDir: dir, PhaseTimeout: 100 * time.Millisecond,
			Rounds: []string{"r"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := nd.Ready("r"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if res, err := nd.Wait(ctx, "r"); err != nil || faultKindOf(res.Err) != FaultPhaseTimeout {
			t.Fatalf("round r: %v %v, want a phase timeout", res, err)
		}
		nd.Close()
		data, err := os.ReadFile(filepath.Join(dir, "journal"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("F :r phase-timeout")) || !bytes.Contains(data, []byte("E ")) {
			t.Fatalf("the journal lacks the fault or the end record:\n%q", data)
		}
		if _, err := Start(Config{Name: "A", Next: ln.Addr().String(), StateDir: dir, Rounds: []string{"r"}}); !errors.Is(err, ErrAlreadyEnded) {
			t.Fatalf("restarted on the ended journal: %v, want ErrAlreadyEnded", err)
		}
	})
	if v := violations(); len(v) > 0 {
		t.Fatalf("%d writes or fsyncs under the node lock, e.g. %s", len(v), v[0])
	}
}

// The check itself catches a socket write or an fsync made under the lock,
// so TestNoWriteOrFsyncUnderLock can fail.
func TestLockCheckCatches(t *testing.T) {
	violations := checkLocks(t)
	cfgs := chainConfigs(t, 2)
	cfgs[0].StateDir = t.TempDir()
	nodes := startAll(t, cfgs, []int{1, 0})
	for i := 1; i >= 0; i-- {
		nodes[i].Ready("a")
	}
	waitDone(t, nodes, "a", "")
	nd := nodes[0]
	nd.lock()
	l := nd.succ
	if l == nil {
		nd.unlock()
		t.Fatal("the Head's successor link is down")
	}
	_, _ = l.writeNow([]byte("READY:b\n")) // a write under the lock, on purpose
	err := nd.j.Save([]protocol.Record{{Round: "b", State: protocol.StateSync}})
	nd.unlock()
	if err != nil {
		t.Fatal(err)
	}
	v := violations()
	if len(v) != 2 || !strings.Contains(v[0], "socket write") || !strings.Contains(v[1], "fsync") {
		t.Fatalf("the check caught %q, want a socket write and an fsync", v)
	}
	// The same calls without the lock are fine.
	if err := nd.j.Save([]protocol.Record{{Round: "c", State: protocol.StateSync}}); err != nil {
		t.Fatal(err)
	}
	if v := violations(); len(v) != 2 {
		t.Fatalf("an fsync without the lock was reported: %q", v[2:])
	}
}

// One unlock path: only lock.go takes or releases a node's mu; everything
// else goes through lock and unlock, which carries out what was queued.
func TestOneUnlockPath(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "lock.go" {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(x ast.Node) bool {
			sel, ok := x.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Lock" && sel.Sel.Name != "Unlock" && sel.Sel.Name != "TryLock") {
				return true
			}
			mu, ok := sel.X.(*ast.SelectorExpr)
			if !ok || mu.Sel.Name != "mu" {
				return true
			}
			switch owner := mu.X.(type) {
			case *ast.Ident:
				if owner.Name == "n" {
					t.Errorf("%s: n.mu.%s outside lock.go: use n.lock and n.unlock", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			case *ast.SelectorExpr:
				if owner.Sel.Name == "n" {
					t.Errorf("%s: .n.mu.%s outside lock.go: use lock and unlock", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}

// A Trace callback runs without the node's lock: it may read the node.
func TestTraceMayReadNode(t *testing.T) {
	cfgs := chainConfigs(t, 2)
	var nodes []*Node
	var mu sync.Mutex
	reads := 0
	cfgs[0].Trace = func(ev TraceEvent) {
		mu.Lock()
		nd := nodes
		mu.Unlock()
		if ev.Kind == TraceRoundDone && len(nd) > 0 {
			_ = nd[0].Snapshot() // under the lock this would deadlock
			mu.Lock()
			reads++
			mu.Unlock()
		}
	}
	started := startAll(t, cfgs, []int{1, 0})
	mu.Lock()
	nodes = started
	mu.Unlock()
	for i := 1; i >= 0; i-- {
		started[i].Ready("x")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := started[0].Wait(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if reads != 1 {
		t.Fatalf("Trace saw %d round ends, want 1 (traced before Wait returns)", reads)
	}
}
