//go:build unix

package main

// End-to-end tests of chainsync run's restart and stop machinery (issue 8;
// docs/DESIGN.md "Restarts and durable state"): the state directory's lock,
// a damaged journal, a torn last record, SIGHUP and SIGQUIT, a hanging
// --on-fault hook, and an exit wave that cannot be delivered.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/protocol"

	"github.com/chainsync-go/chainsync/internal/testnet"
)

// TestStateDirHeldByAnother: "One process per state directory (a lock)":
// a second process started with the same command line, while the first
// runs, exits 1 and says which process holds the directory; the first is
// not disturbed.
func TestStateDirHeldByAnother(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addrs := freeAddrs(t, 2)
	args := []string{"run", "--name", "B", "--listen", addrs[1], "--prev", addrs[0],
		"--state-dir", filepath.Join(dir, "state"), "--", "true"}
	first := startProc(t, "first", nil, args...)
	first.waitLog(t, 10*time.Second, "node started", containsAll("node started"))
	second := startProc(t, "second", nil, args...)
	if code := second.wait(t, 10*time.Second); code != 1 {
		t.Fatalf("second process on the same --state-dir exited %d, want 1", code)
	}
	msg := second.err.String()
	holder := fmt.Sprintf("pid %d", first.cmd.Process.Pid)
	if !strings.Contains(msg, "in use") || !strings.Contains(msg, holder) {
		t.Errorf("the second process's error does not say the directory is in use and held by %s:\n%s", holder, msg)
	}
	if !first.running() {
		t.Fatalf("the first process exited (%d)", first.code)
	}
	first.signal(t, syscall.SIGTERM)
	if code := first.wait(t, 10*time.Second); code != 130 {
		t.Errorf("the first process exited %d after SIGTERM, want 130", code)
	}
}

// frames returns the offsets of a journal's frames (package journal's
// doc: 4-byte big-endian length, 4-byte CRC-32C, payload), and the end.
func frames(t *testing.T, b []byte) []int {
	t.Helper()
	var offs []int
	for off := 0; off < len(b); {
		if len(b)-off < 8 {
			t.Fatalf("journal ends in a partial frame header at %d", off)
		}
		offs = append(offs, off)
		off += 8 + int(binary.BigEndian.Uint32(b[off:]))
	}
	return append(offs, len(b))
}

// TestJournalCorrupt: "any other damage stops the node with a clear
// error, never a guess". A byte flipped anywhere but in the last record
// (in a length, a checksum, a payload, the middle of the file) makes the
// restarted node exit 1 with an error that says the journal is corrupt and
// what to do; the journal is left as it was and no task runs.
func TestJournalCorrupt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	out := filepath.Join(dir, "ran")
	args := []string{"run", "--name", "S", "--rounds", "3", "--state-dir", state, "--",
		"sh", "-c", `echo "$CHAINSYNC_ROUND" >> "$OUT"`}
	env := []string{"OUT=" + out}
	if code := startProc(t, "S", env, args...).wait(t, 10*time.Second); code != 0 {
		t.Fatalf("first run exited %d", code)
	}
	orig, err := os.ReadFile(filepath.Join(state, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	offs := frames(t, orig)
	if len(offs) < 5 {
		t.Fatalf("journal has %d frames, want at least 4", len(offs)-1)
	}
	lastFrame := offs[len(offs)-2]
	flips := map[string]int{
		"length of the second frame":   offs[1] + 3,
		"checksum of the second frame": offs[1] + 5,
		"payload of a middle frame":    offs[len(offs)/2] + 10,
		"middle of the file":           len(orig) / 2,
	}
	for what, at := range flips {
		if at >= lastFrame {
			t.Fatalf("%s (offset %d) is in the last frame (from %d)", what, at, lastFrame)
		}
		t.Run(strings.ReplaceAll(what, " ", "-"), func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "state")
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
			bad := bytes.Clone(orig)
			bad[at] ^= 0x01
			jpath := filepath.Join(d, "journal")
			if err := os.WriteFile(jpath, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			ran := filepath.Join(t.TempDir(), "ran")
			a := append([]string(nil), args...)
			a[6] = d
			p := startProc(t, "S", []string{"OUT=" + ran}, a...)
			if code := p.wait(t, 10*time.Second); code != 1 {
				t.Fatalf("exit %d with byte %d flipped (%s), want 1", code, at, what)
			}
			msg := p.err.String()
			if !strings.Contains(msg, "corrupt") || !strings.Contains(msg, jpath) || !strings.Contains(msg, "move the directory aside") {
				t.Errorf("the error does not say the journal %s is corrupt and what to do:\n%s", jpath, msg)
			}
			if now, _ := os.ReadFile(jpath); !bytes.Equal(now, bad) {
				t.Errorf("the refused journal was changed")
			}
			if exists(jpath+".tmp") || exists(ran) {
				t.Errorf("something was written or run (journal.tmp %v, task %v)", exists(jpath+".tmp"), exists(ran))
			}
		})
	}
}

