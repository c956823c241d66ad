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
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"
)

// checkLoop makes every step and fsync of every node check, until the
// test ends, that it runs on that node's loop; it returns what ran
// elsewhere.
func checkLoop(t *testing.T) func() []string {
	var (
		mu  sync.Mutex
		bad []string
	)
	f := func(node, what string) {
		mu.Lock()
		defer mu.Unlock()
		bad = append(bad, fmt.Sprintf("node %s: %s off its loop", node, what))
	}
	loopCheck.Store(&loopProbe{goid: curGoid, bad: f})
	t.Cleanup(func() { loopCheck.Store(nil) })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), bad...)
	}
}

// One loop owns each node (docs/DESIGN.md, "The shape of the code"):
// every step of the machine and every fsync of the journal runs on the
// node's loop, on every path a round takes: durable nodes (journal
// records and exit-wave deliveries synced), heartbeats, quick tasks and
// tasks on goroutines, logging and Trace, a restart that resumes from the
// journal, a fault and the node's end.
func TestEveryStepOnTheLoop(t *testing.T) {
	violations := checkLoop(t)
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
				t.Fatal("a durable middle node made no fsync: the check saw none")
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
		// every round over records its end (after its loop has ended).
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
		snap, err := journal.Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		if snap.State.Faults["r"] != "phase-timeout" || snap.State.Ended == 0 {
			t.Fatalf("the journal lacks the fault or the end record: %+v", snap.State)
		}
		if _, err := Start(Config{Name: "A", Next: ln.Addr().String(), StateDir: dir, Rounds: []string{"r"}}); !errors.Is(err, ErrAlreadyEnded) {
			t.Fatalf("restarted on the ended journal: %v, want ErrAlreadyEnded", err)
		}
	})
	if v := violations(); len(v) > 0 {
		t.Fatalf("%d steps or fsyncs off the loop, e.g. %s", len(v), v[0])
	}
}

// The check itself catches a step made off the loop, so
// TestEveryStepOnTheLoop can fail.
func TestLoopCheckCatches(t *testing.T) {
	violations := checkLoop(t)
	cfgs := chainConfigs(t, 2)
	nodes := startAll(t, cfgs, []int{1, 0})
	for i := 1; i >= 0; i-- {
		nodes[i].Ready("a")
	}
	waitDone(t, nodes, "a", "")
	if v := violations(); len(v) != 0 {
		t.Fatalf("the check caught %q in a healthy chain", v)
	}
	nd := nodes[0]
	nd.Close() // its loop has ended: stepping here races with nothing
	_ = nd.d.step(protocol.LocalReady("b"), nil)
	if v := violations(); len(v) != 1 || !strings.Contains(v[0], "step off its loop") {
		t.Fatalf("the check caught %q, want one step off the loop", v)
	}
}

// The machine is the loop's: only step.go, where the stepper steps it,
// refers to it, and nothing else calls Step; the rest of the driver reads
// it through machineView, which has no Step.
func TestMachineInOneFile(t *testing.T) {
	fset, files := sourceFiles(t, ".")
	for _, file := range files {
		if filepath.Base(fset.File(file.Pos()).Name()) == "step.go" {
			continue
		}
		ast.Inspect(file, func(x ast.Node) bool {
			if sel, ok := x.(*ast.SelectorExpr); ok && sel.Sel.Name == "m" {
				t.Errorf("%s: the machine (%s.m) used outside step.go", fset.Position(sel.Pos()), types(sel.X))
			}
			if sel, ok := x.(*ast.SelectorExpr); ok && sel.Sel.Name == "Step" {
				t.Errorf("%s: %s.Step called outside step.go (the stepper)", fset.Position(sel.Pos()), types(sel.X))
			}
			return true
		})
	}
}

// One place steps (docs/DESIGN.md, "The shape of the code"): the
// stepper's step is called by the driver's stepThen alone, and the
// driver's step and stepThen by the driver alone. Every part hands back
// the event it learned (a task's end, an undo's end, a link made current
// or dropped, the rounds a duplicate's refusal ends, a steering line, an
// approval) for the driver to step.
func TestOneCallerSteps(t *testing.T) {
	fset, files := sourceFiles(t, ".")
	calls := 0
	for _, file := range files {
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			recv := recvName(fn)
			ast.Inspect(fn.Body, func(x ast.Node) bool {
				call, ok := x.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "step" && sel.Sel.Name != "stepThen" {
					return true
				}
				calls++
				where := fmt.Sprintf("%s: %s.%s called in %s.%s", fset.Position(sel.Pos()), exprName(sel.X), sel.Sel.Name, recv, fn.Name.Name)
				if inner, ok := sel.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "st" {
					// The stepper itself.
					if recv != "driver" || fn.Name.Name != "stepThen" {
						t.Errorf("%s: only the driver's stepThen calls the stepper", where)
					}
					return true
				}
				if recv != "driver" {
					t.Errorf("%s: a part steps; hand the event back for the loop to step", where)
				}
				return true
			})
		}
	}
	if calls == 0 {
		t.Fatal("found no call of step at all: the check is broken")
	}
}

