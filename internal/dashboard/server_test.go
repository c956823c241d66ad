package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/chainsync-go/chainsync/internal/status"
)

// fakeSteerer records the requests that reach the control socket.
type fakeSteerer struct {
	mu   sync.Mutex
	reqs []Request
	err  error
}

func (f *fakeSteerer) Steer(_ context.Context, r Request) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, r)
	if f.err != nil {
		return "", f.err
	}
	return r.Op + " taken", nil
}

func (f *fakeSteerer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// chainDocs is a 4-node chain A..D with round r1 at the given states.
func chainDocs(now time.Time, states ...string) []status.Node {
	names := []string{"A", "B", "C", "D"}
	roles := []string{"head", "middle", "middle", "tail"}
	var nodes []status.Node
	for i, n := range names {
		d := &status.Doc{Name: n, Role: roles[i], Version: "test", Time: now, Rounds: []status.Round{}, Faults: []status.Fault{}, Finished: []status.Finished{}}
		d.Links.Pred = status.Link{Exists: i > 0, Up: true}
		d.Links.Succ = status.Link{Exists: i < 3, Up: true}
		if i > 0 {
			d.Links.Pred.Peer = names[i-1]
		}
		if i < 3 {
			d.Links.Succ.Peer = names[i+1]
		}
		if i < len(states) && states[i] != "" {
			d.Rounds = append(d.Rounds, status.Round{Round: "r1", State: states[i], Since: now})
		}
		nodes = append(nodes, status.Node{Addr: "127.0.0.1:900" + string(rune('0'+i)), Doc: d})
	}
	return nodes
}

// chainAddrs are chainDocs's status addresses.
var chainAddrs = []string{"127.0.0.1:9000", "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"}

// docOf returns the document of the node at addr.
func docOf(nodes []status.Node, addr string) (*status.Doc, error) {
	for _, n := range nodes {
		if n.Addr == addr {
			return n.Doc, nil
		}
	}
	return nil, errors.New("no node at " + addr)
}

// steerServer is a dashboard steering C, after one poll.
func steerServer(t *testing.T) (*Server, *fakeSteerer) {
	t.Helper()
	p := NewPoller(nil, nil, time.Second, "C", "ann")
	p.take(chainDocs(time.Now(), "READY", "READY", "READY", "WATCH"), time.Now())
	st := &fakeSteerer{}
	return NewServer(p, st, "ann", true), st
}

func post(t *testing.T, h http.Handler, body string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:3100/steer", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// A steering request changes something only if it comes from the page
// the dashboard served (its token) at its own origin: without the token,
// with a wrong one, or from another origin it is refused with 403 and
// never reaches the node's control socket (docs/STEERING.md: a hold or an
// approval is a person's decision, not a web page's; the draft's Security
// Considerations: only trusted parties may act on the chain).
func TestSteerNeedsPageTokenAndOrigin(t *testing.T) {
	s, st := steerServer(t)
	h := s.Handler()
	body := `{"op":"hold","reason":"change window"}`
	origin := "http://127.0.0.1:3100"
	for _, c := range []struct {
		what string
		hdr  map[string]string
	}{
		{"no token", map[string]string{"Origin": origin}},
		{"a wrong token", map[string]string{"Origin": origin, TokenHeader: strings.Repeat("0", 64)}},
		{"another origin", map[string]string{"Origin": "http://evil.example", TokenHeader: s.token}},
		{"another site", map[string]string{"Origin": origin, TokenHeader: s.token, "Sec-Fetch-Site": "cross-site"}},
	} {
		if w := post(t, h, body, c.hdr); w.Code != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", c.what, w.Code, w.Body)
		}
	}
	if n := st.count(); n != 0 {
		t.Fatalf("%d refused requests reached the control socket", n)
	}
	// GET changes nothing: only POST steers.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:3100/steer?op=hold", nil))
	if w.Code != http.StatusMethodNotAllowed || st.count() != 0 {
		t.Fatalf("GET /steer: %d, %d requests sent", w.Code, st.count())
	}
	// With the token, a request that names no origin (not a browser's)
	// goes through too.
	if w := post(t, h, `{"op":"hold","reason":"from a script"}`, map[string]string{TokenHeader: s.token}); w.Code != http.StatusOK || st.count() != 1 {
		t.Fatalf("the token without an Origin: %d %s, %d sent", w.Code, w.Body, st.count())
	}
	st.mu.Lock()
	st.reqs = nil
	st.mu.Unlock()
	// The page's own request goes through, as --user.
	w = post(t, h, body, map[string]string{"Origin": origin, TokenHeader: s.token})
	if w.Code != http.StatusOK || st.count() != 1 {
		t.Fatalf("the page's request: %d %s, %d sent", w.Code, w.Body, st.count())
	}
	if r := st.reqs[0]; r.Op != "hold" || r.By != "ann" || r.Reason != "change window" {
		t.Fatalf("sent %+v", r)
	}
	// What the node does not take (C is not the Head) is refused here.
	if w := post(t, h, `{"op":"pause"}`, map[string]string{"Origin": origin, TokenHeader: s.token}); w.Code != http.StatusBadRequest || st.count() != 1 {
		t.Fatalf("pause at a middle node: %d %s", w.Code, w.Body)
	}
	// A request the node refuses says why.
	st.err = &RefusedError{Reason: "not held"}
	if w := post(t, h, `{"op":"release"}`, map[string]string{"Origin": origin, TokenHeader: s.token}); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "refused: not held") {
		t.Fatalf("refused release: %d %s", w.Code, w.Body)
	}
}