// TestJournalTornLastRecordResumes: "A torn last record is dropped". A
// node is killed inside its task; then the journal gets what a crash
// while writing the next record leaves: that record's first bytes. The
// restarted node drops them, says so, finds its task interrupted, takes
// it as done (--resume-task done), and exits 0 without running it again.
func TestJournalTornLastRecordResumes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	task := `date +%s%N >> "$DIR/S.start"; : > "$DIR/S.held"; while [ ! -e "$DIR/release" ]; do sleep 0.05; done; date +%s%N >> "$DIR/S.end"`
	args := []string{"run", "--name", "S", "--state-dir", state, "--resume-task", "done", "--", "sh", "-c", task}
	env := []string{"DIR=" + dir}
	p := startProc(t, "S", env, args...)
	waitFile(t, filepath.Join(dir, "S.held"), 10*time.Second)
	_ = p.cmd.Process.Kill()
	p.wait(t, 5*time.Second)
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	jpath := filepath.Join(state, "journal")
	whole, err := os.ReadFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	ents, torn, err := journal.Decode(whole)
	// The last round record, in START, is followed by the time the task
	// started (docs/JOURNAL.md, "Records").
	if err != nil || torn != 0 || len(ents) < 3 || ents[len(ents)-2].Record.State != protocol.StateStart ||
		ents[len(ents)-1].TaskTime == nil || !ents[len(ents)-1].TaskTime.Start {
		t.Fatalf("journal after the kill: %d entries, torn %d, err %v; want its last record in START, then the task's start time", len(ents), torn, err)
	}
	// The record the node would have written when the task ended.
	payload := journal.EncodeRecord(protocol.Record{State: protocol.StateDone, LocalReady: true})
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	frame = binary.BigEndian.AppendUint32(frame, crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)))
	frame = append(frame, payload...)
	f, err := os.OpenFile(jpath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(frame[:len(frame)-7]); err != nil {
		t.Fatal(err)
	}
	f.Close()

	p = startProc(t, "S", env, args...)
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("restarted node exited %d, want 0", code)
	}
	p.waitLog(t, time.Second, "dropped a torn last record", containsAll("torn last record", "bytes="+strconv.Itoa(len(frame)-7)))
	p.waitLog(t, time.Second, "resumed, interrupted task taken as done", containsAll("interrupted", "--resume-task done"))
	if st, en := readLines(t, filepath.Join(dir, "S.start")), readLines(t, filepath.Join(dir, "S.end")); len(st) != 1 || len(en) != 0 {
		t.Errorf("task started %d and ended %d times, want once, interrupted", len(st), len(en))
	}
}

// TestStopSignalsReachTaskGroup: SIGHUP and SIGQUIT stop a node like
// SIGTERM (issue 8: "never exit 2"): it logs the signal, passes it to its
// task's whole process group, and exits 130; nothing of the task survives.
// (A background child of a non-interactive shell ignores SIGQUIT by POSIX
// rule, so only SIGHUP's case checks that the child got the signal; in
// both, the group is gone once the node has exited.)
func TestStopSignalsReachTaskGroup(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			f := filepath.Join(dir, "got")
			mark := fmt.Sprintf("%09d", time.Now().UnixNano()%1e9)
			// The child records SIGHUP at once (a trapped signal ends
			// wait), and the main process waits for it before exiting:
			// the node kills whatever is left once the main process ends.
			task := `sh -c 'trap "echo child-HUP >> \"$F\"; exit 1" HUP; sleep "3600.$MARK" & : > "$F.child"; wait' &
child=$!
trap 'echo main-HUP >> "$F"; wait $child; exit 1' HUP
trap 'echo main-QUIT >> "$F"; exit 1' QUIT
while [ ! -e "$F.child" ]; do sleep 0.01; done
: > "$F.up"; wait`
			p := startProc(t, "S", []string{"F=" + f, "MARK=" + mark}, "run", "--name", "S", "--", "sh", "-c", task)
			// Up is enough: a signal that comes before sh reaches its wait
			// is trapped all the same, between commands.
			waitFile(t, f+".up", 10*time.Second)
			p.signal(t, sig)
			if code := p.wait(t, 15*time.Second); code != 130 {
				t.Fatalf("exit %d after %v, want 130", code, sig)
			}
			p.waitLog(t, time.Second, "interrupted", containsAll("interrupted", "signal="))
			got := readLines(t, f)
			name := map[syscall.Signal]string{syscall.SIGHUP: "HUP", syscall.SIGQUIT: "QUIT"}[sig]
			if !containsLine(got, "main-"+name) {
				t.Errorf("the task did not get %v (it recorded %q)", sig, got)
			}
			if sig == syscall.SIGHUP && !containsLine(got, "child-HUP") {
				t.Errorf("the task's child did not get SIGHUP: the signal did not reach the group (recorded %q)", got)
			}
			mxCheckNoOrphans(t, mark)
		})
	}
}