// exprName names an expression for a message: a.b.c, or "?".
func exprName(x ast.Expr) string {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return exprName(x.X) + "." + x.Sel.Name
	}
	return "?"
}

// types names the receiver of a selector for a message.
func types(x ast.Expr) string {
	if id, ok := x.(*ast.Ident); ok {
		return id.Name
	}
	return "?"
}

// A Trace callback runs on the node's loop, and may still read the node.
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
			_ = nd[0].Snapshot() // asked of its own loop: answered there
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

// call runs f on n's loop and waits until it has run; false if the loop
// has ended (tests' probes of the loop's state).
func (n *Node) call(f func()) bool {
	_, ok := n.lp.ask(input{kind: inProbe, fn: f})
	return ok
}

// curGoid returns the calling goroutine's id (tests only: the node never
// asks which goroutine it runs on).
func curGoid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}

// sourceFiles parses the non-test Go files of dir, for the tests that
// check the package's shape.
func sourceFiles(t *testing.T, dir string) (*token.FileSet, []*ast.File) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, f := range names {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, file)
	}
	return fset, files
}

// recvName is the name of fn's receiver type (`func (x T)` and
// `func (x *T)` alike), "" for a function.
func recvName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) != 1 {
		return ""
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// methodCounts counts the methods of each receiver type declared in the
// non-test Go files of dir.
func methodCounts(t *testing.T, dir string) map[string]int {
	_, files := sourceFiles(t, dir)
	counts := map[string]int{}
	for _, file := range files {
		for _, decl := range file.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok {
				if name := recvName(fn); name != "" {
					counts[name]++
				}
			}
		}
	}
	return counts
}

// The node is made of parts (docs/DESIGN.md, "The shape of the code"):
// Node, the public facade, has at most 25 methods and no type of the
// root package more than 30; protocol.Machine at most 40. A type that
// grows past its bound has taken on a concern of its own: give it a part.
func TestPartsStaySmall(t *testing.T) {
	root := methodCounts(t, ".")
	if root["Node"] == 0 || root["driver"] == 0 {
		t.Fatalf("found no methods of Node or driver: the count is broken (%v)", root)
	}
	for typ, n := range root {
		bound := 30
		if typ == "Node" {
			bound = 25
		}
		if n > bound {
			t.Errorf("%s has %d methods, more than %d", typ, n, bound)
		}
	}
	if n := methodCounts(t, "protocol")["Machine"]; n == 0 || n > 40 {
		t.Errorf("protocol.Machine has %d methods, want 1 to 40", n)
	}
}

// The loop's token (docs/DESIGN.md, "The shape of the code"): the node's
// goroutines that post inputs at once (readers, writers, task workers)
// run turns themselves when the token is free, and the loop goroutine
// runs the rest. Whoever runs it, one turn runs at a time, every input is
// taken once, and each poster's inputs are taken in the order it posted
// them.
func TestTokenOneTurnAtATimeInOrder(t *testing.T) {
	lp := newLoop(&Config{Name: "T"})
	var (
		running  atomic.Int32
		overlaps atomic.Int32
		mu       sync.Mutex
		last     = map[int]int{} // poster -> last sequence number taken
		taken    int
		bad      []string
	)
	var scratch []input
	lp.turnFn = func() {
		if running.Add(1) != 1 {
			overlaps.Add(1)
		}
		runtime.Gosched() // a window for a second turn to show itself
		scratch = lp.take(scratch[:0], maxTurn)
		mu.Lock()
		for _, in := range scratch {
			p, seq := tokenPoster(&in)
			if seq != last[p]+1 {
				bad = append(bad, fmt.Sprintf("poster %d: input %d after %d", p, seq, last[p]))
			}
			last[p] = seq
			taken++
		}
		mu.Unlock()
		running.Add(-1)
	}
	runLoopGoroutine(lp, lp.turnFn)
	const posters, each = 4, 5000
	var wg sync.WaitGroup
	for p := 1; p <= posters; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= each; i++ {
				// Posters 1 and 2 are the node's own (they may run the
				// turn); 3 and 4 are the API's (the loop goroutine runs it).
				in := input{kind: inProbe, round: strconv.Itoa(p*1_000_000 + i)}
				if p <= 2 {
					lp.post(in)
				} else {
					lp.submit(in)
				}
			}
		}()
	}
	wg.Wait()
	// Whatever is still queued (a turn takes at most maxTurn inputs, and
	// the wake-ups of the loop goroutine fold into one), the loop
	// goroutine takes, untold.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := taken
		mu.Unlock()
		if n == posters*each || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(lp.stop)
	<-lp.loopDone
	if lp.post(input{kind: inProbe}) {
		t.Error("post after the loop ended reported the input taken")
	}
	mu.Lock()
	defer mu.Unlock()
	if taken != posters*each {
		t.Errorf("%d inputs taken, want %d", taken, posters*each)
	}
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d turns ran while another was running", n)
	}
	for _, b := range bad[:min(len(bad), 5)] {
		t.Error(b)
	}
}