// A read-only dashboard has no token on its page and refuses every POST
// (the draft's Security Considerations).
func TestReadOnlyRefusesSteering(t *testing.T) {
	p := NewPoller(nil, nil, time.Second, "", "ann")
	p.take(chainDocs(time.Now()), time.Now())
	s := NewServer(p, nil, "ann", true)
	h := s.Handler()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:3100/", nil))
	if w.Code != http.StatusOK || strings.Contains(w.Body.String(), s.token) {
		t.Fatalf("read-only page: %d, token on it: %t", w.Code, strings.Contains(w.Body.String(), s.token))
	}
	if w := post(t, h, `{"op":"hold"}`, map[string]string{"Origin": "http://127.0.0.1:3100", TokenHeader: s.token}); w.Code != http.StatusForbidden {
		t.Fatalf("POST to a read-only dashboard: %d", w.Code)
	}
}

// A loopback dashboard answers only requests for a loopback host, so a
// web page whose DNS name is rebound to 127.0.0.1 cannot read it (nor
// its token). The draft's Security Considerations.
func TestLoopbackRefusesOtherHosts(t *testing.T) {
	s, _ := steerServer(t)
	h := s.Handler()
	for host, want := range map[string]int{"127.0.0.1:3100": 200, "localhost:3100": 200, "[::1]:3100": 200, "evil.example:3100": 403} {
		req := httptest.NewRequest(http.MethodGet, "http://"+host+"/", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != want {
			t.Errorf("Host %s: %d, want %d", host, w.Code, want)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("Host %s: Content-Security-Policy %q", host, csp)
		}
	}
}

// --listen :PORT is loopback, as the default is; any other host is not
// (the draft's Security Considerations).
func TestListenAddr(t *testing.T) {
	for in, want := range map[string]struct {
		addr     string
		loopback bool
	}{
		":3100":          {"127.0.0.1:3100", true},
		"127.0.0.1:3100": {"127.0.0.1:3100", true},
		"[::1]:3100":     {"[::1]:3100", true},
		"localhost:3100": {"localhost:3100", true},
		"0.0.0.0:3100":   {"0.0.0.0:3100", false},
		"10.0.0.5:3100":  {"10.0.0.5:3100", false},
		"[::]:3100":      {"[::]:3100", false},
	} {
		addr, lo, err := ListenAddr(in)
		if err != nil || addr != want.addr || lo != want.loopback {
			t.Errorf("ListenAddr(%q) = %q, %t, %v; want %q, %t", in, addr, lo, err, want.addr, want.loopback)
		}
	}
	if _, _, err := ListenAddr("3100"); err == nil {
		t.Error("ListenAddr(\"3100\") took a port without a colon")
	}
}

// streamRecorder is a ResponseWriter for an event stream: each write
// arrives on ch.
type streamRecorder struct {
	h  http.Header
	ch chan string
}

func (s *streamRecorder) Header() http.Header { return s.h }
func (s *streamRecorder) WriteHeader(int)     {}
func (s *streamRecorder) Flush()              {}
func (s *streamRecorder) Write(p []byte) (int, error) {
	s.ch <- string(p)
	return len(p), nil
}

// next returns the next data event, skipping other lines; "" if none has
// been written.
func (s *streamRecorder) next() string {
	for {
		select {
		case w := <-s.ch:
			if d, ok := strings.CutPrefix(w, "data: "); ok {
				return d
			}
		default:
			return ""
		}
	}
}

// The page learns of a change within a second, without asking: the
// poller reads the nodes once a second and the event stream sends the new
// view at once. Here the Tail enters READY and sends START back (the
// draft's Phase 2, the start wave) just after a poll; the event that says
// so is out by the next poll, one second later, and not before. The
// clock is synctest's.
func TestEventStreamSendsChangeWithinASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		states := []string{"READY", "READY", "READY", "SYNC"}
		polls := 0
		fetch := func(_ context.Context, addr string) (*status.Doc, error) {
			mu.Lock()
			defer mu.Unlock()
			if addr == chainAddrs[0] {
				polls++
			}
			return docOf(chainDocs(time.Now(), states...), addr)
		}
		p := NewPoller(chainAddrs, fetch, time.Second, "", "ann")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go p.Run(ctx)
		s := NewServer(p, nil, "ann", true)
		rec := &streamRecorder{h: http.Header{}, ch: make(chan string, 64)}
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:3100/events", nil)
		go s.Handler().ServeHTTP(rec, req)
		synctest.Wait()
		first := rec.next()
		if !strings.Contains(first, `"states":["READY","READY","READY","SYNC"]`) {
			t.Fatalf("first event: %s", first)
		}
		mu.Lock()
		states[3], states[2] = "WATCH", "WATCH" // D sent START to C, C to B
		mu.Unlock()
		time.Sleep(Every - time.Millisecond)
		synctest.Wait()
		if e := rec.next(); e != "" {
			t.Fatalf("an event before the next poll: %s", e)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		e := rec.next()
		if !strings.Contains(e, `"states":["READY","READY","WATCH","WATCH"]`) || !strings.Contains(e, `"cmd":"START"`) {
			t.Fatalf("no event with the start wave one second after the change: %q", e)
		}
		mu.Lock()
		if polls != 2 {
			t.Errorf("%d polls in one second, want 2 (at once, then after a second)", polls)
		}
		mu.Unlock()
		cancel()
		synctest.Wait()
	})
}

