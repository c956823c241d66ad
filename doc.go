// Package chainsync runs one node of a ChainSync chain over real TCP (or
// TLS): a fixed chain of processes A -> B -> ... -> N that run their tasks
// strictly in order, and only once every one of them is ready
// (draft-dohmeyer-chainsync, read through the project's docs/DESIGN.md).
//
// A node knows only its neighbours. It listens for its predecessor (unless
// it is the Head) and dials its successor (unless it is the Tail), with
// backoff, because neighbours start at very different times:
//
//	node, err := chainsync.Start(chainsync.Config{
//		Name:   "B",
//		Listen: ":7001",          // the predecessor A dials this
//		Next:   "10.0.0.3:7001",  // this node dials its successor C
//		Task: func(ctx context.Context, round string) error {
//			return upgradeSwitch(ctx) // runs after A's task, before C's
//		},
//	})
//	if err != nil { ... }
//	defer node.Close()
//	node.Ready("")                                // locally ready for the unnamed round
//	res, err := node.Wait(ctx, "")                // done, task failed, fault or stopped
//
// A task that returns an error halts the chain at that node: no COMPLETE is
// sent on, and the Result says why. Bad input from a peer never stops the
// node or moves a round: it is logged, that connection is closed, and the
// node waits for a well-behaved neighbour. A lost link is re-established
// and the last message sent on it is re-sent for every unfinished round, so
// a transient disconnect loses nothing and never runs a task twice.
//
// With Config.StateDir the node keeps each round's progress on disk,
// written and synced before the message or task it causes, so that a node
// restarted with the same directory carries on where its neighbours last
// saw it (Config.ResumeTask says what happens to a task the restart
// interrupted). Config.Heartbeat, TaskTimeout, ConnectTimeout and
// FaultPolicy detect and handle faults; every fault has a kind and names
// the neighbour it blames (Fault, Snapshot, TraceFault).
//
// The protocol logic itself is package protocol, which does no I/O; the
// line codec is package wire, TCP plumbing is package transport and TLS is
// package secure. The machine owns the protocol and its time: every
// round's state, the exit wave's delivery, restarted peers, the fault
// policy, faults and timeouts. One turn at a time owns each node's machine
// (loop.go): every input (the lines of a read, a connection accepted or
// lost, a task's end, the clock's tick, an API call) is a typed input
// for it, listed in one switch, and queued in one inbox; a turn runs on
// the loop goroutine, or on the node's own goroutine that posted the
// input if no turn is running (the loop's token). The stepper steps the
// machine, the store persists the turn's records with one fsync, then
// waiters are answered and tasks started, and after the turn each link's
// lines are written once, acting on the machine's actions and never
// asking it back. The tasks a turn started run on the goroutine that ran
// it, off the turn, and their ends are stepped together in one more turn;
// a task that runs long hands that goroutine's other work on.
//
// The files: node.go the API (Start, Ready, Wait, Snapshot, Close), the
// driver (the loop's side: its parts, the one place that steps, the
// machine's actions) and the fault book; loop.go the loop (its inbox and
// its turn, and the token that lets the goroutine that posts run it),
// the inputs, the switch, a line's step and the end of a turn (persist,
// act, flush); step.go the stepper, the only
// caller of Machine.Step, and the machine's read-only view; store.go the
// state directory (journal and steering file), state.go resuming from it;
// rounds.go the round book (waiters and results, dropped when the machine
// forgets the round); follow.go the rounds handed to a following
// application; result.go and undelivered.go results and their errors;
// task.go the task runner and the queue of tasks that wait for a slot;
// inline.go tasks run on the goroutine whose turn started them, and the
// hand-on of what waits when one runs long (a timer per batch, or the
// node's watch after a streak of quick tasks); undo.go the undo wave's
// part; link.go a link with its outbox and writer, writenow.go its
// non-blocking write (internal/rawio: raw system calls on a plain TCP
// link, and its reads too; a quiet TLS link's write when its socket has
// room for it); links.go the links, the
// loop's side of the connections; connect.go the connector (accepting,
// dialing and reading, off the loop) and the links' handlers; admission.go pending connections and the rate limit of
// what strangers make the node log; prevhost.go the predecessor's host
// check; identity.go the identity line; duplicate.go two processes in
// one place; health.go the clock (heartbeat lines and ticks) and timeout
// faults; liveness.go faults that clear and restart graces; notice.go
// fault notices and configuration mismatches; steer.go steering (holds,
// approvals, pause, cancel, retry); receipts.go the receipts part
// (signing, keeping and handing on each round's receipts); config.go the
// configuration; crew.go
// the node's goroutines, which Close waits for; panic.go the panic
// handler every goroutine runs under; doc.go this comment.
//
// Config.Listener and Config.Dial are the transport
// seam: tests put nodes on an in-memory network through them
// (docs/DESIGN.md, "The shape of the code"; docs/TESTING.md).
package chainsync
