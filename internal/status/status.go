package status

import (
	"strings"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/worker"
	"github.com/chainsync-go/chainsync/protocol"
)

// Doc is the JSON document GET /status serves: where one node stands.
type Doc struct {
	Name    string    `json:"name"`    // the node's --name ("" if it has none)
	Role    string    `json:"role"`    // head, middle, tail or single
	Version string    `json:"version"` // the chainsync version serving it
	Time    time.Time `json:"time"`    // when the document was made (the node's clock)
	Links   Links     `json:"links"`
	Rounds  []Round   `json:"rounds"` // unfinished rounds at this node, by round id
	Faults  []Fault   `json:"faults"` // the most recent faults, oldest first
	// Finished are the last rounds that ended at this node (at most 32),
	// oldest first.
	Finished []Finished `json:"finished"`
	// Steering: the nodes this node knows to be held, waiting for an
	// approval or paused, and the denials it heard of (docs/STEERING.md).
	Steering []Steer `json:"steering,omitempty"`
	// Restarting: the nodes in a restart grace, as this node knows
	// (liveness.go).
	Restarting []Restarting `json:"restarting,omitempty"`
	// Worker: the node's persistent worker (run --worker), its pid, its
	// starts and how the last one ended (docs/WORKERS.md).
	Worker *worker.Status `json:"worker,omitempty"`
}

// Steer is one node's steering state, as a node knows it.
type Steer struct {
	Node   string    `json:"node"`            // the node it is about
	Here   bool      `json:"here"`            // the node serving the document
	What   string    `json:"what"`            // hold, approval, pause, denied
	Round  *string   `json:"round,omitempty"` // the round (approval, denied)
	Since  time.Time `json:"since"`
	By     string    `json:"by,omitempty"`     // who asked
	Reason string    `json:"reason,omitempty"` // why
	Text   string    `json:"text"`             // the same in words: "held at C since 10:02 (reason), by ann"
}

// Finished is one round that ended at a node.
type Finished struct {
	Round  string `json:"round"`
	Status string `json:"status"` // done, task failed, fault, undelivered or stopped
	// Opened and Ended: when the node first heard of the round, and
	// when it ended here; omitted when not known (a round ended before
	// the node restarted, given back by its journal).
	Opened time.Time `json:"opened,omitzero"`
	Ended  time.Time `json:"ended,omitzero"`
	Error  string    `json:"error,omitempty"` // why, unless done
	// Undo: how the round's undo wave ended (--undo; docs/UNDO.md).
	Undo string `json:"undo,omitempty"`
}

// Links holds both neighbour links. Both are always present; Exists is
// false for the side a node's role does not have (the Head's pred, the
// Tail's succ).
type Links struct {
	Pred Link `json:"pred"`
	Succ Link `json:"succ"`
}

// Link is one neighbour link.
type Link struct {
	Exists bool   `json:"exists"` // this node has a neighbour on this side
	Up     bool   `json:"up"`     // connected now
	Peer   string `json:"peer"`   // the neighbour's name, or its address if it has none
	// Silent: with heartbeats, the link is up but the neighbour has sent
	// nothing for two heartbeat intervals.
	Silent bool `json:"silent,omitempty"`
	// LastHeard is when the neighbour last sent a line on this link
	// (a protocol message or a heartbeat); absent if it has sent none
	// since the link came up.
	LastHeard *time.Time `json:"last_heard,omitempty"`
	// Waiting, on the predecessor's side while the link is down, is the
	// address of a connection that has said it is alive but has sent no
	// round's line yet (an idle predecessor before its first round).
	Waiting string `json:"waiting,omitempty"`
}

// Round is one unfinished round at a node.
type Round struct {
	Round string `json:"round"` // the round id; "" is the unnamed round
	// State is the draft's state: SYNC, READY, WATCH, START or COMPLETE.
	// A round this node has not opened yet is in SYNC.
	State string `json:"state"`
	// WaitingFor is the message the round waits for (READY, START or
	// COMPLETE, from the neighbour named by From), or, when it waits for
	// this node itself (From "self"), "local-readiness" or "task"; or
	// "hand-over" (From empty) for a round done here whose final COMPLETE
	// is still to be handed to the predecessor.
	WaitingFor string    `json:"waiting_for"`
	From       string    `json:"from"`  // pred, succ or self
	Since      time.Time `json:"since"` // when the round entered State
	Ready      bool      `json:"ready"` // this node is locally ready for the round
	Doing      string    `json:"doing"` // the same in words
	// PausedBy, for a round that waits on a hold ("hold"), names the
	// Head whose pause holds it: chainsync resume at that Head, not
	// chainsync release here, lets it go on.
	PausedBy string `json:"paused_by,omitempty"`
	// Undo: the round failed and its undo wave is under way here; where
	// this node's part stands: awaiting (its undo waits for the nodes
	// after it), running, done, failed, or nothing (nothing to undo
	// here: waiting for the wave's outcome); "" no undo wave.
	Undo string `json:"undo,omitempty"`
}