// However many pages are open, each node is asked once a second: the
// pages share the poller. (The draft: a node's work is its task and its
// two links; watching it must cost it next to nothing.)
func TestOnePollerForEveryPage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		polls := 0
		fetch := func(_ context.Context, addr string) (*status.Doc, error) {
			mu.Lock()
			defer mu.Unlock()
			polls++
			return docOf(chainDocs(time.Now(), "READY"), addr)
		}
		p := NewPoller(chainAddrs, fetch, time.Second, "", "ann")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go p.Run(ctx)
		s := NewServer(p, nil, "ann", true)
		recs := make([]*streamRecorder, 20)
		for i := range recs {
			recs[i] = &streamRecorder{h: http.Header{}, ch: make(chan string, 64)}
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:3100/events", nil)
			go s.Handler().ServeHTTP(recs[i], req)
		}
		time.Sleep(10*Every - time.Millisecond)
		synctest.Wait()
		mu.Lock()
		got := polls
		mu.Unlock()
		if got != 10*len(chainAddrs) {
			t.Fatalf("%d requests in 10 s to %d nodes with 20 pages open, want %d", got, len(chainAddrs), 10*len(chainAddrs))
		}
		for i, r := range recs {
			if r.next() == "" {
				t.Fatalf("page %d got no event", i)
			}
		}
		cancel()
		synctest.Wait()
	})
}

