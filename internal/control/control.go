// Package control is the protocol between the chainsync commands that
// steer a node (open, hold, release, approve, deny, pause, resume,
// cancel) and a node's --control socket: the address format, the one
// request line a client sends, the reply lines a node sends back, and
// both ends of a connection (Listen for the node, Dial for a client).
//
// A client sends one JSON request line; the node answers with one JSON
// line (the round id, a message, or why not) and, for a request that
// waits, a second one: the round's outcome, once the round is over in
// the whole chain. A node takes only what this package documents: a
// request whose op is not one of Ops, with a field Request does not
// have, or that is not a JSON object (null) is refused with an error
// reply, and nothing changes.
package control

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"
)

// The ops a node takes. OpOpen, OpRetry and OpWait go to the Head (its
// --control opens rounds); the steering ops to any node, pause, resume
// and cancel to the Head only.
const (
	OpOpen    = "open"    // open a round (ID, or a generated id)
	OpRetry   = "retry"   // reopen Round, which did not end done
	OpWait    = "wait"    // wait for Round, opened already, to be over
	OpHold    = "hold"    // hold this node: it starts no task
	OpRelease = "release" // undo hold
	OpApprove = "approve" // let the task waiting for an approval start
	OpDeny    = "deny"    // fail the round waiting for an approval
	OpPause   = "pause"   // at the Head: open no round, hold every node
	OpResume  = "resume"  // at the Head: undo pause
	OpCancel  = "cancel"  // at the Head: end Round everywhere
	OpName    = "name"    // say this node's name (Reply.Message); changes nothing
)

// Ops are the ops a node takes, in the order the docs list them.
var Ops = []string{OpOpen, OpRetry, OpWait, OpHold, OpRelease, OpApprove, OpDeny, OpPause, OpResume, OpCancel, OpName}

// Request is the one line a client sends.
type Request struct {
	Op     string `json:"op"`           // one of Ops
	ID     string `json:"id,omitempty"` // open: the round's id; "": a generated one
	Wait   bool   `json:"wait"`         // open, retry: answer again with the outcome
	NoWait bool   `json:"no_wait"`      // open, retry: fail rather than wait for a slot or a resume
	// Round names the round (HasRound: given) of retry, wait and the
	// steering ops; Reason says why and By who asks.
	Round    string `json:"round,omitempty"`
	HasRound bool   `json:"has_round,omitempty"`
	Reason   string `json:"reason,omitempty"`
	By       string `json:"by,omitempty"`
}

// Reply is a node's answer: Round (opened, or waited for) or Error
// (refused); then, for a request that waits, Outcome. A steering request
// taken says so in Message.
type Reply struct {
	Round   string   `json:"round,omitempty"`
	Error   string   `json:"error,omitempty"`
	Message string   `json:"message,omitempty"`
	Outcome *Outcome `json:"outcome,omitempty"`
}

// Outcome is how a round ended in the whole chain, as the Head reports it.
type Outcome struct {
	Round string `json:"round"`
	// Status is how the round ended in the chain: done, task failed (at
	// Node), fault (Node is the node blamed), undelivered, cancelled or
	// stopped (the Head stopped first).
	Status string `json:"status"`
	Node   string `json:"node,omitempty"`   // where it failed
	Reason string `json:"reason,omitempty"` // why
	Undo   string `json:"undo,omitempty"`   // how the undo wave ended (--undo)
}

// requestFields are the JSON names of Request's fields, as sent.
var requestFields = []string{"op", "id", "wait", "no_wait", "round", "has_round", "reason", "by"}

// MaxLine bounds a request line.
const MaxLine = 1024

// ParseRequest reads a request line strictly: one JSON object whose
// fields are all Request's and whose op is one of Ops. Anything else
// (null, {}, an object without op, an unknown op or field, a second
// value after it) is an error that says what is wrong.
func ParseRequest(line []byte) (Request, error) {
	if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '{' && !bytes.Equal(t, []byte("null")) {
		return Request{}, errors.New("bad request: not a JSON object: want one object with an op")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var req *Request
	if err := dec.Decode(&req); err != nil {
		return Request{}, fmt.Errorf("bad request: %v", strings.TrimPrefix(err.Error(), "json: "))
	}
	if req == nil {
		return Request{}, errors.New("bad request: null: want a JSON object with an op")
	}
	if dec.More() {
		return Request{}, errors.New("bad request: more than one JSON value on the line")
	}
	// encoding/json matches a field's name in any case: only the names
	// as documented are taken ({"OP":"hold"} is not a request).
	var keys map[string]json.RawMessage
	if json.Unmarshal(line, &keys) == nil {
		for k := range keys {
			if !slices.Contains(requestFields, k) {
				return Request{}, fmt.Errorf("bad request: unknown field %q", k)
			}
		}
	}
	if req.Op == "" {
		return Request{}, fmt.Errorf("bad request: no op: want one of %s", strings.Join(Ops, ", "))
	}
	if !slices.Contains(Ops, req.Op) {
		return Request{}, fmt.Errorf("bad request: unknown op %q: want one of %s", req.Op, strings.Join(Ops, ", "))
	}
	return *req, nil
}

// Conn is a client's connection to a node's control socket.
type Conn struct {
	addr     string
	c        net.Conn
	dec      *json.Decoder
	answered bool // a reply came: it is a control socket
}

// Dial connects to the control socket at addr (unix:PATH or HOST:PORT),
// trying for at most timeout.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	network, address, err := Network(addr)
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &Conn{addr: addr, c: c, dec: json.NewDecoder(bufio.NewReader(c))}, nil
}

// Send sends the request line.
func (c *Conn) Send(req Request) error {
	line, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = c.c.Write(append(line, '\n'))
	return err
}

// Receive reads the next reply. An answer that is not a reply says what
// most likely answered instead (see notControl).
func (c *Conn) Receive() (Reply, error) {
	var rep Reply
	if err := c.dec.Decode(&rep); err != nil {
		var reset *net.OpError
		if c.answered && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &reset) && reset.Op == "read") {
			return rep, fmt.Errorf("the connection to %s closed: the node stopped, or was killed", c.addr)
		}
		return rep, errors.New(notControl(c.addr, err, c.dec.Buffered()))
	}
	c.answered = true
	return rep, nil
}

// SetReadDeadline bounds the wait for the next reply.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.c.SetReadDeadline(t) }

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// notControl says why what answered at --control addr is not a node's
// control socket: decoding its first answer failed with err, and rest is
// what was read but not decoded. Whatever closes the connection at once
// or answers with something else than a control reply is another service
// on that address: most likely a chain port (--listen), which hangs up on
// a line that is not a protocol line, or a status endpoint (--status-addr).
func notControl(addr string, err error, rest io.Reader) string {
	head := make([]byte, 5)
	n, _ := io.ReadFull(rest, head)
	var syn *json.SyntaxError
	var reset *net.OpError // reset by the peer, after it accepted
	switch {
	case n == 5 && string(head) == "HTTP/":
		return fmt.Sprintf("%s answered, but not as a chainsync control socket: it speaks HTTP (is it a node's --status-addr? give the Head's --control address)", addr)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &syn), errors.As(err, &reset) && reset.Op == "read":
		return fmt.Sprintf("%s answered, but not as a chainsync control socket: is it a chain port? (a --listen or --chain address: give the Head's --control address)", addr)
	}
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		return fmt.Sprintf("%s answered, but not as a chainsync control socket (%v): give the Head's --control address", addr, err)
	}
	return fmt.Sprintf("the Head at %s did not answer: %v", addr, err)
}