func containsLine(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// TestOnFaultHookTimeout: --on-fault never blocks the node's exit: a
// hook that hangs is killed, with everything it started, after
// --on-fault-timeout, and the node exits with its round's status (3: the
// task failed).
func TestOnFaultHookTimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mark := fmt.Sprintf("%09d", time.Now().UnixNano()%1e9+7)
	hook := `sleep "3600.${MARK}1" & sleep "3600.${MARK}2"; echo finished > "$DIR/hook"`
	start := time.Now()
	p := startProc(t, "S", []string{"DIR=" + dir, "MARK=" + mark}, "run", "--name", "S",
		"--on-fault", hook, "--on-fault-timeout", "300ms", "--", "false")
	if code := p.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("exit %d, want 3 (task failed)", code)
	}
	took := time.Since(start)
	p.waitLog(t, time.Second, "hook killed after --on-fault-timeout", containsAll("killed after --on-fault-timeout"))
	if took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("the node exited %v after start; want just after the hook's 300ms timeout", took.Round(time.Millisecond))
	}
	if exists(filepath.Join(dir, "hook")) {
		t.Errorf("the hook ran to its end: it was not killed")
	}
	mxCheckNoOrphans(t, mark)
	t.Logf("exit 3 after %v with a hanging hook and --on-fault-timeout 300ms", took.Round(time.Millisecond))
}

// TestStopWhileHookRuns: "--on-fault gets a timeout and never blocks
// shutdown": a node whose round is over and that waits for its fault hook
// (--on-fault-timeout 1h) stops at SIGTERM like anywhere else: it logs
// it, kills the hook's process group and exits 130.
func TestStopWhileHookRuns(t *testing.T) {
	t.Parallel()
	mark := fmt.Sprintf("%09d", time.Now().UnixNano()%1e9+11)
	p := startProc(t, "S", []string{"MARK=" + mark}, "run", "--name", "S",
		"--on-fault", `sleep "3600.${MARK}3"`, "--on-fault-timeout", "1h", "--", "false")
	p.waitLog(t, 10*time.Second, "the node waiting for its hook", containsAll("waiting for the hooks still running"))
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 5*time.Second); code != 130 {
		t.Fatalf("exit %d, want 130 (interrupted)", code)
	}
	p.waitLog(t, time.Second, "the stop logged", containsAll("interrupted while the hooks ran"))
	mxCheckNoOrphans(t, mark)
}

// TestExitWaveUndelivered: "A node has finished only when its last
// message of the round (the exit-wave COMPLETE to its predecessor) was
// handed to a live connection; a node that could not deliver it within its
// linger time reports a fault, not success." The Head of a two-node chain
// is killed while the Tail's task runs and never comes back: the Tail
// exits 4 after --linger, saying the exit wave was not delivered.
func TestExitWaveUndelivered(t *testing.T) {
	t.Parallel()
	for _, withState := range []bool{false, true} {
		t.Run(fmt.Sprintf("state=%v", withState), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			names := []string{"A", "B"}
			addrs := freeAddrs(t, 2)
			task := `if [ "$CHAINSYNC_NODE" = B ]; then : > "$DIR/B.held"; while [ ! -e "$DIR/release" ]; do sleep 0.05; done; fi`
			procs := make([]*proc, 2)
			for i := range procs {
				args := append([]string{"run"}, placeArgs("prevnext", names, addrs, i)...)
				args = append(args, "--linger", "1s")
				if withState {
					args = append(args, "--state-dir", filepath.Join(dir, "state."+names[i]))
				}
				procs[i] = startProc(t, names[i], []string{"DIR=" + dir}, append(args, "--", "sh", "-c", task)...)
			}
			waitFile(t, filepath.Join(dir, "B.held"), 10*time.Second)
			_ = procs[0].cmd.Process.Kill()
			procs[0].wait(t, 5*time.Second)
			released := time.Now()
			if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if code := procs[1].wait(t, 15*time.Second); code != 4 {
				t.Fatalf("the Tail exited %d, want 4 (the exit wave was not delivered)", code)
			}
			if took := time.Since(released); took < time.Second {
				t.Errorf("the Tail gave up %v after its task, before --linger 1s", took)
			}
			procs[1].waitLog(t, time.Second, "exit wave not delivered", containsAll("exit wave was not delivered"))
		})
	}
}

