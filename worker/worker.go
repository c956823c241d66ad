// Package worker writes persistent workers in Go: the task of a node
// started with chainsync run --worker, which stays up and takes one
// request a round (docs/WORKERS.md has the protocol). Serve speaks the
// protocol on standard input and output; the program does its expensive
// start-up (a model loaded, a connection opened) before it calls Serve,
// or in Worker.Start, and handles each round in its Handler.
//
// A worker writes nothing else on standard output: its log goes to
// standard error, which is the node's.
package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
)

// Version is the protocol version this package speaks.
const Version = 1

// Hello is what the node says first: who runs this worker.
type Hello struct {
	Node string // the node's --name
	Role string // head, middle, tail or single
}

// Request is one round's task.
type Request struct {
	ID    uint64 // unique while this worker lives
	Round string // the round id ("" for the unnamed round)
	Hello        // the node that asks
}

// Handler runs one round's task. A nil error is success; an error fails
// the round at this node (exit 3), and its text is the round's error at
// every node. ctx is cancelled when the node cancels the request (its
// --task-timeout passed): return soon, or the node stops the worker.
// With run --parallel N, up to N calls run at once.
type Handler func(ctx context.Context, req Request) error

// Worker is a worker with a start-up step.
type Worker struct {
	// Start, if not nil, runs when the node says hello, before the
	// answer: until it returns the node is not ready, and an error means
	// this worker cannot start (the node says so and exits).
	Start func(Hello) error
	// Run handles each request.
	Run Handler
}

// Serve is (&Worker{Run: h}).Serve(os.Stdin, os.Stdout): it serves
// requests until the node closes the worker's standard input.
func Serve(h Handler) error {
	return (&Worker{Run: h}).Serve(os.Stdin, os.Stdout)
}

// message is a line from the node; unknown fields are ignored.
type message struct {
	ID      *uint64 `json:"id"`
	Op      string  `json:"op"`
	Version int     `json:"version"`
	Node    string  `json:"node"`
	Role    string  `json:"role"`
	Round   string  `json:"round"`
}

// ErrProtocol is a line from the node that this package cannot read.
var ErrProtocol = errors.New("worker: not a request of the worker protocol")

// Serve reads requests from r and writes the answers to w until r ends
// (nil), cannot be read, or holds a line that is not a request; an answer
// that cannot be written is returned at the end. Requests run in goroutines of their own,
// answered as they finish; Serve waits for them before it returns.
func (wk *Worker) Serve(r io.Reader, w io.Writer) error {
	var (
		wmu     sync.Mutex
		mu      sync.Mutex
		cancels = map[uint64]context.CancelFunc{}
		wg      sync.WaitGroup
		hello   Hello
		werr    error
	)
	answer := func(id uint64, err error) {
		b := strconv.AppendUint([]byte(`{"id":`), id, 10)
		if err == nil {
			b = append(b, `,"ok":true`...)
			if id == 0 {
				b = append(b, `,"version":`+strconv.Itoa(Version)...)
			}
		} else {
			msg, _ := json.Marshal(err.Error())
			b = append(append(b, `,"ok":false,"error":`...), msg...)
		}
		b = append(b, "}\n"...)
		wmu.Lock()
		defer wmu.Unlock()
		if _, e := w.Write(b); e != nil && werr == nil {
			werr = e
		}
	}
	sc := bufio.NewScanner(pollable(r))
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		var m message
		if id, round, ok := parseRun(sc.Bytes()); ok {
			m.ID, m.Op, m.Round = &id, "run", round
		} else if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.ID == nil {
			wg.Wait()
			return fmt.Errorf("%w: %q", ErrProtocol, sc.Text())
		}
		id := *m.ID
		switch m.Op {
		case "hello":
			hello = Hello{Node: m.Node, Role: m.Role}
			var err error
			if m.Version != Version {
				err = fmt.Errorf("this worker speaks version %d of the worker protocol, not %d", Version, m.Version)
			} else if wk.Start != nil {
				err = wk.Start(hello)
			}
			answer(id, err)
		case "run":
			ctx, cancel := context.WithCancel(context.Background())
			mu.Lock()
			cancels[id] = cancel
			mu.Unlock()
			req := Request{ID: id, Round: m.Round, Hello: hello}
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := wk.Run(ctx, req)
				mu.Lock()
				delete(cancels, id)
				mu.Unlock()
				cancel()
				answer(id, err)
			}()
		case "cancel":
			mu.Lock()
			if cancel := cancels[id]; cancel != nil {
				cancel()
			}
			mu.Unlock()
		default:
			answer(id, fmt.Errorf("unknown op %q", m.Op))
		}
	}
	wg.Wait()
	if err := sc.Err(); err != nil {
		return err
	}
	return werr
}

// parseRun reads the line nearly every request is,
// {"id":N,"op":"run","round":"R"} exactly as the node writes it with a
// round id of printable ASCII and nothing escaped, without reflection; ok
// is false for any other line, which json.Unmarshal reads.
func parseRun(line []byte) (id uint64, round string, ok bool) {
	const pre, mid, post = `{"id":`, `,"op":"run","round":"`, `"}`
	if len(line) < len(pre)+1+len(mid)+len(post) || string(line[:len(pre)]) != pre || string(line[len(line)-len(post):]) != post {
		return 0, "", false
	}
	rest := line[len(pre) : len(line)-len(post)]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || (n > 1 && rest[0] == '0') || string(rest[n:min(len(rest), n+len(mid))]) != mid {
		return 0, "", false
	}
	id, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	if err != nil { // above 64 bits
		return 0, "", false
	}
	r := rest[n+len(mid):]
	for _, c := range r {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return 0, "", false
		}
	}
	return id, string(r), true
}
