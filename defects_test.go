package chainsync

import (
	"context"
	"fmt"
	"go/ast"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/internal/testnet"
	"github.com/chainsync-go/chainsync/protocol"
)

// Close releases a node whose loop died of a panic (SetPanicHandler kept
// the process alive): the listener is closed and the state directory is
// free again, so that a command that reports the panic can still shut
// down cleanly (docs/OPERATIONS.md, exit status; the draft's node runs
// until it is stopped).
func TestCloseAfterLoopPanic(t *testing.T) {
	panicked := make(chan any, 1)
	SetPanicHandler(func(v any, _ []byte) { panicked <- v })
	t.Cleanup(func() { SetPanicHandler(nil) })
	dir := t.TempDir()
	var once sync.Once
	cfg := Config{Name: "B", Listen: "127.0.0.1:0", Prev: "127.0.0.1:1", StateDir: dir,
		Trace: func(TraceEvent) { once.Do(func() { panic("seeded bug on the loop") }) }}
	nd, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := nd.Addr().String()
	// A stranger's junk line is traced (a violation): on the loop, which
	// the Trace callback makes panic.
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("JUNK\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-panicked:
		if v != "seeded bug on the loop" {
			t.Fatalf("handler got %v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the loop's panic did not reach the handler")
	}
	closed := make(chan error, 1)
	go func() { closed <- nd.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close after the loop's panic did not return")
	}
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Error("the listener still accepts after Close")
	}
	j, _, err := journal.Open(dir, journal.Header{Role: nd.Role().String(), Name: "B"})
	if err != nil {
		t.Fatalf("the state directory is still held after Close: %v", err)
	}
	j.Close()
}

// A Trace callback may hand work to a goroutine of its own and wait for
// it; that goroutine may read the node (Snapshot) while the loop waits in
// the callback, as the callback itself may.
func TestSnapshotFromCallbackHelper(t *testing.T) {
	cfgs := chainConfigs(t, 1)
	var (
		mu    sync.Mutex
		nd    *Node
		reads int
	)
	cfgs[0].Trace = func(ev TraceEvent) {
		mu.Lock()
		n := nd
		mu.Unlock()
		if ev.Kind != TraceRoundDone || n == nil {
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if st := n.Snapshot(); st.Name == cfgs[0].Name {
				mu.Lock()
				reads++
				mu.Unlock()
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("a Snapshot asked by the callback's helper goroutine was not answered")
		}
	}
	n := startAll(t, cfgs, []int{0})[0]
	mu.Lock()
	nd = n
	mu.Unlock()
	if err := n.Ready(""); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.Wait(ctx, ""); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if reads != 1 {
		t.Fatalf("the helper read the node %d times, want 1", reads)
	}
}

// Every goroutine the package starts runs under the panic handler
// (SetPanicHandler): its one go statement is goSafe's, and every
// time.AfterFunc callback goes through safely. A goroutine outside it
// would crash the process with a panic a command meant to report.
func TestEveryGoroutineUnderPanicHandler(t *testing.T) {
	fset, files := sourceFiles(t, ".")
	for _, file := range files {
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			ast.Inspect(fd, func(x ast.Node) bool {
				switch x := x.(type) {
				case *ast.GoStmt:
					if fd.Name.Name != "goSafe" {
						t.Errorf("%s: a go statement in %s, not through goSafe", fset.Position(x.Pos()), fd.Name.Name)
					}
				case *ast.CallExpr:
					sel, ok := x.Fun.(*ast.SelectorExpr)
					if !ok || sel.Sel.Name != "AfterFunc" || types(sel.X) != "time" || len(x.Args) != 2 {
						return true
					}
					if !callsSafely(x.Args[1]) {
						t.Errorf("%s: a time.AfterFunc callback in %s not run through safely", fset.Position(x.Pos()), fd.Name.Name)
					}
				}
				return true
			})
		}
	}
}

// callsSafely reports whether f is a function literal whose body is one
// call of safely.
func callsSafely(f ast.Expr) bool {
	lit, ok := f.(*ast.FuncLit)
	if !ok || len(lit.Body.List) != 1 {
		return false
	}
	es, ok := lit.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	id, ok := call.Fun.(*ast.Ident)
	return ok && id.Name == "safely"
}

