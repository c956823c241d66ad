// Package protocol is the ChainSync state machine: the per-node, per-round
// logic of draft-dohmeyer-chainsync (the four waves READY, START, COMPLETE
// forward and COMPLETE backward) as read by the project's docs/DESIGN.md.
//
// It does no I/O: no sockets, goroutines, clocks or files. A Machine takes
// events (a message from a neighbour, local readiness, a finished task, a
// link that came back or went down, an abort, a tick of the driver's
// clock) and returns actions (send a message, run the task, a state
// change, a finished round, a timeout). Time is an input: events carry it
// (Event.At) and the machine judges its timeouts against it, so they run
// in simulations and golden traces like the rest of the protocol. That makes the whole
// protocol testable deterministically, the way etcd's raft package is.
//
// # Usage
//
// The caller (a driver, such as package chainsync) owns one Machine per
// node and must, in order:
//
//  1. Create it with New, giving the node's Role (and Durable, if the node
//     keeps a journal). A restarted node first reinstates each round of its
//     journal with Restore; a round restored in StateStart was interrupted
//     in its task: report TaskDone (failed or not) or run the task again.
//  2. Feed every event to Step, one at a time, with a reusable action slice.
//  3. Carry out the returned actions in order: ActSend writes the message on
//     that link (dropping it if the link is down is fine: it is re-sent on
//     EvLinkUp); ActRunTask starts the task and later reports TaskDone;
//     ActState (with what the round now waits for) and ActDone are for
//     logs, traces and waiters. ActSave (Durable
//     only) comes first among a step's actions: write its Record to
//     durable storage, and sync, before carrying out any other action of
//     the step. ActPeerRestarted reports a neighbour that came back without
//     its state; it needs no answer. ActOpened says a round is new here;
//     ActForget says the machine no longer keeps a finished round (past
//     Config.KeepFinished): drop whatever is kept for it beside the
//     machine, whose table decides which rounds a node remembers.
//  4. On a *Violation error, report it and close that connection; the
//     Machine has not changed. Other errors are the caller's own misuse.
//  5. Report LinkUp each time a link is (re-)established, so the last
//     message sent on it is re-sent for every unfinished round; for a new
//     connection that must first prove itself with an acceptable line
//     (a would-be predecessor), report Promote with that line instead.
//  6. Report Delivered once a round's final COMPLETE to the predecessor
//     was handed to a live connection: at a node with a predecessor a
//     round in StateDone is over (ActDone) only then. Report Undelivered
//     to give up on that (the round ends NotDelivered).
//  7. With timeouts (Config.PhaseTimeout, ExitWaveTimeout, Silence,
//     ConnectTimeout): stamp every event with Event.At, report LinkDown
//     when a connection is gone, and step Tick a few times per shortest
//     timeout, with when a line last arrived on each link. ActTimeout
//     says a timeout ran out; the machine changed nothing, the caller
//     applies its fault policy (Abort the round, or every round, or
//     wait).
//  8. With Config.Receipts (receipt.go): carry out ActSignReceipt by
//     signing this node's receipt as Action.Sign says (possibly off the
//     loop), then step ReceiptSigned with the envelope and its digest;
//     after a restart, carry out ReceiptsToSign first. Report
//     ReceiptHanded for each RECEIPT handed to a live connection to the
//     predecessor. ActReceipts says the receipts this node must hold are
//     here (Receipts returns them).
package protocol
