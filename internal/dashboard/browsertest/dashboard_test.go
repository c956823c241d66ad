//go:build unix

package browsertest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/dashboard"
	"github.com/chainsync-go/chainsync/internal/testnet"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

var shots = flag.String("shots", "", "save the screenshots in `DIR` (default: the test's temporary directory)")

// bin is the chainsync binary, built by TestMain from this tree.
var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "chainsync-browser-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "chainsync")
	build := exec.Command("go", "build", "-o", bin, "github.com/chainsync-go/chainsync/cmd/chainsync")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "go build:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buffer is a goroutine-safe output sink.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is one chainsync process, killed at the test's end.
type proc struct {
	name     string
	cmd      *exec.Cmd
	out, err *buffer
	done     chan struct{}
}

func start(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &buffer{}, err: &buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.err
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("---- %s (chainsync %s), stderr:\n%s", name, strings.Join(args, " "), p.err.String())
		}
	})
	return p
}

// kill kills the process (SIGKILL) and waits for it.
func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

// poll calls cond every 5 ms until it holds or d has passed.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// chromium finds Debian's Chromium. Without it the test is skipped, but
// not in CI (CI=true), where it fails: there .ci/run installs it.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH, and CI=true: the browser test must run (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH (apt-get install chromium): the browser test is skipped")
	return ""
}

// browser starts a headless Chromium with a fresh profile and returns a
// tab's context. A JavaScript exception or dialog (an alert that a
// node's text might have smuggled in) fails the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", chromium(t), err)
	}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			t.Errorf("the page opened a JavaScript dialog: %q", ev.Message)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			t.Errorf("the page threw: %v", (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
		}
	}()
	return ctx
}

// waitPage waits up to d for the JavaScript expression to be true on the
// page and returns how long that took; it fails the test, with the
// page's text, if it is not.
func waitPage(t *testing.T, ctx context.Context, what, expr string, d time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(10*time.Millisecond), chromedp.WithPollingTimeout(d)))
	took := time.Since(t0)
	if err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("the page did not show %s within %v: %v\n---- page:\n%s", what, d, err, text)
	}
	return took
}

func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// screenshot saves a PNG of the element sel (the whole page for "") as
// name, in -shots DIR or the test's temporary directory.
func screenshot(t *testing.T, ctx context.Context, sel, name string) {
	t.Helper()
	var b []byte
	var err error
	if sel == "" {
		b, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	} else {
		b, err = chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	}
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := *shots
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", path, len(b))
}

// fileTime waits for the file a task writes when it ends ("date +%s.%N")
// and returns the time in it.
func fileTime(t *testing.T, path string, d time.Duration) time.Time {
	t.Helper()
	var at time.Time
	ok := poll(d, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		if err != nil {
			return false
		}
		at = time.Unix(0, int64(f*1e9))
		return true
	})
	if !ok {
		t.Fatalf("no %s within %v", path, d)
	}
	return at
}

// dashboardURL waits for the URL a dashboard prints.
func dashboardURL(t *testing.T, p *proc) string {
	t.Helper()
	var url string
	if !poll(20*time.Second, func() bool {
		out := p.out.String()
		i := strings.Index(out, "http://")
		if i < 0 {
			return false
		}
		url = strings.Fields(out[i:])[0]
		return true
	}) {
		t.Fatalf("the dashboard printed no URL:\n%s", p.err.String())
	}
	return url
}

// toggleRow opens or closes round id's row in the grid. It clicks in
// the page's script rather than with the mouse: rows move as rounds come
// and go, and a mouse click aimed before a move could open another row.
func toggleRow(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	if !eval[bool](t, ctx, fmt.Sprintf(`(() => { const td = document.querySelector('#grid tr.row[data-round=%q] td.id');
		if (td === null) return false; td.click(); return true; })()`, id)) {
		t.Fatalf("no row for round %s in the grid", id)
	}
}

// task records when each node's task starts and ends; it runs for a
// second, so that a poll sees it.
const task = `touch "$DIR/start-$CHAINSYNC_NODE-$CHAINSYNC_ROUND"; sleep 1; date +%s.%N > "$DIR/end-$CHAINSYNC_NODE-$CHAINSYNC_ROUND"`

// flightRows is a JavaScript test: round id's ladder on the page has n
// messages of wave w.
func flightRows(id string, w, n int) string {
	return fmt.Sprintf(`document.querySelectorAll('.flight[data-round=%q] tr[data-wave="%d"]').length === %d`, id, w, n)
}