// TestRestartedPeerNamed: "A neighbour that sends a message older than
// the last one it sent on that link for that round (READY after COMPLETE)
// has restarted and lost its state. That is reported as such, in those
// words, and never answered." The test plays the Tail's predecessor: a
// whole round, then a new connection that sends READY again, as a
// predecessor restarted without --state-dir does. The Tail logs at WARN
// that it restarted, answers nothing, runs nothing, and still exits 0.
func TestRestartedPeerNamed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addrs := freeAddrs(t, 2)
	p := startProc(t, "T", []string{"DIR=" + dir}, "run", "--name", "T", "--listen", addrs[1], "--prev", addrs[0],
		"--linger", "3s", "--", "sh", "-c", `echo ran >> "$DIR/ran"`)
	c := testnet.DialPeer(t, addrs[1], 10*time.Second)
	c.Send(t, "READY\n")
	c.Expect(t, "START\n")
	c.Send(t, "COMPLETE\n")
	c.Expect(t, "COMPLETE\n")
	p.waitLog(t, 5*time.Second, "round over", containsAll("round over", "status=done"))
	c.HangUp()

	again := testnet.DialPeer(t, addrs[1], 5*time.Second)
	again.Send(t, "READY\n")
	line := p.waitLog(t, 5*time.Second, "restarted at WARN", containsAll("WARN", "restarted without its state"))
	if peer := again.Addr(); strings.Count(line, peer) != 2 { // in the message and as peer=
		t.Errorf("the warning should name the restarted peer %s once in its text (and once as peer=): %s", peer, line)
	}
	again.HangUp()
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Errorf("exit %d, want 0 (its round was done)", code)
	}
	// Not answered: the Tail logs a message before it sends it, and sent
	// only START and COMPLETE, both before the restart.
	if n := p.sentCount(""); n != 2 {
		t.Errorf("the Tail logged %d messages sent, want 2 (START and COMPLETE of the first connection)", n)
	}
	p.logOrder(t, "sent COMPLETE to pred", "restarted without its state")
	if got := again.Received(); got != "" {
		t.Errorf("the restarted peer's connection got %q, want nothing", got)
	}
	if got := readLines(t, filepath.Join(dir, "ran")); len(got) != 1 {
		t.Errorf("the task ran %d times, want once", len(got))
	}
	t.Logf("logged: %s", line)
}

// supervisedB starts the chain names at addrs with --state-dir and
// --resume-task done and task (sh -c, $DIR is dir), B under chainsync
// supervise --backoff 100ms; it returns the processes in chain order and
// their environment (chainsync on PATH, as the docs call it).
func supervisedB(t *testing.T, dir string, names, addrs []string, task string) ([]*proc, []string) {
	t.Helper()
	env := []string{"DIR=" + dir, "PATH=" + filepath.Dir(bin) + ":" + os.Getenv("PATH")}
	procs := make([]*proc, 3)
	for i := range procs {
		args := append(placeArgs("chain", names, addrs, i), "--state-dir", filepath.Join(dir, "state."+names[i]),
			"--resume-task", "done", "--", "sh", "-c", task)
		if names[i] == "B" {
			procs[i] = startProc(t, "B (supervised)", env, append([]string{"supervise", "--backoff", "100ms", "--", "chainsync", "run"}, args...)...)
		} else {
			procs[i] = startProc(t, names[i], env, append([]string{"run"}, args...)...)
		}
	}
	return procs, env
}