// Draft "Roles" (a node's predecessor is one fixed node), with
// PrevHostOnly naming the predecessor by host name: a resolver that hangs
// on one connection's check holds up that connection only. The next one,
// whose check is answered, is served as the predecessor at once.
func TestSlowResolverStallsNoAccept(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var calls sync.Mutex
	first := true
	lookup := func(ctx context.Context, host string) ([]net.IPAddr, error) {
		calls.Lock()
		hang := first
		first = false
		calls.Unlock()
		if hang {
			close(entered)
			<-release // a resolver that hangs, whatever its context says
		}
		return []net.IPAddr{{IP: net.IPv4(127, 0, 0, 1)}}, nil
	}
	w := startWatched(t, Config{Name: "B", Listen: "127.0.0.1:0", Prev: "pred.test:7000", PrevHostOnly: true, lookupHost: lookup})
	t.Cleanup(func() { close(release) }) // before Close, which waits for the lookup
	if err := w.Ready(""); err != nil {
		t.Fatal(err)
	}
	stuck := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
	defer stuck.Close()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first connection's host was never looked up")
	}
	s := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
	s.Send(t, "READY\n")
	if err := s.ExpectErr("START\n", 10*time.Second); err != nil {
		t.Fatalf("the second connection was not served while the first one's lookup hung: %v", err)
	}
	w.waitState(t, "", protocol.StateWatch)
}

// Restarts and durable state (docs/DESIGN.md): no line leaves before the
// records its turn saved are on disk. A would-be predecessor that opens a
// round this node does not run is told so with a fault notice, and under
// the halt policy the node's own round ends for that fault in the same
// turn: the notice waits for that round's record to be synced.
func TestNoticeLeavesAfterItsTurnsRecords(t *testing.T) {
	var armed atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	loopCheck.Store(&loopProbe{goid: curGoid, bad: func(string, string) {}, fsync: func() {
		if armed.Load() {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
		}
	}})
	t.Cleanup(func() { loopCheck.Store(nil) })
	w := startWatched(t, Config{Name: "B", Listen: "127.0.0.1:0", Prev: "127.0.0.1:1", StateDir: t.TempDir(),
		Heartbeat: time.Second, Rounds: []string{"r1"}})
	var once sync.Once
	free := func() { once.Do(func() { armed.Store(false); close(release) }) }
	t.Cleanup(free) // before Close, which syncs
	if err := w.Ready("r1"); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	s := testnet.DialPeer(t, w.Addr().String(), 5*time.Second)
	s.Send(t, wireLine("READY", "r2"))
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the mismatch's turn saved nothing")
	}
	// The turn's records are being synced now: nothing of it has left.
	if line, err := s.Line(2 * time.Second); err == nil {
		t.Fatalf("%q left before the records of its turn were on disk", line)
	}
	free()
	line, err := s.Line(10 * time.Second)
	if err != nil || !strings.HasPrefix(line, "FAULT") {
		t.Fatalf("got %q (%v), want the fault notice once the records are on disk", line, err)
	}
}