// The dashboard in a real browser, against a real served 4-node chain
// A-B-C-D on loopback, C with --approve, the dashboard steering C:
//
//   - each of the draft's four waves (Protocol Operation, Phases 1-4)
//     shows on the page by the next poll after it happened, without a
//     reload: within dashboard.Every, plus the fetch and the drawing;
//   - approving at C from the page, with a reason, lets C's task start,
//     and the grid shows who approved and why; the reason, HTML, is
//     shown as its characters and runs nothing;
//   - a request the node refuses (a second hold) shows its reason;
//   - a killed node is shown as not answering, and back once restarted;
//   - the read-only page (no --control) has no buttons at all, and it
//     reconnects by itself when the dashboard comes back.
func TestDashboardInBrowser(t *testing.T) {
	ctx := browser(t)
	dir := t.TempDir()
	names := []string{"A", "B", "C", "D"}
	addrs := testnet.FreeAddrs(t, 8)
	var chain, statuses []string
	for i, n := range names {
		chain = append(chain, n+"="+addrs[i])
		statuses = append(statuses, addrs[4+i])
	}
	control := func(n string) string { return "unix:" + filepath.Join(dir, n+".sock") }
	args := func(i int) []string {
		a := []string{"run", "--chain", strings.Join(chain, ","), "--name", names[i], "--serve", "--heartbeat", "200ms",
			"--fault-policy", "wait", "--status-addr", statuses[i]}
		switch names[i] {
		case "A":
			a = append(a, "--control", control("A"))
		case "C":
			a = append(a, "--approve", "--control", control("C"))
		case "D":
			// D is ready for a round once the test says so, which
			// starts the start wave when the test chooses.
			a = append(a, "--ready-file", filepath.Join(dir, "ready-{round}"), "--ready-interval", "20ms")
		}
		return append(a, "--", "sh", "-c", task)
	}
	env := []string{"DIR=" + dir}
	nodes := map[string]*proc{}
	for i := len(names) - 1; i >= 0; i-- {
		nodes[names[i]] = start(t, names[i], env, args(i)...)
	}
	dash := start(t, "dashboard", nil, "dashboard", "--listen", "127.0.0.1:0", "--control", control("C"), "--node", "C",
		"--user", "ann", strings.Join(statuses, ","))
	url := dashboardURL(t, dash)
	open := func(id string) {
		t.Helper()
		p := start(t, "open "+id, nil, "open", "--control", control("A"), "--id", id)
		<-p.done
		if c := p.cmd.ProcessState.ExitCode(); c != 0 {
			t.Fatalf("chainsync open %s: exit %d: %s", id, c, p.err.String())
		}
	}
	ready := func(id string) time.Time {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "ready-"+id), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return time.Now()
	}
	// The bound on showing a change: the next poll, at most Every after
	// it, plus the fetch and the drawing on a busy machine.
	bound := dashboard.Every + 500*time.Millisecond
	latency := func(what string, since time.Time, expr string) {
		t.Helper()
		waitPage(t, ctx, what, expr, bound+5*time.Second)
		if took := time.Since(since); took > bound {
			t.Errorf("%s: on the page %v after it happened, want within %v", what, took.Round(time.Millisecond), bound)
		} else {
			t.Logf("%s: on the page %v after it happened", what, took.Round(time.Millisecond))
		}
	}

	do(t, ctx, "open the page", chromedp.Navigate(url))
	waitPage(t, ctx, "four nodes, all answering, live", `document.querySelectorAll('.box').length === 4 &&
		document.querySelectorAll('.box.down').length === 0 && document.getElementById('live').textContent === 'live'`, 20*time.Second)
	eval[bool](t, ctx, `window.notReloaded = true`)

	// Phase 1, the readiness wave: READY A->B->C->D; D is not ready yet.
	t0 := time.Now()
	open("w1")
	latency("the readiness wave (READY A->B->C->D)", t0, flightRows("w1", 1, 3)+
		` && document.querySelector('.flight[data-round="w1"] .words').textContent.includes('D is not locally ready')`)
	// Phase 2, the start wave: D gets ready, START D->C->B->A.
	latency("the start wave (START D->C->B->A)", ready("w1"), flightRows("w1", 2, 3))
	// Phase 3, the execution wave: A's task ends, COMPLETE A->B.
	latency("the execution wave (COMPLETE A->B)", fileTime(t, filepath.Join(dir, "end-A-w1"), 20*time.Second), flightRows("w1", 3, 1))
	// B's task ends; C waits for its approval.
	waitPage(t, ctx, "C waiting for approval, with approve and deny buttons",
		`!!document.querySelector('.flight[data-round="w1"] button[data-op="approve"]') &&
		 document.querySelector('.box[data-node="C"] .gate.approval') !== null`, 10*time.Second)
	screenshot(t, ctx, "", "dashboard-chain.png")
	if _, err := os.Stat(filepath.Join(dir, "start-C-w1")); err == nil {
		t.Fatal("C's task started before the approval")
	}

	// Approve from the page, with a reason that is HTML.
	reason := `<img src=x onerror=alert(1)>`
	do(t, ctx, "approve with a reason",
		chromedp.Click(chromedp.CSS(`.flight[data-round="w1"] button[data-op="approve"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#reason`)),
		chromedp.SendKeys(chromedp.CSS(`#reason`), reason),
		chromedp.Click(chromedp.CSS(`#ask-ok`)))
	waitPage(t, ctx, "the node's answer", `document.getElementById('msg').textContent.includes('approved round w1')`, 10*time.Second)
	if !poll(10*time.Second, func() bool { _, err := os.Stat(filepath.Join(dir, "start-C-w1")); return err == nil }) {
		t.Fatal("C's task did not start after the approval from the page")
	}
	// Open w1's row in the grid, to see its exit wave there once the
	// round is over (it leaves the rounds in flight).
	toggleRow(t, ctx, "w1")
	waitPage(t, ctx, "w1's row opened", `document.querySelector('#grid tr.detail table.ladder') !== null`, 5*time.Second)
	// Phase 4, the exit wave: D's task ends, COMPLETE D->C->B->A.
	latency("the exit wave (COMPLETE D->C->B->A)", fileTime(t, filepath.Join(dir, "end-D-w1"), 20*time.Second),
		`document.querySelectorAll('#grid tr.detail tr[data-wave="4"]').length === 3`)
	note := `approved at C by ann (` + reason + `)`
	waitPage(t, ctx, "who approved, in the grid, as text",
		fmt.Sprintf(`(() => { const n = document.querySelector('#grid tr.row[data-round="w1"] td:nth-child(4) .note');
		  return n !== null && n.textContent === %q && n.children.length === 0; })()`, note), 10*time.Second)
	if n := eval[int](t, ctx, `document.querySelectorAll('img').length`); n != 0 {
		t.Fatalf("the page has %d img elements: a node's text was taken as HTML", n)
	}
	waitPage(t, ctx, "the approval among the steering events", fmt.Sprintf(
		`[...document.querySelectorAll('#events li')].some((li) => li.textContent.includes(%q))`, reason+"), by ann"), 5*time.Second)

	// A request the node refuses shows why: a second hold.
	hold := func() {
		t.Helper()
		do(t, ctx, "hold C",
			chromedp.Click(chromedp.CSS(`.box[data-node="C"] button[data-op="hold"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#reason`)),
			chromedp.SendKeys(chromedp.CSS(`#reason`), "change window"),
			chromedp.Click(chromedp.CSS(`#ask-ok`)))
	}
	eval[bool](t, ctx, `(document.getElementById('msg').textContent = '', true)`)
	hold()
	waitPage(t, ctx, "C held", `document.getElementById('msg').textContent.startsWith('hold: held') &&
		document.querySelector('.box[data-node="C"] .gate.hold') !== null`, 10*time.Second)
	hold()
	waitPage(t, ctx, "the refusal of a second hold, with its reason", `document.getElementById('msg').className === 'bad' &&
		document.getElementById('msg').textContent.startsWith('hold: refused: ')`, 10*time.Second)
	t.Logf("refused on the page: %s", eval[string](t, ctx, `document.getElementById('msg').textContent`))
	do(t, ctx, "release C",
		chromedp.Click(chromedp.CSS(`.box[data-node="C"] button[data-op="release"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#reason`)),
		chromedp.Click(chromedp.CSS(`#ask-ok`)))
	waitPage(t, ctx, "C released", `document.querySelector('.box[data-node="C"] .gate.hold') === null`, 10*time.Second)

	// Two more rounds for the grid: w2 denied at C from the page (A and B
	// ran, C failed, D not reached), w3 approved.
	for _, id := range []string{"w2", "w3"} {
		open(id)
		ready(id)
		op, why := "approve", "checked"
		if id == "w2" {
			op, why = "deny", "row count is 0"
		}
		do(t, ctx, op+" "+id,
			chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`.flight[data-round=%q] button[data-op=%q]`, id, op))),
			chromedp.Click(chromedp.CSS(fmt.Sprintf(`.flight[data-round=%q] button[data-op=%q]`, id, op))),
			chromedp.WaitVisible(chromedp.CSS(`#reason`)),
			chromedp.SendKeys(chromedp.CSS(`#reason`), why),
			chromedp.Click(chromedp.CSS(`#ask-ok`)))
		want := "done"
		if id == "w2" {
			want = "failed"
		}
		waitPage(t, ctx, id+" "+want+" in the grid", fmt.Sprintf(
			`(() => { const r = document.querySelector('#grid tr.row[data-round=%q] td.outcome'); return r !== null && r.textContent === %q; })()`, id, want), 20*time.Second)
	}
	cells := eval[string](t, ctx, `[...document.querySelectorAll('#grid tr.row[data-round="w2"] td.cell')].map((c) => c.dataset.outcome).join(' ')`)
	if cells != "done done failed not-reached" {
		t.Errorf("w2's cells: %s, want done done failed not-reached", cells)
	}
	toggleRow(t, ctx, "w1")
	toggleRow(t, ctx, "w2")
	waitPage(t, ctx, "w2's row opened, saying why it failed", `[...document.querySelectorAll('#grid tr.detail p.text')].some((p) =>
		p.textContent.startsWith('failed at C (task-failed)') && p.textContent.includes('row count is 0')) &&
		document.querySelectorAll('#grid tr.detail tr[data-wave="3"]').length === 2`, 5*time.Second)
	screenshot(t, ctx, "#sec-grid", "dashboard-grid.png")

	// A killed node is shown as not answering, and back once restarted.
	nodes["D"].kill()
	waitPage(t, ctx, "D not answering", `(() => { const b = document.querySelector('.box[data-node="D"]');
		return b !== null && b.classList.contains('down') && b.textContent.includes('does not answer'); })()`, 10*time.Second)
	nodes["D"] = start(t, "D again", env, args(3)...)
	waitPage(t, ctx, "D answering again", `(() => { const b = document.querySelector('.box[data-node="D"]');
		return b !== null && !b.classList.contains('down'); })()`, 20*time.Second)
	if !eval[bool](t, ctx, `window.notReloaded === true`) {
		t.Fatal("the page was reloaded")
	}

	// The read-only page: the same chain, no buttons at all.
	ro := start(t, "read-only dashboard", nil, "dashboard", "--listen", ":0", strings.Join(statuses, ","))
	do(t, ctx, "open the read-only page", chromedp.Navigate(dashboardURL(t, ro)))
	waitPage(t, ctx, "the read-only page with its nodes and the three rounds",
		`document.querySelectorAll('.box').length === 4 && document.querySelectorAll('#grid tr.row').length >= 3 &&
		 document.getElementById('who').textContent === 'read-only'`, 20*time.Second)
	if n := eval[int](t, ctx, `document.querySelectorAll('button, dialog, input').length`); n != 0 {
		t.Fatalf("the read-only page has %d buttons, dialogs or inputs", n)
	}

	// The page reconnects by itself: the dashboard stops, the page says
	// so, and once it is back on the same address the page is live again,
	// not reloaded.
	eval[bool](t, ctx, `window.notReloaded = true`)
	roURL := dashboardURL(t, ro)
	ro.kill()
	waitPage(t, ctx, "the page saying it lost the dashboard", `document.getElementById('live').textContent === 'reconnecting…'`, 10*time.Second)
	listen := strings.TrimSuffix(strings.TrimPrefix(roURL, "http://"), "/")
	ro = start(t, "read-only dashboard again", nil, "dashboard", "--listen", listen, strings.Join(statuses, ","))
	dashboardURL(t, ro)
	waitPage(t, ctx, "the page live again", `document.getElementById('live').textContent === 'live' &&
		document.querySelectorAll('.box').length === 4`, 20*time.Second)
	if !eval[bool](t, ctx, `window.notReloaded === true`) {
		t.Fatal("the read-only page was reloaded")
	}
}
