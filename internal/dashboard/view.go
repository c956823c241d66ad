package dashboard

import "time"

// View is what the page shows at one moment, sent to it as JSON: the
// chain's nodes, the rounds in flight and the grid of recent rounds. Every
// string in it that came from a node is shown by the page as text.
type View struct {
	// Time is when the poll that made the view started, by the
	// dashboard's clock.
	Time  time.Time `json:"time"`
	Chain string    `json:"chain"` // the nodes in chain order: "A -> B -> C -> D"
	Nodes []Box     `json:"nodes"`
	// Flights are the rounds in progress anywhere in the chain, by id.
	Flights []Flight `json:"flights"`
	Grid    Grid     `json:"grid"`
	// Events are the latest steering events the nodes tell of, newest
	// first: "approved at C (round r7) at 10:02 (looks fine), by ann".
	Events []string `json:"events"`
	// Steer says what the node the dashboard steers takes; nil: the
	// dashboard is read-only.
	Steer *SteerPanel `json:"steer,omitempty"`
}

// Box is one node of the chain.
type Box struct {
	Label string `json:"label"` // its name, or its address if it has none
	Addr  string `json:"addr"`  // its --status-addr
	// Answers: its status endpoint answered the last poll. A node that
	// does not answer keeps its box, with Error and since when.
	Answers bool      `json:"answers"`
	Error   string    `json:"error,omitempty"`
	Since   time.Time `json:"since,omitzero"` // when it stopped answering
	Role    string    `json:"role,omitempty"`
	Version string    `json:"version,omitempty"`
	Pred    LinkBox   `json:"pred"`
	Succ    LinkBox   `json:"succ"`
	// InFlight is how many rounds are unfinished at the node.
	InFlight int `json:"in_flight"`
	// Restarting says the node is in a restart grace, as a node that
	// answers knows it: "B is restarting (grace 10m, 2m left)".
	Restarting string `json:"restarting,omitempty"`
	// Gates are its holds, approval waits and pauses, as any node knows
	// them.
	Gates  []Gate      `json:"gates"`
	Faults []FaultLine `json:"faults"`
	// Control: this is the node the dashboard steers (--control).
	Control bool `json:"control,omitempty"`
}

// LinkBox is one of a node's links.
type LinkBox struct {
	Exists bool   `json:"exists"` // the node's role has this neighbour
	State  string `json:"state"`  // up, down, silent, or waiting (a predecessor connected, no round yet)
	Peer   string `json:"peer,omitempty"`
}

// Gate is a hold, an approval wait or a pause at a node.
type Gate struct {
	What   string    `json:"what"` // hold, approval, pause
	Round  string    `json:"round,omitempty"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
	Text   string    `json:"text"` // in words, as the node says it
}

// FaultLine is one fault a node reported: its kind, whom it blames, and,
// once it is no longer in force there, when that was seen.
type FaultLine struct {
	Kind   string    `json:"kind"`
	Round  string    `json:"round"`
	Blames string    `json:"blames,omitempty"` // the neighbour it blames ("" for the node's own)
	Side   string    `json:"side,omitempty"`   // pred or succ
	Time   time.Time `json:"time"`
	Error  string    `json:"error"`
	// Cleared is when the dashboard saw the fault gone from the node's
	// faults (a neighbour back from a silence); zero while in force.
	Cleared time.Time `json:"cleared,omitzero"`
}

// Flight is one round in progress.
type Flight struct {
	Round string `json:"round"`
	Label string `json:"label"` // the id, or "(unnamed)"
	// Words say where it stands as chainsync status says it: the node
	// holding it up and why ("C is running its task").
	Words string `json:"words"`
	At    string `json:"at,omitempty"` // the node holding it up
	For   string `json:"for,omitempty"`
	// States are the round's state at each node, in chain order:
	// SYNC .. COMPLETE, "done" or another outcome once it ended there,
	// "?" for a node that does not answer, "" where it is not known.
	States []string `json:"states"`
	Ladder []Msg    `json:"ladder"`
	// Approve: the round waits for an approval at the node the dashboard
	// steers.
	Approve bool `json:"approve,omitempty"`
}

// Msg is one message of a round's ladder: From sent Cmd to To. A node's
// status tells its state, and each state says which messages the node has
// sent (a node in WATCH has sent START to its predecessor), so the ladder
// is read from the states the polls saw.
type Msg struct {
	Wave int    `json:"wave"` // 1 readiness, 2 start, 3 execution, 4 exit
	From int    `json:"from"` // node index, chain order
	To   int    `json:"to"`
	Cmd  string `json:"cmd"` // READY, START or COMPLETE
	// At is when it was sent by the sender's clock, if a poll saw the
	// sender in the state that sends it; else Seen, when a poll first
	// showed it sent (the dashboard's clock).
	At   Millis `json:"at,omitempty"`
	Seen Millis `json:"seen,omitempty"`
}

// Millis is a time in Unix milliseconds, 0 for none: a ladder has many
// times, and this keeps each view small.
type Millis int64

// millis returns t in Unix milliseconds, 0 for the zero time.
func millis(t time.Time) Millis {
	if t.IsZero() {
		return 0
	}
	return Millis(t.UnixMilli())
}

// Grid is the recent rounds, one row each, newest first.
type Grid struct {
	Nodes []string `json:"nodes"` // the column heads
	Rows  []Row    `json:"rows"`
	// Hidden is how many older rounds the dashboard knows of and does
	// not send, so that a page with many rounds stays quick.
	Hidden int `json:"hidden"`
}

// Row is one round in the grid.
type Row struct {
	Round   string `json:"round"`
	Label   string `json:"label"`
	Outcome string `json:"outcome"` // done, failed, cancelled, undone or in flight
	// Text says how it ended: where it failed and why, how its undo
	// ended, who approved or denied it.
	Text  []string `json:"text"`
	Cells []Cell   `json:"cells"`
	// Msgs is how many messages its ladder has: the page asks for the
	// ladder of a row it opens (GET /ladder?round=ID), and again when
	// this changes, so that views stay small with many rows.
	Msgs  int       `json:"msgs"`
	First time.Time `json:"first"` // when the dashboard first saw it
	// Retry: the dashboard steers the Head and the round may be retried
	// (it failed, faulted, was denied or cancelled).
	Retry bool `json:"retry,omitempty"`
}

// Cell is one node's part in one round.
type Cell struct {
	// Outcome: done, failed, undone, cancelled, not-reached, running
	// (in flight there) or unknown (never seen).
	Outcome string `json:"outcome"`
	Task    string `json:"task,omitempty"` // how long its task ran: "2.0s", "< 1.0s"
	Note    string `json:"note,omitempty"` // "approved at C by ann (looks fine)"
}

// SteerPanel is what the node the dashboard steers takes.
type SteerPanel struct {
	Node string   `json:"node"` // its label ("" until it answered)
	Head bool     `json:"head"`
	Ops  []string `json:"ops"`  // hold, release, approve, deny; at the Head pause, resume, cancel, open, retry
	User string   `json:"user"` // who the requests are sent as
}
