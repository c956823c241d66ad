package status_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/chaintest"
	"github.com/chainsync-go/chainsync/internal/status"
	"github.com/chainsync-go/chainsync/protocol"
)

// served is a chain whose every node has metrics and a status endpoint.
type served struct {
	nodes []*chainsync.Node
	addrs []string // each node's status address
}

// startServed starts an n-node chain over loopback TCP, each node with a
// Metrics hook and a real HTTP status endpoint; hook adjusts configs.
func startServed(t *testing.T, n int, hook func(i int, cfg *chainsync.Config)) served {
	t.Helper()
	var s served
	metrics := make([]*status.Metrics, n)
	s.nodes = chaintest.Start(t, n, func(i int, cfg *chainsync.Config) {
		if hook != nil {
			hook(i, cfg)
		}
		metrics[i] = status.NewMetrics(roleOf(i, n), "test", runtime.Version())
		cfg.Trace = metrics[i].Observe
	})
	for i, nd := range s.nodes {
		ln, err := status.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := status.Serve(ln, status.Handler(nd.Snapshot, metrics[i], "test"))
		t.Cleanup(func() { srv.Close() })
		s.addrs = append(s.addrs, ln.Addr().String())
	}
	return s
}

func get(t *testing.T, url string) (string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), resp.Header
}

// scrape reads and strictly parses every node's /metrics.
func scrape(t *testing.T, s served) []exposition {
	t.Helper()
	var out []exposition
	for i, a := range s.addrs {
		body, h := get(t, "http://"+a+"/metrics")
		if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
			t.Errorf("node %d: Content-Type %q", i, ct)
		}
		e, err := parseExposition(body)
		if err != nil {
			t.Fatalf("node %d: /metrics does not parse: %v\n%s", i, err, body)
		}
		out = append(out, e)
	}
	return out
}

// msgTotals sums chainsync_messages_total over the chain, per direction
// and command.
func msgTotals(es []exposition) map[string]float64 {
	m := map[string]float64{}
	for _, e := range es {
		for _, dir := range []string{"sent", "received"} {
			for _, cmd := range []string{"READY", "START", "COMPLETE"} {
				m[dir+" "+cmd] += e.get("chainsync_messages_total", "direction", dir, "command", cmd)
			}
		}
	}
	return m
}

