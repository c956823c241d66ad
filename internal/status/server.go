package status

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync"
)

// Handler serves /status, /healthz and /metrics for one node. snap reports
// the node's state (Node.Snapshot); m, if not nil, is the node's metrics;
// extra add what the command knows besides the node (its worker).
func Handler(snap func() chainsync.Snapshot, m *Metrics, version string, extra ...func(*Doc)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		doc := FromSnapshot(snap(), version, time.Now())
		for _, add := range extra {
			add(&doc)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(doc)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok\n"))
	})
	if m != nil {
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", ContentType)
			w.Header().Set("Cache-Control", "no-store")
			m.Live(snap())
			_, _ = m.WriteTo(w)
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "chainsync serves GET /status, /healthz and /metrics", http.StatusNotFound)
	})
	return mux
}

// Server is a running status endpoint.
type Server struct {
	srv  *http.Server
	done chan error
}

// Listen binds addr for the status endpoint, so a taken port is reported
// before the node starts.
func Listen(addr string) (net.Listener, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, err
	}
	return net.Listen("tcp", addr)
}

// The status endpoint is bounded so that it can never take from the chain
// what the chain needs (issue: 135 idle keep-alive connections to the
// status port used up a node's descriptors, so it could neither accept its
// predecessor nor start its task):
const (
	// MaxConns is how many status connections are served at once. The
	// next one waits in the kernel's backlog, holding no descriptor of the
	// node's, until one of them closes.
	MaxConns = 32
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout = 2 * time.Second
	// headerTimeout bounds the reading of a request's headers.
	headerTimeout = 2 * time.Second
)

// Serve serves h on ln until Close, at most MaxConns connections at once.
func Serve(ln net.Listener, h http.Handler) *Server { return ServeTLS(ln, h, nil) }

// ServeTLS is Serve over TLS with tc (plain HTTP if tc is nil): HTTPS for
// a node with a certificate, whose clients must show theirs (see
// secure.StatusServerTLS).
func ServeTLS(ln net.Listener, h http.Handler, tc *tls.Config) *Server {
	s := &Server{
		srv: &http.Server{Handler: h, ReadHeaderTimeout: headerTimeout, ReadTimeout: 5 * time.Second,
			WriteTimeout: 10 * time.Second, IdleTimeout: IdleTimeout, MaxHeaderBytes: 16 << 10,
			// Errors here are caused by clients (or by a descriptor limit
			// that the cap keeps away): never a line per connection.
			ErrorLog: log.New(io.Discard, "", 0)},
		done: make(chan error, 1),
	}
	ln = &capListener{Listener: ln, slots: make(chan struct{}, MaxConns), done: make(chan struct{})}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	go func() {
		err := s.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	return s
}

// capListener accepts a connection only while fewer than cap(slots) are
// open: Accept first takes a slot, which the connection gives back when
// it is closed.
type capListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
}

func (l *capListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, slots: l.slots}, nil
}

func (l *capListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// slotConn gives its slot back once, when closed.
type slotConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}

// Close stops the server, letting requests in progress finish for up to a
// second.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	if serr := <-s.done; err == nil {
		err = serr
	}
	return err
}