// Close after the loop died of a panic cancels the running tasks'
// context and waits for them, as it does for a healthy node (the draft's
// "Phase 3": a task runs once; here it is told to stop).
func TestCloseAfterLoopPanicCancelsTasks(t *testing.T) {
	panicked := make(chan any, 1)
	SetPanicHandler(func(v any, _ []byte) { panicked <- v })
	t.Cleanup(func() { SetPanicHandler(nil) })
	cfgs := chainConfigs(t, 1)
	started, stopped := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	cfgs[0].Task = func(ctx context.Context, round string) error {
		if round != "r1" {
			return nil
		}
		close(started)
		<-ctx.Done()
		close(stopped)
		return ctx.Err()
	}
	cfgs[0].Trace = func(TraceEvent) {
		if armed.Load() {
			armed.Store(false)
			panic("seeded bug on the loop")
		}
	}
	nd, err := Start(cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.Ready("r1"); err != nil {
		t.Fatal(err)
	}
	recvWithin(t, started, 10*time.Second, "the task to start")
	armed.Store(true)
	_ = nd.Ready("r2") // traced on the loop, which panics there
	recvWithin(t, panicked, 10*time.Second, "the loop's panic")
	closed := make(chan error, 1)
	go func() { closed <- nd.Close() }()
	recvWithin(t, stopped, 10*time.Second, "Close to cancel the running task")
	recvWithin(t, closed, 10*time.Second, "Close to return")
}

// docs/STEERING.md, "Features together" (the draft's section 4: no
// task out of order): the Head cancels round c1 while B's task of it
// runs, then retries c1 before that task has ended. B does not report
// c1 over while its task runs; once the task succeeds, the retry passes
// c1 on at B as already done, and c1 ends done everywhere. Before, the
// retry ended B's round under its running task ("round over: aborted"
// while the task still ran).
func TestRetryWhileOldTaskRunsEndsNothingUnderIt(t *testing.T) {
	cfgs := chainConfigs(t, 3)
	release, started := make(chan struct{}), make(chan struct{})
	var (
		mu     sync.Mutex
		events []string // B's, in order
		runs   atomic.Int32
	)
	for i := range cfgs {
		cfgs[i].Heartbeat = time.Second // the steering lines travel
		cfgs[i].Task = func(context.Context, string) error { return nil }
	}
	cfgs[1].Task = func(ctx context.Context, round string) error {
		if runs.Add(1) == 1 {
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	cfgs[1].Trace = func(ev TraceEvent) {
		if ev.Round != "c1" || ev.Kind != TraceTaskEnd && ev.Kind != TraceRoundDone {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		what := "round over: " + ev.Status.String()
		if ev.Kind == TraceTaskEnd {
			what = "task end"
		}
		events = append(events, what)
	}
	nodes := startAll(t, cfgs, []int{2, 1, 0})
	for i := 2; i >= 0; i-- {
		if err := nodes[i].Ready("c1"); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatalf("B's task of c1 did not start: %+v", nodes[1].Snapshot())
	}
	if err := nodes[0].Cancel(Request{Round: "c1", HasRound: true, By: "ann"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res, _ := nodes[0].Wait(ctx, "c1"); res.Status != StatusCancelled {
		t.Fatalf("the Head's c1 after the cancel: %+v", res)
	}
	if err := nodes[0].Retry(Request{Round: "c1", HasRound: true, By: "ann"}); err != nil {
		t.Fatal(err)
	}
	// The retry reaches B while its task runs: B reopens c1 (it leaves
	// START for the retry's own way through the chain, its task held by
	// the old one) but ends nothing.
	eventually(t, "the retry at B", func() bool {
		for _, r := range nodes[1].Snapshot().Rounds {
			if r.Round == "c1" && r.State < protocol.StateStart {
				return true
			}
		}
		return false
	})
	mu.Lock()
	early := slices.Clone(events)
	mu.Unlock()
	if len(early) > 0 {
		t.Fatalf("B reported %v for c1 while its task still ran", early)
	}
	close(release)
	waitDone(t, nodes, "c1", "")
	mu.Lock()
	defer mu.Unlock()
	if len(events) == 0 || events[0] != "task end" {
		t.Errorf("B's c1: %v, want its task's end before anything else", events)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("B ran c1's task %d times, want once (the retry passes it on)", n)
	}
}

// A Snapshot that finds the node in a callback, and then finds the
// callback over once it holds the callback guard, lets go of the guard
// before it asks the loop: holding it, it waited for a turn that waited
// for the guard at the end of its next callback (a deadlock, found when
// TestStuckPeerStallsNothing hung in CI). 600 rounds run through a
// 2-node chain whose Trace callbacks yield, while Snapshot is called
// without pause at both nodes: before the fix, three runs in four
// deadlocked. Draft: Protocol Operation (the rounds); the rest is this
// library's.
func TestSnapshotBetweenCallbacksDeadlocksNothing(t *testing.T) {
	cfgs := tcpChainConfigs(t, 2)
	for i := range cfgs {
		cfgs[i].Trace = func(TraceEvent) { runtime.Gosched() }
	}
	nodes := startAll(t, cfgs, []int{1, 0})
	stop := make(chan struct{})
	var snaps atomic.Int64
	for _, nd := range nodes {
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					nd.Snapshot()
					snaps.Add(1)
					runtime.Gosched()
				}
			}
		}()
	}
	done := make(chan struct{})
	var ran atomic.Int64
	go func() {
		defer close(done)
		for i := range 600 {
			ran.Store(int64(i))
			id := fmt.Sprint("r", i)
			nodes[1].Ready(id)
			nodes[0].Ready(id)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			res, err := nodes[0].Wait(ctx, id)
			cancel()
			if err != nil || res.Status != StatusDone {
				t.Errorf("round %s: %+v %v", id, res, err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("600 rounds with Snapshot called meanwhile did not end in 60s (%d rounds, %d snapshots): a deadlock", ran.Load(), snaps.Load())
	}
	close(stop)
	t.Logf("%d snapshots during the rounds", snaps.Load())
}
