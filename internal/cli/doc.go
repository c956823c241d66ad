// Package cli is the chainsync command: the command table, each
// command's flags and their validation, the environment mapping, what
// each command prints, and the node's side of the control socket (the
// Head's round opener and the steering requests). cmd/chainsync only
// calls Main, so tests can run the whole command in process.
//
// What a node starts as processes (its task, the reaper, the hooks) is
// internal/taskrun; the control socket's requests and replies are
// internal/control, shared with the clients here (open and the steering
// commands); the panic handler is internal/bug.
package cli