// Fault is one fault the node detected.
type Fault struct {
	Kind  string    `json:"kind"`  // task-failed, peer-silent, ... (chainsync.FaultKind)
	Peer  string    `json:"peer"`  // the blamed neighbour; "" for this node's own faults
	Side  string    `json:"side"`  // pred or succ; "" for this node's own faults
	Round string    `json:"round"` // the round it happened in
	Time  time.Time `json:"time"`
	Error string    `json:"error"` // the fault in words
}

// The values of Round.From and Round.WaitingFor that name this node itself.
var (
	FromSelf           = "self"
	WaitLocalReadiness = protocol.WaitLocal.String()
	WaitTask           = protocol.WaitTask.String()
)

// Wait returns what the round waits for, read back from WaitingFor and
// From.
func (r Round) Wait() protocol.Wait { return protocol.ParseWait(r.WaitingFor, r.From) }

// FromSnapshot builds the status document from a node's snapshot.
func FromSnapshot(s chainsync.Snapshot, version string, now time.Time) Doc {
	d := Doc{
		Name: s.Name, Role: s.Role.String(), Version: version, Time: now,
		Links: Links{
			Pred: Link{Exists: s.Role.HasPred(), Up: s.PredUp, Peer: s.PredPeer, Waiting: s.PredWaiting},
			Succ: Link{Exists: s.Role.HasSucc(), Up: s.SuccUp, Peer: s.SuccPeer},
		},
		Rounds:   []Round{},
		Faults:   []Fault{},
		Finished: []Finished{},
	}
	for _, f := range s.Finished {
		d.Finished = append(d.Finished, Finished{Round: f.Round, Status: f.Status.String(), Opened: f.Opened, Ended: f.Ended, Error: f.Err, Undo: f.Undo})
	}
	if !s.PredHeard.IsZero() {
		d.Links.Pred.LastHeard = &s.PredHeard
	}
	if !s.SuccHeard.IsZero() {
		d.Links.Succ.LastHeard = &s.SuccHeard
	}
	for _, r := range s.Rounds {
		st := r.State
		if st == 0 {
			st = protocol.StateSync
		}
		rd := Round{Round: r.Round, State: st.String(), Since: r.Since, Ready: r.Ready, Doing: r.Doing(),
			WaitingFor: r.WaitingFor.String()}
		if _, side := r.WaitingFor.Msg(); side != 0 {
			rd.From = side.String()
		} else if r.WaitingFor.Self() {
			rd.From = FromSelf
		}
		if r.Undo != "" {
			rd.Undo = undoPhaseOf(r.Undo)
		}
		if r.WaitingFor == protocol.WaitHold {
			rd.PausedBy, rd.Doing = holdDoing(s, rd.Doing)
		}
		d.Rounds = append(d.Rounds, rd)
	}
	for _, st := range s.Steering {
		sd := Steer{Node: st.Node, Here: st.Here, What: st.What, Since: st.Since, By: st.By, Reason: st.Reason,
			Text: st.Text(time.Local)}
		if st.HasRound {
			sd.Round = &st.Round
		}
		d.Steering = append(d.Steering, sd)
	}
	addLiveness(&d, s) // liveness.go
	for _, f := range s.Faults {
		ff := Fault{Kind: string(f.Kind), Peer: f.Peer, Round: f.Round, Time: f.Time, Error: f.Err}
		if f.Side != 0 {
			ff.Side = f.Side.String()
		}
		d.Faults = append(d.Faults, ff)
	}
	return d
}

// holdDoing says, for a round of s that waits on a hold, who holds it and
// what lets it go on: this node's own hold (chainsync release here), a
// pause at the Head (chainsync resume at the Head), or both; and the Head
// that paused the chain ("" when no pause holds it). doing is the
// driver's words, kept when the snapshot names neither.
func holdDoing(s chainsync.Snapshot, doing string) (pausedBy, words string) {
	self := s.Name
	if self == "" {
		self = "this node"
	}
	held := false
	for _, st := range s.Steering {
		switch {
		case st.What == "hold" && st.Here:
			held = true
		case st.What == "pause" && pausedBy == "":
			pausedBy = st.Node
		}
	}
	resume := "paused at the Head " + pausedBy + " (chainsync resume at " + pausedBy + ")"
	if !s.Role.HasPred() {
		resume = "paused here, at the Head (chainsync resume at " + self + ")"
	}
	release := "held at " + self + " (chainsync release at " + self + ")"
	switch {
	case held && pausedBy != "":
		return pausedBy, release + ", and " + resume
	case pausedBy != "":
		return pausedBy, resume
	case held:
		return "", release
	}
	return "", doing
}

// undoPhases are the words the driver gives a round in its undo wave
// (RoundStatus.Undo), by where this node's part stands.
var undoPhases = []struct{ suffix, phase string }{
	{"; waiting for UNDO from the successor (the nodes after this one undo first)", "awaiting"},
	{"; running its undo", "running"},
	{"; undone here; waiting for the nodes before it and the outcome", "done"},
	{"; its undo failed", "failed"},
}

// undoPhaseOf reads where a node's part of an undo wave stands from the
// driver's words for it: "nothing" (to undo here, waiting for the wave's
// outcome) for words it does not know.
func undoPhaseOf(words string) string {
	for _, p := range undoPhases {
		if strings.HasSuffix(words, p.suffix) {
			return p.phase
		}
	}
	return "nothing"
}
