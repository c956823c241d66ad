// Package tracefile writes a node's trace events as JSON lines (chainsync
// run --trace FILE), reads them back, and draws the traces of a whole
// chain as a ladder diagram in SVG (chainsync trace render, chainsync demo
// --svg).
//
// A trace file starts with one "node" record describing the node (its
// name, role and neighbours, so that traces merged later can be put in
// chain order), then has one record per event: every message sent and
// received, every state change, task start and end, link change,
// violation, fault and round end. Times have nanoseconds.
package tracefile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/protocol"
)

// Record kinds: "node" is the header, the others are chainsync.TraceKind.
const (
	KindNode = "node"
	KindSent = "sent"
	// KindQueued: a message sent while its link was down; it goes out,
	// as a sent record of its own, when the link is up.
	KindQueued    = "queued"
	KindReceived  = "received"
	KindState     = "state"
	KindTaskStart = "task-start"
	KindTaskEnd   = "task-end"
	// The undo wave (docs/UNDO.md): this node's undo started and ended,
	// and the wave's outcome (in Error).
	KindUndoStart = "undo-start"
	KindUndoEnd   = "undo-end"
	KindUndone    = "undone"
	KindLinkUp    = "link-up"
	KindLinkDown  = "link-down"
	KindViolation = "violation"
	KindRoundDone = "round-done"
	KindFault     = "fault"
	KindOpened    = "round-opened"
	KindSteer     = "steer"   // a hold, approval wait, pause, denial, cancel or retry (docs/STEERING.md)
	KindDropped   = "dropped" // the writer fell behind and dropped Count records
	// KindFaultCleared: a liveness fault in force here cleared: Peer is
	// back, Fault the kind that cleared (docs/FAULTS.md, "A fault that
	// clears, paged once").
	KindFaultCleared = "fault-cleared"
)

// TimeFormat is how Record.Time is written: RFC 3339 with nanoseconds.
const TimeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// Record is one line of a trace file.
type Record struct {
	Time  time.Time `json:"-"`
	Node  string    `json:"node"`
	Kind  string    `json:"kind"`
	Round string    `json:"round"` // "" is the unnamed round (and records that belong to no round)
	// Command is the message's command (sent, received): READY, START or
	// COMPLETE.
	Command string `json:"command,omitempty"`
	// Side is the neighbour concerned: pred or succ (sent, received, link,
	// violation, fault).
	Side string `json:"side,omitempty"`
	Peer string `json:"peer,omitempty"` // that neighbour's address or name
	// State is the round's new state (state), FromState the one it left.
	State     string `json:"state,omitempty"`
	FromState string `json:"from_state,omitempty"`
	Resend    bool   `json:"resend,omitempty"` // sent: a re-send after a reconnect
	Queued    bool   `json:"queued,omitempty"` // sent: the link was down, it goes out on reconnect
	Status    string `json:"status,omitempty"` // round-done: done, task failed, fault, stopped
	Fault     string `json:"fault,omitempty"`  // fault: its kind (peer-silent, ...)
	Steer     string `json:"steer,omitempty"`  // steer: hold, approval, approved, pause, resume, denied, cancel, retry, skip or none
	Error     string `json:"error,omitempty"`
	Count     int    `json:"count,omitempty"` // dropped: how many records; violation: how many it stands for, if more than one

	// The node record describes the node.
	Role   string   `json:"role,omitempty"`   // head, middle, tail or single
	Prev   string   `json:"prev,omitempty"`   // the predecessor's name or address
	Next   string   `json:"next,omitempty"`   // the successor's name or address
	Listen string   `json:"listen,omitempty"` // where it listens for its predecessor
	Chain  []string `json:"chain,omitempty"`  // the whole chain's names in order, if known
}

// MarshalJSON writes the record with its time first.
func (r Record) MarshalJSON() ([]byte, error) {
	type plain Record
	t, err := json.Marshal(r.Time.Format(TimeFormat))
	if err != nil {
		return nil, err
	}
	rest, err := json.Marshal((*plain)(&r))
	if err != nil {
		return nil, err
	}
	out := append([]byte(`{"time":`), t...)
	if len(rest) > 2 {
		out = append(out, ',')
	}
	return append(out, rest[1:]...), nil
}

// UnmarshalJSON reads a record written by MarshalJSON.
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record
	var aux struct {
		Time *string `json:"time"`
		*plain
	}
	aux.plain = (*plain)(r)
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	if aux.Time == nil {
		return errors.New("no time")
	}
	t, err := time.Parse(time.RFC3339Nano, *aux.Time)
	if err != nil {
		return fmt.Errorf("time: %v", err)
	}
	r.Time = t
	return nil
}

