package worker_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/chainsync-go/chainsync/worker"
)

// syncBuf collects what a worker writes.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeCancel: a cancel reaches the handler of its request as its
// context's end; the answer then is the handler's. docs/WORKERS.md,
// "The protocol, version 1".
func TestServeCancel(t *testing.T) {
	in, feed := io.Pipe()
	out := new(syncBuf)
	started := make(chan struct{})
	w := &worker.Worker{Run: func(ctx context.Context, req worker.Request) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}}
	done := make(chan error, 1)
	go func() { done <- w.Serve(in, out) }()
	io.WriteString(feed, `{"id":0,"op":"hello","version":1,"node":"C","role":"tail"}`+"\n"+`{"id":5,"op":"run","round":"r1"}`+"\n")
	<-started
	io.WriteString(feed, `{"id":5,"op":"cancel"}`+"\n")
	feed.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := `{"id":0,"ok":true,"version":1}` + "\n" + `{"id":5,"ok":false,"error":"context canceled"}` + "\n"
	if out.String() != want {
		t.Fatalf("answers:\n%s\nwant:\n%s", out, want)
	}
}

// TestServeRefuses: another protocol version and an unknown op are
// answered with errors; a line that is not a request ends Serve.
func TestServeRefuses(t *testing.T) {
	out := new(syncBuf)
	w := &worker.Worker{Run: func(context.Context, worker.Request) error { return nil }}
	in := `{"id":0,"op":"hello","version":2}` + "\n" + `{"id":3,"op":"frobnicate"}` + "\n" + "junk\n"
	err := w.Serve(strings.NewReader(in), out)
	if err == nil || !strings.Contains(err.Error(), "not a request") {
		t.Fatalf("Serve: %v, want the junk line named", err)
	}
	for _, want := range []string{`{"id":0,"ok":false,"error":"this worker speaks version 1 of the worker protocol, not 2"}`, `{"id":3,"ok":false,"error":"unknown op \"frobnicate\""}`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("answers:\n%s\nwant %s", out, want)
		}
	}
}