// TestSupervisedSwitchRestartsItself: docs/RESTARTS.md's switch-stack
// example. B's task restarts B's own node (kill -9 $PPID, as a switch
// upgrade restarts the management plane the node runs in) and waits to be
// taken down with it. B runs under chainsync supervise with --state-dir
// and --resume-task done: supervise starts B again (logging the 137), B
// finds its task interrupted, takes it as done and sends COMPLETE on
// (the draft's "Phase 3": C's task starts only after B's COMPLETE); C
// runs its task after B's, every node and supervise exit 0, and B's task
// ran once.
func TestSupervisedSwitchRestartsItself(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names := nodeNames(3)
	addrs := freeAddrs(t, 3)
	task := `date +%s%N >> "$DIR/$CHAINSYNC_NODE.start"
if [ "$CHAINSYNC_NODE" = B ]; then kill -9 $PPID; sleep 30; fi
date +%s%N >> "$DIR/$CHAINSYNC_NODE.end"`
	procs, _ := supervisedB(t, dir, names, addrs, task)
	for i, p := range procs {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", names[i], code)
		}
	}
	procs[1].waitLog(t, time.Second, "supervise restarting B", containsAll("chainsync supervise: node exited 137 (killed by signal 9", "starting it again"))
	procs[1].waitLog(t, time.Second, "B resuming its task as done", containsAll("interrupted", "--resume-task done"))
	if n := procs[1].logCount("chainsync supervise: node exited"); n != 1 {
		t.Errorf("supervise restarted B %d times, want once", n)
	}
	if st, en := readLines(t, filepath.Join(dir, "B.start")), readLines(t, filepath.Join(dir, "B.end")); len(st) != 1 || len(en) != 0 {
		t.Errorf("B's task started %d and ended %d times, want once, ended by its own restart", len(st), len(en))
	}
	a, c := nanos(t, filepath.Join(dir, "A.end")), nanos(t, filepath.Join(dir, "C.start"))
	b := nanos(t, filepath.Join(dir, "B.start"))
	if len(a) != 1 || len(b) != 1 || len(c) != 1 || !(a[0] < b[0] && b[0] < c[0]) {
		t.Errorf("tasks out of order or not once each: A ended %v, B started %v, C started %v", a, b, c)
	}
}

// TestSuperviseKilledNodeAndStopE2E: a node under chainsync supervise
// killed with kill -9 from outside, inside its task, is started again and
// the round completes ("Phase 3": C runs after B's task, once); a
// supervised node told to stop (SIGTERM to supervise) exits 130, and
// supervise with it, restarting nothing.
func TestSuperviseKilledNodeAndStopE2E(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names := nodeNames(3)
	addrs := freeAddrs(t, 3)
	task := `echo "$CHAINSYNC_NODE" >> "$DIR/ran"
echo $PPID > "$DIR/$CHAINSYNC_NODE.node.tmp"; mv "$DIR/$CHAINSYNC_NODE.node.tmp" "$DIR/$CHAINSYNC_NODE.node"
if [ "$CHAINSYNC_NODE" = B ]; then sleep 30; fi`
	procs, env := supervisedB(t, dir, names, addrs, task)
	waitFile(t, filepath.Join(dir, "B.node"), 20*time.Second)
	b, err := os.ReadFile(filepath.Join(dir, "B.node"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i, p := range procs {
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d, want 0", names[i], code)
		}
	}
	if n := procs[1].logCount("chainsync supervise: node exited 137"); n != 1 {
		t.Errorf("supervise restarted B %d times after its kill -9, want once", n)
	}
	if got := readLines(t, filepath.Join(dir, "ran")); !slices.Equal(got, []string{"A", "B", "C"}) {
		t.Errorf("tasks ran %v, want A B C once each", got)
	}

	// A stop reaches the node through supervise, and nothing restarts.
	sole := freeAddrs(t, 1)
	p := startProc(t, "supervised Head", env, "supervise", "--backoff", "100ms", "--", "chainsync", "run",
		"--chain", "A="+sole[0]+",B="+addrs[1], "--name", "A", "--", "true")
	p.waitLog(t, 10*time.Second, "the node started", containsAll("node started"))
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 20*time.Second); code != 130 {
		t.Errorf("supervise exited %d after SIGTERM, want 130 (the node's)", code)
	}
	if n := p.logCount("starting it again"); n != 0 {
		t.Errorf("supervise restarted a node that was told to stop (%d times)", n)
	}
	p.waitLog(t, time.Second, "the node's own stop", containsAll("interrupted; stopping", "signal=terminated"))
}

