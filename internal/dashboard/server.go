package dashboard

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

//go:embed web
var web embed.FS

var page = template.Must(template.ParseFS(web, "web/index.html"))

// Request is one steering request from the page, sent to the steered
// node's control socket as chainsync hold, approve, open ... send theirs.
type Request struct {
	Op       string // hold, release, approve, deny, pause, resume, cancel, open, retry
	Round    string // the round (approve, deny, cancel, retry; open: the new round's id)
	HasRound bool
	Reason   string
	By       string // who asks: the dashboard's --user
}

// Steerer sends a steering request to the node's control socket and
// returns what the node said it did. A request the node refused is a
// *RefusedError carrying its reason.
type Steerer interface {
	Steer(ctx context.Context, req Request) (string, error)
}

// RefusedError is a steering request the node refused.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "refused: " + e.Reason }

// TokenHeader carries the page's token on a steering POST.
const TokenHeader = "X-Chainsync-Token"

// maxStreams bounds the event streams served at once; more pages get 503.
const maxStreams = 64

// Server serves the page, its event stream and its steering requests.
type Server struct {
	poller *Poller
	steer  Steerer // nil: read-only
	user   string
	token  string
	// loopback: the dashboard listens on loopback only, so a request
	// naming another host (a DNS name rebound to 127.0.0.1 by a web
	// page) is refused.
	loopback bool
	streams  chan struct{}
}

// NewServer returns the Server of p's views; st steers the node as user,
// nil for a read-only page. loopback says the dashboard listens on
// loopback only.
func NewServer(p *Poller, st Steerer, user string, loopback bool) *Server {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return &Server{poller: p, steer: st, user: user, token: hex.EncodeToString(b), loopback: loopback,
		streams: make(chan struct{}, maxStreams)}
}

// Handler returns the dashboard's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("GET /app.js", s.asset("web/app.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /app.css", s.asset("web/app.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /events", s.events)
	mux.HandleFunc("GET /view", s.viewJSON)
	mux.HandleFunc("GET /ladder", s.ladder)
	mux.HandleFunc("POST /steer", s.steerPost)
	return s.guard(mux)
}

// guard sets the headers every answer carries and refuses a request for
// another host on a loopback dashboard.
func (s *Server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		// Only this page's own script and style, no frames, no forms.
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cache-Control", "no-store")
		if s.loopback && !loopbackHost(r.Host) {
			http.Error(w, "this dashboard answers only at a loopback address (127.0.0.1, [::1] or localhost)", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a request's Host names this machine.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	data := struct{ Token string }{}
	if s.steer != nil {
		data.Token = s.token
	}
	var b bytes.Buffer
	if err := page.Execute(&b, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(b.Bytes())
}

func (s *Server) asset(name, ctype string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := web.ReadFile(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", ctype)
		_, _ = w.Write(b)
	}
}

func (s *Server) viewJSON(w http.ResponseWriter, r *http.Request) {
	v, _ := s.poller.Latest()
	if v == nil {
		http.Error(w, "no poll yet", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(v)
}

// ladder serves the ladder of one row of the grid (?round=ID), which the
// page asks for when the row is opened.
func (s *Server) ladder(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !q.Has("round") {
		http.Error(w, "give ?round=ID", http.StatusBadRequest)
		return
	}
	m, ok := s.poller.Ladder(q.Get("round"))
	if !ok {
		http.Error(w, "no such round in the grid", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(m)
}

// events streams the views to one page as server-sent events: the last
// view at once, then each new one as the poller makes it. The browser
// reconnects by itself (after retry ms) if the stream breaks.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		http.Error(w, "too many pages open", http.StatusServiceUnavailable)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if _, err := io.WriteString(w, "retry: 1000\n\n"); err != nil {
		return
	}
	fl.Flush()
	var sent []byte
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		v, next := s.poller.Latest()
		if v != nil && !bytes.Equal(v, sent) {
			if _, err := io.WriteString(w, "data: "+string(v)+"\n\n"); err != nil {
				return
			}
			fl.Flush()
			sent = v
		}
		select {
		case <-r.Context().Done():
			return
		case <-next:
		case <-keep.C:
			if _, err := io.WriteString(w, ": still here\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

// steerBody is a steering POST's body.
type steerBody struct {
	Op       string `json:"op"`
	Round    string `json:"round"`
	HasRound bool   `json:"has_round"`
	Reason   string `json:"reason"`
}

// steerReply is the answer to a steering POST: what the node did, or why
// not.
type steerReply struct {
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
}

func reply(w http.ResponseWriter, code int, rep steerReply) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(rep)
}

// steerPost takes a steering request from the page. It must come from
// the page's own origin and carry its token: a page of another site
// cannot read the token, and a request without it, or from elsewhere,
// changes nothing (403).
func (s *Server) steerPost(w http.ResponseWriter, r *http.Request) {
	if s.steer == nil {
		reply(w, http.StatusForbidden, steerReply{Error: "this dashboard is read-only (start it with --control to steer a node)"})
		return
	}
	if why := s.foreign(r); why != "" {
		reply(w, http.StatusForbidden, steerReply{Error: why})
		return
	}
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	if strings.TrimSpace(ct) != "application/json" {
		reply(w, http.StatusUnsupportedMediaType, steerReply{Error: "send the request as application/json"})
		return
	}
	var b steerBody
	if err := json.NewDecoder(io.LimitReader(r.Body, 8<<10)).Decode(&b); err != nil {
		reply(w, http.StatusBadRequest, steerReply{Error: "bad request: " + err.Error()})
		return
	}
	if why := s.check(b); why != "" {
		reply(w, http.StatusBadRequest, steerReply{Error: why})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	msg, err := s.steer.Steer(ctx, Request{Op: b.Op, Round: b.Round, HasRound: b.HasRound, Reason: b.Reason, By: s.user})
	var re *RefusedError
	switch {
	case errors.As(err, &re):
		reply(w, http.StatusConflict, steerReply{Error: "refused: " + re.Reason})
	case err != nil:
		reply(w, http.StatusBadGateway, steerReply{Error: err.Error()})
	default:
		reply(w, http.StatusOK, steerReply{Message: msg})
	}
}

// foreign says why r is not from the page this dashboard served, or "".
func (s *Server) foreign(r *http.Request) string {
	got := r.Header.Get(TokenHeader)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
		return "no valid token: steer from the dashboard's own page (reload it if the dashboard restarted)"
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return "a request from another site"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		// Not a browser's cross-site request (a browser names the origin
		// of every cross-origin POST): the token, which only the page
		// gets, is enough.
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host != r.Host || (u.Scheme == "https") != (r.TLS != nil) {
		return "a request from another origin (" + origin + ")"
	}
	return ""
}

// check says what is wrong with a steering request, or "".
func (s *Server) check(b steerBody) string {
	p := s.poller.Panel()
	if p == nil || !slices.Contains(p.Ops, b.Op) {
		return "the node does not take " + strconv.Quote(b.Op) + " here (the Head alone takes pause, resume, cancel, open and retry)"
	}
	if len(b.Reason) > 1000 || strings.ContainsAny(b.Reason, "\n\r") {
		return "the reason: one line of at most 1000 bytes"
	}
	if (b.HasRound || b.Round != "") && !protocol.ValidRound(b.Round) && !(b.Op == "open" && b.Round == "") {
		return "the round: 1-128 of A-Z a-z 0-9 - _ ."
	}
	if (b.Op == "cancel" || b.Op == "retry") && !b.HasRound {
		return b.Op + " needs a round"
	}
	return ""
}