// tokenPoster decodes a TestTokenOneTurnAtATimeInOrder input: its
// poster and its sequence number, from its round.
func tokenPoster(in *input) (poster, seq int) {
	n, _ := strconv.Atoi(in.round)
	return n / 1_000_000, n % 1_000_000
}

// doc.go's file map names every file of the package (docs/DESIGN.md,
// "The shape of the code"): a file added without a word there fails.
func TestDocMapsEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		named := regexp.MustCompile(`(^|[\s(])` + regexp.QuoteMeta(f) + `[\s,;:)]`)
		if !strings.HasSuffix(f, "_test.go") && !named.Match(doc) {
			t.Errorf("doc.go's file map does not name %s", f)
		}
	}
}

// A turn takes at most maxTurn inputs, and the loop goroutine's
// wake-ups fold into one: what a turn leaves in the inbox, the loop
// goroutine takes without another input to wake it.
func TestTokenLeftoversTaken(t *testing.T) {
	lp := newLoop(&Config{Name: "T"})
	var taken atomic.Int32
	var scratch []input
	lp.turnFn = func() {
		scratch = lp.take(scratch[:0], maxTurn)
		taken.Add(int32(len(scratch)))
	}
	const n = 3*maxTurn + 10
	lp.token.Lock() // a turn runs: every input waits
	for range n {
		lp.submit(input{kind: inProbe})
	}
	go func() {
		for {
			select {
			case <-lp.wake:
				lp.token.Lock()
				lp.runHeld(lp.turnFn)
			case <-lp.stop:
				return
			}
		}
	}()
	lp.runHeld(func() {}) // the running turn ends, having taken nothing
	defer close(lp.stop)
	if !poll(5*time.Second, time.Millisecond, func() bool { return taken.Load() == n }) {
		t.Fatalf("%d of %d inputs taken", taken.Load(), n)
	}
}

// The loop goroutine's turn lets a caller it answered go on before the
// turn ends (callerTurn): a caller that asks again at once (Ready in a
// loop, for rounds in flight) joins the same turn, so its lines leave
// in the same write. Without the yield nearly every ask is a turn of
// its own, which the same check must catch (the seeded bug below).
func TestCallerTurnJoinsNextCall(t *testing.T) {
	for _, yield := range []bool{true, false} {
		turns, asks := callerTurns(t, yield)
		t.Logf("yield=%v: %d asks in %d turns", yield, asks, turns)
		joined := turns <= asks*3/4
		switch {
		case yield && !joined:
			t.Errorf("%d asks made in a loop took %d turns, want at most %d: a caller answered does not join the turn", asks, turns, asks*3/4)
		case !yield && joined:
			t.Errorf("seeded bug (no yield): %d asks took only %d turns: the check cannot tell", asks, turns)
		}
	}
}

// callerTurns runs asks asks one after another through a loop whose
// goroutine's turn yields (or, !yield, does not), and counts its turns.
func callerTurns(t *testing.T, yield bool) (turns, asks int) {
	lp := newLoop(&Config{Name: "T"})
	reacted := false
	lp.reactFn = func(in *input) { reacted = true; in.answer(reply{}) }
	lp.endFn = func() { // a turn that took an ask (the last, at stop, takes none)
		if reacted {
			turns++
		}
		reacted = false
	}
	lp.turnFn = lp.turn
	lp.callerFn = lp.callerTurn
	if !yield {
		lp.callerFn = lp.turn
	}
	runLoopGoroutine(lp, lp.callerFn)
	asks = 200
	for range asks {
		if _, ok := lp.ask(input{kind: inProbe}); !ok {
			t.Fatal("the loop ended")
		}
	}
	close(lp.stop)
	<-lp.loopDone
	return turns, asks
}

// runLoopGoroutine runs lp's loop goroutine as driver.run does, with
// turn as its turn, without a clock: until lp.stop is closed, after one
// last turn that ends the loop.
func runLoopGoroutine(lp *loop, turn func()) {
	go func() {
		for {
			select {
			case <-lp.wake:
				lp.token.Lock()
				lp.runHeld(turn)
			case <-lp.stop:
				lp.token.Lock()
				lp.runHeld(func() { turn(); lp.end() })
				return
			}
		}
	}()
}
