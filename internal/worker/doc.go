// Package worker keeps a node's persistent worker: a task command started
// once and given one request a round, as one JSON object a line on its
// standard input, answered on its standard output (docs/WORKERS.md has the
// protocol, version 1).
//
// A Manager starts the worker through a Spawn function (the node's task
// runner: its own process group and cgroup, the reaper, the parent-death
// signal), says hello, and then runs each round's task as a request:
// matched by id, any number outstanding, cancelled on its context's
// deadline and, past a grace, ended by stopping the worker. A worker that
// ends or breaks the protocol fails the requests it held and is started
// again, with backoff, before the next request is written.
//
// # Usage
//
//  1. New with a Config; Start, in its own goroutine's care, runs the
//     worker for the Manager's life.
//  2. Up is closed once the first worker answered hello; until then the
//     node is not locally ready. Failed reports a worker that could not
//     start (the node exits).
//  3. Run is the node's task function.
//  4. Close stops the worker and waits until it is gone.
package worker