// A node that hangs (its status endpoint accepts and never answers: the
// draft's "a node in the chain hangs during processing") does not hold up
// the page: the others' changes still come by the next poll, the hung
// node keeps its last answer until its request times out and is then
// shown not answering, and it has one request out at a time.
func TestHungNodeDoesNotHoldUpThePage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		states := []string{"READY", "READY", "READY", "SYNC"}
		hung, asked := false, 0
		fetch := func(ctx context.Context, addr string) (*status.Doc, error) {
			mu.Lock()
			if addr == chainAddrs[1] {
				asked++
				if hung {
					mu.Unlock()
					<-ctx.Done()
					return nil, ctx.Err()
				}
			}
			defer mu.Unlock()
			return docOf(chainDocs(time.Now(), states...), addr)
		}
		p := NewPoller(chainAddrs, fetch, 3*Every, "", "ann")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go p.Run(ctx)
		synctest.Wait()
		mu.Lock()
		hung = true
		states[3], states[2] = "WATCH", "WATCH"
		mu.Unlock()
		time.Sleep(Every + Grace)
		synctest.Wait()
		v, _ := p.Latest()
		if !strings.Contains(string(v), `"states":["READY","READY","WATCH","WATCH"]`) {
			t.Fatalf("the others' change is not in the view by the next poll and its grace: %s", v)
		}
		if strings.Contains(string(v), `"answers":false`) {
			t.Fatalf("B shown not answering before its request timed out: %s", v)
		}
		time.Sleep(3*Every - Grace)
		synctest.Wait()
		v, _ = p.Latest()
		if !strings.Contains(string(v), `"label":"B","addr":"127.0.0.1:9001","answers":false`) {
			t.Fatalf("B not shown as not answering after its timeout: %s", v)
		}
		mu.Lock()
		if asked != 2 { // at 0 s, and at 1 s, a request out until 4 s: not at 2 s and 3 s
			t.Errorf("B was asked %d times in 4 s, want 2: one request out at a time", asked)
		}
		mu.Unlock()
		cancel()
		synctest.Wait()
	})
}

// The page asks for a row's ladder when it opens the row: the views stay
// small with many rounds (the draft's message ladder, 4(n-1) per round).
func TestLadderOnDemand(t *testing.T) {
	s, _ := steerServer(t)
	h := s.Handler()
	for q, want := range map[string]int{"?round=r1": 200, "?round=nope": 404, "": 400} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:3100/ladder"+q, nil))
		if w.Code != want {
			t.Errorf("GET /ladder%s: %d, want %d", q, w.Code, want)
		}
		if want == 200 && !strings.Contains(w.Body.String(), `"cmd":"READY"`) {
			t.Errorf("GET /ladder%s: %s", q, w.Body)
		}
	}
	v, _ := s.poller.Latest()
	var view struct {
		Grid struct{ Rows []map[string]any }
	}
	if err := json.Unmarshal(v, &view); err != nil || len(view.Grid.Rows) != 1 {
		t.Fatalf("view: %v, %s", err, v)
	}
	if row := view.Grid.Rows[0]; row["ladder"] != nil || row["msgs"] != 4.0 {
		t.Fatalf("the row carries its ladder, or not its length: %v", row)
	}
}