// Draft section "Protocol Flow": metrics scraped from a real 4-node chain
// while the Tail's task runs show exactly what has happened so far: the
// READY wave, the START wave and the COMPLETE trigger wave, n-1 messages
// each, all sent and received, 3(n-1) in all; after the round, 4(n-1), the
// exit wave's n-1 COMPLETE added.
func TestMetricsRealChain(t *testing.T) {
	const n = 4
	tailRunning := make(chan struct{})
	release := make(chan struct{})
	s := startServed(t, n, func(i int, cfg *chainsync.Config) {
		if i == n-1 {
			cfg.Task = func(ctx context.Context, _ string) error {
				close(tailRunning)
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
	})
	for _, nd := range s.nodes {
		if err := nd.Ready(""); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-tailRunning:
	case <-time.After(20 * time.Second):
		t.Fatal("the Tail's task never started")
	}
	es := scrape(t, s)
	got := msgTotals(es)
	total := 0.0
	for _, dir := range []string{"sent", "received"} {
		for _, cmd := range []string{"READY", "START", "COMPLETE"} {
			if got[dir+" "+cmd] != n-1 {
				t.Errorf("while the Tail's task runs: %s %s = %v, want n-1 = %d", dir, cmd, got[dir+" "+cmd], n-1)
			}
			if dir == "sent" {
				total += got[dir+" "+cmd]
			}
		}
	}
	if total != 3*(n-1) {
		t.Errorf("while the Tail's task runs: %v messages sent, want 3(n-1) = %d", total, 3*(n-1))
	}
	for i, e := range es {
		if v := e.get("chainsync_rounds_in_progress"); v != 1 {
			t.Errorf("node %d: rounds_in_progress %v, want 1", i, v)
		}
		wantTasks := 1.0
		if i == n-1 {
			wantTasks = 0 // still running
		}
		if v := e.get("chainsync_task_duration_seconds_count"); v != wantTasks {
			t.Errorf("node %d: task_duration_seconds_count %v, want %v", i, v, wantTasks)
		}
		if v := e.get("chainsync_rounds_total", "outcome", "done"); v != 0 {
			t.Errorf("node %d: rounds_total{done} %v before the round ended", i, v)
		}
		checkLinks(t, i, n, e)
	}

	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, nd := range s.nodes {
		if res, err := nd.Wait(ctx, ""); err != nil || res.Status != chainsync.StatusDone {
			t.Fatalf("node %d: %v %v", i, res.Status, err)
		}
		// Wait returns as the round ends, while the node still holds its
		// lock to report it; Snapshot takes the lock, so after it every
		// trace event of the round has been observed.
		nd.Snapshot()
	}
	es = scrape(t, s)
	got = msgTotals(es)
	want := map[string]float64{"READY": n - 1, "START": n - 1, "COMPLETE": 2 * (n - 1)}
	total = 0
	for _, dir := range []string{"sent", "received"} {
		for cmd, w := range want {
			if got[dir+" "+cmd] != w {
				t.Errorf("after the round: %s %s = %v, want %v", dir, cmd, got[dir+" "+cmd], w)
			}
			if dir == "sent" {
				total += got[dir+" "+cmd]
			}
		}
	}
	if total != 4*(n-1) {
		t.Errorf("after the round: %v messages sent, want 4(n-1) = %d", total, 4*(n-1))
	}
	for i, e := range es {
		for _, c := range []struct {
			name   string
			labels []string
			want   float64
		}{
			{"chainsync_rounds_total", []string{"outcome", "done"}, 1},
			{"chainsync_rounds_total", []string{"outcome", "task-failed"}, 0},
			{"chainsync_rounds_total", []string{"outcome", "fault"}, 0},
			{"chainsync_rounds_total", []string{"outcome", "stopped"}, 0},
			{"chainsync_rounds_in_progress", nil, 0},
			{"chainsync_round_duration_seconds_count", nil, 1},
			{"chainsync_task_duration_seconds_count", nil, 1},
			{"chainsync_faults_total", []string{"kind", "peer-silent"}, 0},
			{"chainsync_faults_total", []string{"kind", "task-failed"}, 0},
			{"chainsync_build_info", []string{"version", "test", "goversion", runtime.Version()}, 1},
		} {
			if v := e.get(c.name, c.labels...); v != c.want {
				t.Errorf("node %d: %s%v = %v, want %v", i, c.name, c.labels, v, c.want)
			}
		}
		if d := e.get("chainsync_task_duration_seconds_sum"); i == n-1 && !(d > 0) {
			t.Errorf("Tail: task_duration_seconds_sum %v, want > 0", d)
		}
		for _, typ := range []struct{ name, typ string }{
			{"chainsync_messages_total", "counter"}, {"chainsync_rounds_in_progress", "gauge"},
			{"chainsync_round_duration_seconds", "histogram"}, {"chainsync_task_duration_seconds", "histogram"},
			{"chainsync_link_up", "gauge"}, {"chainsync_reconnects_total", "counter"},
			{"chainsync_violations_total", "counter"}, {"chainsync_faults_total", "counter"},
			{"chainsync_build_info", "gauge"},
		} {
			if e.types[typ.name] != typ.typ {
				t.Errorf("node %d: %s has type %q, want %s", i, typ.name, e.types[typ.name], typ.typ)
			}
		}
	}
}

// checkLinks: every link a node has is up, none reconnected, none
// violated; a side the node does not have is not reported.
func checkLinks(t *testing.T, i, n int, e exposition) {
	t.Helper()
	for _, side := range []string{"pred", "succ"} {
		has := side == "pred" && i > 0 || side == "succ" && i < n-1
		for _, m := range []struct {
			name string
			want float64
		}{{"chainsync_link_up", 1}, {"chainsync_reconnects_total", 0}, {"chainsync_violations_total", 0}} {
			v := e.get(m.name, "side", side)
			if has && v != m.want || !has && !math.IsNaN(v) {
				t.Errorf("node %d: %s{side=%s} = %v (has that side: %v)", i, m.name, side, v, has)
			}
		}
	}
}

// Draft section "Error Handling": a failed task counts as a task-failed
// round and a task-failed fault at that node; rounds cut short by closing
// the node count as stopped.
func TestMetricsFaultsAndStops(t *testing.T) {
	s := startServed(t, 2, func(i int, cfg *chainsync.Config) {
		if i == 1 {
			cfg.Task = func(context.Context, string) error { return errors.New("disk full") }
		}
	})
	for _, nd := range s.nodes {
		if err := nd.Ready(""); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if res, _ := s.nodes[1].Wait(ctx, ""); res.Status != chainsync.StatusTaskFailed {
		t.Fatalf("B: %v, want task failed", res.Status)
	}
	s.nodes[1].Snapshot() // every trace event of the round observed (see TestMetricsRealChain)
	e := scrape(t, s)[1]
	if v := e.get("chainsync_rounds_total", "outcome", "task-failed"); v != 1 {
		t.Errorf("B: rounds_total{task-failed} %v, want 1", v)
	}
	if v := e.get("chainsync_faults_total", "kind", "task-failed"); v != 1 {
		t.Errorf("B: faults_total{task-failed} %v, want 1", v)
	}
	if v := e.get("chainsync_rounds_in_progress"); v != 0 {
		t.Errorf("B: rounds_in_progress %v, want 0", v)
	}
	s.nodes[0].Close()
	e = scrape(t, s)[0]
	if v := e.get("chainsync_rounds_total", "outcome", "stopped"); v != 1 {
		t.Errorf("A after Close: rounds_total{stopped} %v, want 1", v)
	}
}

// The /status document has the fields the issue names, for a middle node
// waiting for an earlier task; /healthz answers ok.
func TestStatusDocument(t *testing.T) {
	const n = 3
	headRunning := make(chan struct{})
	release := make(chan struct{})
	s := startServed(t, n, func(i int, cfg *chainsync.Config) {
		if i == 0 {
			cfg.Task = func(ctx context.Context, _ string) error {
				close(headRunning)
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil
			}
		}
	})
	defer close(release)
	for _, nd := range s.nodes {
		if err := nd.Ready(""); err != nil {
			t.Fatal(err)
		}
	}
	<-headRunning
	body, _ := get(t, "http://"+s.addrs[1]+"/status")
	var raw map[string]any
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatalf("/status is not JSON: %v\n%s", err, body)
	}
	for _, k := range []string{"name", "role", "links", "rounds", "faults"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("/status has no %q: %s", k, body)
		}
	}
	links := raw["links"].(map[string]any)
	for _, side := range []string{"pred", "succ"} {
		l, _ := links[side].(map[string]any)
		if l["up"] != true || l["peer"] == "" {
			t.Errorf("links.%s = %v, want up with a peer", side, l)
		}
		// Both of B's neighbours have spoken: A its READY, C its START.
		if heard, ok := l["last_heard"].(string); !ok {
			t.Errorf("links.%s has no last_heard: %v", side, l)
		} else if _, err := time.Parse(time.RFC3339Nano, heard); err != nil {
			t.Errorf("links.%s.last_heard: %v", side, err)
		}
	}
	rounds := raw["rounds"].([]any)
	if len(rounds) != 1 {
		t.Fatalf("rounds %v, want one", rounds)
	}
	r := rounds[0].(map[string]any)
	for k, want := range map[string]any{"round": "", "state": "WATCH", "waiting_for": "COMPLETE", "from": "pred"} {
		if r[k] != want {
			t.Errorf("rounds[0].%s = %v, want %v (%s)", k, r[k], want, body)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, r["since"].(string)); err != nil {
		t.Errorf("rounds[0].since: %v", err)
	}
	if raw["name"] != "B" || raw["role"] != "middle" {
		t.Errorf("name %v role %v, want B middle", raw["name"], raw["role"])
	}
	if h, _ := get(t, "http://"+s.addrs[1]+"/healthz"); h != "ok\n" {
		t.Errorf("/healthz: %q", h)
	}
	// And chainsync status's reading of the chain: the Head holds the
	// round, running its task.
	var nodes []status.Node
	for _, a := range s.addrs {
		d, err := status.Fetch(context.Background(), http.DefaultClient, a)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, status.Node{Addr: a, Doc: &d})
	}
	v := status.Diagnose(nodes)
	if len(v) != 1 || v[0].Node != "A" || v[0].WaitingFor != status.WaitTask {
		t.Errorf("Diagnose: %+v, want the round held up at A, running its task", v)
	}
}

// Fetch reports a node that is not there, or that is not a chainsync
// status endpoint, in words.
func TestFetchErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := status.Fetch(context.Background(), http.DefaultClient, addr); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("closed port: %v, want connection refused", err)
	}
	if _, err := status.Fetch(context.Background(), http.DefaultClient, "no-port"); err == nil || !strings.Contains(err.Error(), "HOST:PORT") {
		t.Errorf("bad address: %v", err)
	}
}

func roleOf(i, n int) protocol.Role { return protocol.RoleOf(i > 0, i < n-1) }