// FromEvent turns a node's trace event into a record.
func FromEvent(ev chainsync.TraceEvent) Record {
	r := Record{Time: ev.Time, Node: ev.Node, Round: ev.Round, Peer: ev.Peer}
	if ev.Side == protocol.Pred || ev.Side == protocol.Succ {
		r.Side = ev.Side.String()
	}
	if ev.Err != nil {
		r.Error = ev.Err.Error()
	}
	switch ev.Kind {
	case chainsync.TraceSent, chainsync.TraceReceived:
		r.Kind = KindSent
		switch {
		case ev.Kind == chainsync.TraceReceived:
			r.Kind = KindReceived
		case ev.Queued:
			r.Kind = KindQueued // one sent record per message on the wire
		}
		if ev.Msg.Cmd.Valid() {
			r.Command = ev.Msg.Cmd.String()
		}
		r.Resend, r.Queued = ev.Resend, ev.Queued
	case chainsync.TraceState:
		r.Kind = KindState
		r.State = ev.To.String()
		if ev.From != 0 {
			r.FromState = ev.From.String()
		}
	case chainsync.TraceTaskStart:
		r.Kind = KindTaskStart
	case chainsync.TraceTaskEnd:
		r.Kind = KindTaskEnd
	case chainsync.TraceLinkUp:
		r.Kind = KindLinkUp
	case chainsync.TraceLinkDown:
		r.Kind = KindLinkDown
	case chainsync.TraceViolation:
		r.Kind = KindViolation
		if ev.Count > 1 {
			r.Count = ev.Count
		}
	case chainsync.TraceRoundDone:
		r.Kind = KindRoundDone
		r.Status = ev.Status.String()
	case chainsync.TraceRoundOpened:
		r.Kind = KindOpened
	case chainsync.TraceSteer:
		r.Kind, r.Steer, r.Peer = KindSteer, ev.Steer, ev.Origin // Peer: the node it is about, "" this one
	case chainsync.TraceFault:
		r.Kind = KindFault
		r.Fault = string(ev.Fault)
	case chainsync.TraceFaultCleared:
		r.Kind, r.Fault = KindFaultCleared, string(ev.Fault)
	case chainsync.TraceUndoStart:
		r.Kind = KindUndoStart
	case chainsync.TraceUndoEnd:
		r.Kind = KindUndoEnd
	case chainsync.TraceUndone:
		r.Kind = KindUndone // Error: the outcome in words
	default:
		r.Kind = fmt.Sprintf("kind-%d", ev.Kind)
	}
	return r
}

// maxBacklog bounds the encoded records waiting to be written: a disk that
// stops accepting writes costs records (counted in a "dropped" record),
// never the node's progress or unbounded memory.
const maxBacklog = 32 << 20

// Writer appends records to a trace file. Observe is quick (it encodes
// into memory; a goroutine writes), so it can be a Config.Trace hook.
type Writer struct {
	mu      sync.Mutex
	buf     []byte
	dropped int
	node    string
	err     error
	closed  bool
	kick    chan struct{}
	done    chan struct{}
	f       io.WriteCloser
	sync    func() error
}

// Append opens the trace file at path for appending (creating it if
// needed) and writes the node record hdr. Appending, not truncating, keeps
// the trace of a node that restarts, as in the draft's switch stack where
// the task restarts the node: each run adds its own node record and
// events, and a render draws them in one lane.
func Append(path string, hdr Record) (*Writer, error) {
	// Created 0600 (a trace names peers, rounds and faults), and never
	// through a symbolic link: a link planted at the path would have the
	// node append to whatever it points to.
	f, err := openAppend(path)
	if err != nil {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symbolic link: a trace file is never written through one; give the real path", path)
		}
		return nil, err
	}
	w := NewWriter(f, hdr)
	w.sync = f.Sync
	return w, nil
}

// NewWriter writes records to wc, starting with the node record hdr;
// Close closes wc.
func NewWriter(wc io.WriteCloser, hdr Record) *Writer {
	w := &Writer{f: wc, node: hdr.Node, kick: make(chan struct{}, 1), done: make(chan struct{})}
	hdr.Kind = KindNode
	if hdr.Time.IsZero() {
		hdr.Time = time.Now()
	}
	w.append(hdr)
	go w.loop()
	return w
}

// Observe records one trace event.
func (w *Writer) Observe(ev chainsync.TraceEvent) { w.Add(FromEvent(ev)) }

// Add records r.
func (w *Writer) Add(r Record) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.append(r)
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// append encodes r into the backlog. Caller holds mu (or owns w).
func (w *Writer) append(r Record) {
	if len(w.buf) >= maxBacklog {
		w.dropped++
		return
	}
	if w.dropped > 0 {
		d := Record{Time: r.Time, Node: w.node, Kind: KindDropped, Count: w.dropped}
		w.dropped = 0
		w.append(d)
	}
	b, err := json.Marshal(r)
	if err != nil { // cannot happen: every field is a plain value
		return
	}
	w.buf = append(append(w.buf, b...), '\n')
}

func (w *Writer) loop() {
	defer close(w.done)
	var out []byte
	for {
		_, ok := <-w.kick
		w.mu.Lock()
		out, w.buf = w.buf, out[:0]
		w.mu.Unlock()
		if len(out) > 0 && w.err == nil {
			if _, err := w.f.Write(out); err != nil {
				w.err = err
			}
		}
		if !ok {
			return
		}
	}
}

// Close writes what is left, syncs and closes the file. It reports the
// first write error, if any.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	if w.dropped > 0 {
		b, _ := json.Marshal(Record{Time: time.Now(), Node: w.node, Kind: KindDropped, Count: w.dropped})
		w.buf = append(append(w.buf, b...), '\n')
	}
	close(w.kick)
	w.mu.Unlock()
	<-w.done
	err := w.err
	if w.sync != nil && err == nil {
		err = w.sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Read reads a trace file's records. A last line cut short (the node was
// killed while writing it) is ignored; any other bad line is an error
// naming its line number.
func Read(r io.Reader, name string) ([]Record, error) {
	br := bufio.NewReader(r)
	var out []Record
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if len(line) == 0 && err == io.EOF {
			return out, nil
		}
		if err != nil && err != io.EOF {
			return out, fmt.Errorf("%s: %v", name, err)
		}
		torn := err == io.EOF // no newline: the last line, maybe cut short
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var rec Record
		if jerr := json.Unmarshal(line, &rec); jerr != nil || rec.Kind == "" {
			if torn {
				return out, nil
			}
			if jerr == nil {
				jerr = errors.New(`no "kind"`)
			}
			return out, fmt.Errorf("%s:%d: not a chainsync trace record: %v", name, lineNo, jerr)
		}
		out = append(out, rec)
		if torn {
			return out, nil
		}
	}
}

// ReadFile reads the trace file at path.
func ReadFile(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f, path)
}
