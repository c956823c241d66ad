// Package bench measures ChainSync rounds against a raw-TCP floor measured
// in the same run and harness; it is what `chainsync bench` runs.
//
// A run places n agents on loopback, either as goroutines of this process
// (ModeInproc) or as one OS process each (ModeProcs, started by re-running
// the command with a hidden subcommand). Every agent is one chain node plus
// one relay hop: the relay has the same topology as the chain (one TCP
// connection per adjacent pair, the lower index dials), and a relay "round"
// is a line sent twice there and back, 4(n-1) one-way hops, the messages a
// fault-free ChainSync round sends. The relay does nothing but read a line
// and write it on, with the same raw system calls as the nodes' links
// (internal/rawio), so its latency is the floor any protocol over those
// links can reach; the Head agent alternates relay rounds and chain rounds
// so that both see the same machine at the same moment.
//
// With a task sleep D, chain nodes run a task that sleeps D, and the relay
// sleeps D at each hop of the third pass (where the chain runs its tasks),
// so the floor includes the tasks too.
//
// Every node records when each of its tasks started and ended; a run
// checks that every node ran every round's task exactly once and that,
// within each round, node i's task started only after node i-1's ended.
package bench