// TestResumeTaskPolicies: "A round whose task had started but has no
// recorded end when the node restarts was interrupted. What that means is
// the operator's policy: fail (the default: the chain halts there), done
// ..., or rerun." B of A -> B -> C is killed inside its task and restarted
// with the same state directory: with the default (fail) it exits 3 and C
// never runs its task; with rerun B runs its task again, after the
// interrupted run was gone, and the chain completes. (done: the matrix.)
// With the extension lines (--heartbeat), the restarted B's fault notice
// reaches A and C, whose links to B were down when B failed the round (A
// re-dials B, B dials C): both halt (exit 4, "B reported that B's task
// failed") instead of waiting for ever.
func TestResumeTaskPolicies(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"", "rerun", "heartbeat"} {
		name := policy
		switch name {
		case "":
			name = "default-fail"
		case "heartbeat":
			name = "default-fail-heartbeat"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			names := nodeNames(3)
			addrs := freeAddrs(t, 3)
			task := `date +%s%N >> "$DIR/$CHAINSYNC_NODE.start"
if [ "$CHAINSYNC_NODE" = B ] && [ ! -e "$DIR/release" ]; then : > "$DIR/B.held"; while [ ! -e "$DIR/release" ]; do sleep 0.05; done; fi
date +%s%N >> "$DIR/$CHAINSYNC_NODE.end"`
			run := func(i int) *proc {
				args := append([]string{"run"}, placeArgs("prevnext", names, addrs, i)...)
				args = append(args, "--state-dir", filepath.Join(dir, "state."+names[i]))
				switch policy {
				case "heartbeat":
					args = append(args, "--heartbeat", "300ms")
				case "":
				default:
					args = append(args, "--resume-task", policy)
				}
				return startProc(t, names[i], []string{"DIR=" + dir}, append(args, "--", "sh", "-c", task)...)
			}
			procs := []*proc{run(0), run(1), run(2)}
			waitFile(t, filepath.Join(dir, "B.held"), 10*time.Second)
			_ = procs[1].cmd.Process.Kill()
			procs[1].wait(t, 5*time.Second)
			if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			procs[1] = run(1)
			if policy == "heartbeat" {
				for i, want := range []int{4, 3, 4} {
					if code := procs[i].wait(t, 15*time.Second); code != want {
						t.Errorf("%s exited %d, want %d", names[i], code, want)
					}
				}
				for _, i := range []int{0, 2} {
					if !strings.Contains(procs[i].err.String(), "B reported that B's task failed") {
						t.Errorf("%s does not say that B's task failed:\n%s", names[i], procs[i].err.String())
					}
				}
				if exists(filepath.Join(dir, "C.start")) {
					t.Errorf("C ran its task although B's round failed")
				}
				return
			}
			if policy == "" {
				if code := procs[1].wait(t, 10*time.Second); code != 3 {
					t.Fatalf("B exited %d after a restart in its task with --resume-task fail, want 3", code)
				}
				procs[1].waitLog(t, time.Second, "the round failed", containsAll("interrupted", "--resume-task fail"))
				// C starts only on a COMPLETE from B, which B could have
				// sent only on its connection to C: once C has seen that
				// connection end (after the killed B's), whatever B sent on
				// it has been read.
				waitFor(t, 10*time.Second, "C seeing the restarted B's connection end", func() bool {
					out := procs[2].err.String()
					return strings.Count(out, "predecessor link down")+strings.Count(out, "connection closed before sending a protocol line") >= 2
				})
				if exists(filepath.Join(dir, "C.start")) || strings.Contains(procs[2].err.String(), "task started") {
					t.Errorf("C ran its task although B's round failed")
				}
				mxStop(t, []*proc{procs[0], procs[2]})
				return
			}
			for i, p := range procs {
				if code := p.wait(t, 20*time.Second); code != 0 {
					t.Errorf("%s exited %d, want 0", names[i], code)
				}
			}
			bs, be := nanos(t, filepath.Join(dir, "B.start")), nanos(t, filepath.Join(dir, "B.end"))
			cs := nanos(t, filepath.Join(dir, "C.start"))
			if len(bs) != 2 || len(be) != 1 || len(cs) != 1 || !(bs[0] < bs[1] && be[0] < cs[0]) {
				t.Errorf("with rerun, want B's task started twice, ended once, and C's after it: B %v / %v, C %v", bs, be, cs)
			}
		})
	}
}
