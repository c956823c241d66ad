package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chainsync-go/chainsync"
	"github.com/chainsync-go/chainsync/internal/journal"
	"github.com/chainsync-go/chainsync/internal/status"
	"github.com/chainsync-go/chainsync/protocol"
)

const journalUsage = `Usage: chainsync journal DIR [--json]

Shows what a node's state directory (chainsync run --state-dir DIR)
remembers, without starting a node: for every round, its state, whether
this node's task started and how it ended, when the task started and
ended, the round's outcome and fault, whether the exit wave was
delivered; and how the node ended (normally, at what time, or not:
running, or killed). It reads the files and changes nothing, and takes no
lock, so it is safe beside the node running on DIR.

A round reopened by chainsync open --retry shows the retry's own outcome,
how often it was retried and by whom, and what became of this node's work
in the attempt before (undone, or not).

The times are those of the task's start and end as this node recorded
them, by its clock, to the millisecond ("-": not recorded; a journal
written by a version before they were recorded has none).

Examples:
  chainsync journal /var/lib/chainsync/B
  chainsync journal --json /var/lib/chainsync/B | jq '.rounds[] | select(.outcome != "done")'

Exit status: 0 read; 1 the directory cannot be read; 2 usage error, a
directory that is not a state directory, or a damaged journal (where it is
damaged is said, and the rounds before the damage are printed).

Flags:
`

type journalOpts struct{ json bool }

func (o *journalOpts) flags(fs *flag.FlagSet) {
	fs.BoolVar(&o.json, "json", false, "print JSON: {dir, name, role, node, ended_at, rounds: [...], damage}")
}

// journalRound is one round of chainsync journal's output.
type journalRound struct {
	Round        string `json:"round"`
	Seq          uint64 `json:"seq,omitempty"` // the order the node learned its rounds in
	State        string `json:"state"`
	LocallyReady bool   `json:"locally_ready"`
	// Task is not-started, running-or-interrupted, succeeded, failed or
	// stopped; TaskText says it for people.
	Task     string `json:"task"`
	TaskText string `json:"task_text"`
	// TaskStarted and TaskEnded: when this node's task last started and
	// ended, as this node recorded them (RFC 3339, UTC, milliseconds);
	// omitted when not recorded.
	TaskStarted string `json:"task_started,omitempty"`
	TaskEnded   string `json:"task_ended,omitempty"`
	Outcome     string `json:"outcome"`
	Fault       string `json:"fault,omitempty"`
	ExitWave    string `json:"exit_wave"`
	// The last message sent to and received from each neighbour.
	LastSentPred string `json:"last_sent_pred,omitempty"`
	LastSentSucc string `json:"last_sent_succ,omitempty"`
	LastRecvPred string `json:"last_recv_pred,omitempty"`
	LastRecvSucc string `json:"last_recv_succ,omitempty"`
	// Undo: where the round's undo wave stood here (--undo), "" none.
	Undo string `json:"undo,omitempty"`
	// Retries: how many retries reopened the round here (0: none;
	// chainsync open --retry); RetryBy: who asked for the latest, and at
	// which node ("ann at A"); PriorUndo: the undo of this node's work in
	// the attempt before it, as Undo says one ("" none was undone).
	// Task, TaskText and Outcome are the latest attempt's.
	Retries   int    `json:"retries,omitempty"`
	RetryBy   string `json:"retry_by,omitempty"`
	PriorUndo string `json:"prior_undo,omitempty"`
	// Cancelled: the Head cancelled the round while this node's task of
	// it ran (the round ended when the task did).
	Cancelled bool `json:"cancelled_while_running,omitempty"`
	// TaskRuns: every run of the task in the round, oldest first, when
	// there was more than one or the last was cut short by the node's
	// death; else omitted (TaskStarted and TaskEnded say it).
	TaskRuns []taskRun `json:"task_runs,omitempty"`
	// started and ended are TaskStarted and TaskEnded, for the table.
	started, ended time.Time
}

// taskRun is one run of a round's task in chainsync journal --json: when
// it started, ended, and when the node found it cut short by its death
// (RFC 3339, UTC, milliseconds; omitted when not recorded).
type taskRun struct {
	Started     string `json:"started,omitempty"`
	Ended       string `json:"ended,omitempty"`
	Interrupted string `json:"interrupted,omitempty"`
}

// journalDoc is chainsync journal's output.
type journalDoc struct {
	Dir  string `json:"dir"`
	Name string `json:"name"`
	Role string `json:"role"`
	// Node says how the node ended, or that it runs.
	Node    string `json:"node"`
	EndedAt string `json:"ended_at,omitempty"` // RFC 3339, UTC
	// ExitStatus: with EndedAt, the exit status chainsync run ends with
	// for the rounds the journal holds (0 all done, 3 a task failed here,
	// 4 a fault, 5 cancelled at the Head).
	ExitStatus *int           `json:"exit_status,omitempty"`
	Holder     string         `json:"holder,omitempty"` // the lock file's text
	Bytes      int            `json:"journal_bytes"`
	Torn       int            `json:"torn_bytes,omitempty"`
	Rounds     []journalRound `json:"rounds"`
	Damage     string         `json:"damage,omitempty"`
	// Steering: what the steering file says (steer.go), in words.
	Steering []string `json:"steering,omitempty"`
}

func journalFlags(fs *flag.FlagSet) { (&journalOpts{}).flags(fs) }

// journalMain is chainsync journal.
func journalMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("journal", flag.ContinueOnError)
	quietFlags(fs)
	var o journalOpts
	o.flags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return flagFailed(stdout, stderr, fs, "journal", err)
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "chainsync journal: give one state directory (a node's --state-dir), e.g. chainsync journal /var/lib/chainsync/B\n(see chainsync journal --help)\n")
		return ExitUsage
	}
	dir := pos[0]
	snap, err := journal.Read(dir)
	switch {
	case errors.Is(err, journal.ErrNotStateDir), errors.Is(err, journal.ErrUnsafe), errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(stderr, "chainsync journal: %s\n", strings.TrimPrefix(err.Error(), "chainsync: "))
		return ExitUsage
	case err != nil:
		fmt.Fprintf(stderr, "chainsync journal: %s\n", strings.TrimPrefix(err.Error(), "chainsync: "))
		return ExitError
	}
	doc := describeJournal(dir, snap)
	if o.json {
		writeJSON(stdout, doc)
	} else {
		printJournal(stdout, doc, snap)
	}
	if snap.Damage != nil {
		fmt.Fprintf(stderr, "chainsync journal: %s; the rounds printed are those of the records before the damage (a node refuses to start on it: move the directory aside to start it afresh)\n",
			strings.TrimPrefix(snap.Damage.Error(), "chainsync: "))
		return ExitUsage
	}
	return ExitOK
}

func describeJournal(dir string, snap *journal.Snapshot) journalDoc {
	st := snap.State
	doc := journalDoc{Dir: dir, Name: snap.Header.Name, Role: snap.Header.Role, Holder: snap.Holder,
		Bytes: snap.Bytes, Torn: st.Dropped, Rounds: []journalRound{}}
	if snap.Damage != nil {
		doc.Damage = snap.Damage.Error()
	}
	if st.Ended != 0 {
		at := time.Unix(st.Ended, 0).UTC()
		doc.EndedAt = at.Format(time.RFC3339)
		code, why := endStatus(st)
		doc.ExitStatus = &code
		doc.Node = "ended normally at " + at.Format("2006-01-02 15:04:05 UTC") + ", every round over"
		if code != ExitOK {
			doc.Node = fmt.Sprintf("ended at %s, every round over, not all done: exit status %d (%s)", at.Format("2006-01-02 15:04:05 UTC"), code, why)
		}
	} else {
		doc.Node = holderText(dir, snap)
	}
	for _, r := range st.Rounds {
		doc.Rounds = append(doc.Rounds, describeRound(snap.Header.Role, r, st.Faults[r.Round], st.Found[r.Round], st.TaskTimes[r.Round]))
	}
	doc.Steering = journalSteering(dir) // steer.go
	return doc
}

// describeRound says what a round's last record tells of it at a node
// of role, with the fault record's kind (fault; "" none) and the task's
// runs as its task time records say.
//
// The record's Started says the task started in the round's latest
// attempt: a round whose turn came but that waited for a person (an
// approval, a hold, a pause) and was then cancelled or aborted has the
// predecessor's COMPLETE (the Head: the successor's START) and never
// started. A journal written before records kept Started says it by a
// task time record (such a journal has no retries).
func describeRound(role string, r protocol.Record, fault string, found journal.Fault, tt journal.TaskTimes) journalRound {
	hasPred := role == "middle" || role == "tail"
	hasSucc := role == "head" || role == "middle"
	jr := journalRound{Round: r.Round, Seq: r.Seq, State: r.State.String(), LocallyReady: r.LocalReady, Fault: fault,
		LastSentPred: cmdName(r.LastPred), LastSentSucc: cmdName(r.LastSucc), LastRecvPred: cmdName(r.RecvPred), LastRecvSucc: cmdName(r.RecvSucc)}
	started := r.Started || r.Retries == 0 && !tt.Started.IsZero()
	// The task succeeded once COMPLETE went on (to the successor, or
	// back from the Tail).
	succeeded := r.LastSucc == protocol.Complete
	if !hasSucc {
		succeeded = r.LastPred == protocol.Complete || role == "single" && r.State >= protocol.StateComplete && r.State <= protocol.StateDone
	}
	wave := r.Undo.Wave
	switch {
	case r.State == protocol.StateFailed:
		jr.Task, jr.TaskText = "failed", "started and failed"
		if !started {
			jr.TaskText = "failed with no start recorded (denied before it started, or a journal older than task times)"
		}
		if jr.Fault == "" {
			// The failure is this node's own: no fault record says so.
			jr.Fault = string(chainsync.FaultTaskFailed)
			if wave.Kind != "" && r.Undo.Phase != protocol.PhaseNone {
				jr.Fault = wave.Kind
			}
		}
		if jr.Fault != string(chainsync.FaultTaskFailed) {
			jr.TaskText += " (" + jr.Fault + ")"
		}
	case r.State == protocol.StateComplete || r.State == protocol.StateDone || succeeded:
		jr.Task, jr.TaskText = "succeeded", "started and succeeded"
	case r.Cancelled && r.State == protocol.StateStart:
		jr.Task, jr.TaskText = "running-or-interrupted", "started; the Head cancelled the round while it ran: the round ends when the task ends"
	case r.Cancelled && r.State == protocol.StateAborted:
		jr.Task, jr.TaskText = "stopped", "started; the Head cancelled the round while it ran, and the round ended when the task ended"
	case r.State == protocol.StateStart && !tt.Interrupted.IsZero():
		jr.Task, jr.TaskText = "running-or-interrupted", "started; the node died while it ran (its restart found it so), no end recorded since"
	case r.State == protocol.StateStart:
		jr.Task, jr.TaskText = "running-or-interrupted", "started, no end recorded: running now, or interrupted by the node's death"
	case r.State == protocol.StateAborted && started:
		jr.Task, jr.TaskText = "stopped", "started, then the round was aborted"
	default:
		jr.Task, jr.TaskText = "not-started", "not started"
	}
	jr.TaskText += runsText(tt, r.State)
	undoing := r.Undo.Phase != protocol.PhaseNone && wave.Failed != ""
	switch r.State {
	case protocol.StateDone:
		jr.Outcome = "done"
	case protocol.StateFailed:
		jr.Outcome = "task failed"
		if undoing && r.Undo.Ended {
			jr.Outcome = wave.Outcome()
		}
	case protocol.StateAborted:
		switch {
		case fault == string(chainsync.FaultCancelled):
			// A cancel is no fault: people ended the round.
			jr.Outcome, jr.Fault = "cancelled at the Head", ""
		case undoing && r.Undo.Ended:
			jr.Outcome = wave.Outcome() // failed elsewhere, and undone
		case undoing:
			jr.Outcome = "failed at " + wave.Failed + " (" + wave.Kind + "); the undo wave's outcome is not recorded here"
		case found.Cause == string(chainsync.FaultTaskFailed) || found.Cause == string(chainsync.FaultTaskTimeout):
			// A fault notice said so: no task after that node ran.
			jr.Outcome = "failed at " + found.Origin + " (" + found.Cause + "); no task after " + found.Origin + " ran"
		case r.Outcome() == protocol.NoExitWave && hasSucc:
			jr.Outcome = "undelivered (aborted after this node's COMPLETE went on: the tasks after it may have run)"
		case fault == "":
			jr.Outcome = "aborted (stopped, or a fault before faults were recorded)"
		default:
			jr.Outcome = "aborted"
		}
	default:
		jr.Outcome = "in progress"
	}
	if jr.Undo = undoText(r.Undo); jr.Undo != "" {
		// Where this node's own undo stood; the wave's outcome is above.
		jr.Outcome += "; undo: " + undoText(protocol.UndoRecord{Phase: r.Undo.Phase})
	}
	jr.Cancelled = r.Cancelled
	if jr.Retries = r.Retries; r.Retries > 0 {
		jr.Outcome += "; " + retryText(r)
		if r.Retry.What != 0 {
			jr.RetryBy = r.Retry.Origin
			if r.Retry.By != "" {
				jr.RetryBy = r.Retry.By + " at " + r.Retry.Origin
			}
		}
		jr.PriorUndo = undoText(r.Prior)
	}
	switch {
	case hasPred && r.Delivered:
		jr.ExitWave = "delivered to the predecessor"
	case hasPred && r.State == protocol.StateDone:
		jr.ExitWave = "NOT delivered: still owed to the predecessor"
	case role == "head" && r.ExitRecv:
		jr.ExitWave = "came back from the successor"
	case role == "head" && r.Outcome() == protocol.NoExitWave:
		jr.ExitWave = "did not come back"
	default:
		jr.ExitWave = "-"
	}
	jr.started, jr.ended = tt.Started, tt.Ended
	jr.TaskStarted, jr.TaskEnded = jsonMillis(tt.Started), jsonMillis(tt.Ended)
	if len(tt.Earlier) > 0 || !tt.Interrupted.IsZero() {
		for _, run := range append(slices.Clone(tt.Earlier), tt.TaskRun) {
			jr.TaskRuns = append(jr.TaskRuns, taskRun{Started: jsonMillis(run.Started), Ended: jsonMillis(run.Ended), Interrupted: jsonMillis(run.Interrupted)})
		}
	}
	return jr
}

// retryText says, after a retried round's outcome, how often it was
// retried, by whom, and what became of this node's work in the attempt
// before the latest retry: undone (and how the wave ended), or not.
func retryText(r protocol.Record) string {
	s := "retried"
	if r.Retries > 1 {
		s += fmt.Sprintf(" %d times", r.Retries)
	}
	if r.Retry.What != 0 {
		s += " by "
		if r.Retry.By != "" {
			s += r.Retry.By + " at "
		}
		s += r.Retry.Origin
	}
	switch {
	case r.Prior.Phase == protocol.PhaseNone:
		return s + "; nothing was undone here before the retry"
	case r.Prior.Ended:
		// undoText ends with the wave's outcome: say that first.
		return s + "; before the retry: " + r.Prior.Wave.Outcome() + "; undo here: " + undoText(protocol.UndoRecord{Phase: r.Prior.Phase})
	default:
		return s + "; before the retry, undo here: " + undoText(r.Prior)
	}
}

// runsText says, after the task's words, that this is not its first run
// in the round, and what became of the runs before; or that the last run
// was cut short by the node's death but ended after the restart (taken
// as done, failed, or run again: --resume-task).
func runsText(tt journal.TaskTimes, st protocol.State) string {
	var s string
	if n := len(tt.Earlier); n > 0 {
		cut := 0
		for _, run := range tt.Earlier {
			if !run.Interrupted.IsZero() {
				cut++
			}
		}
		s = fmt.Sprintf("; run %d times here", n+1)
		switch {
		case cut == n && n == 1:
			s += ": the first run was cut short by the node's death"
		case cut == n:
			s += ": the runs before the last were cut short by the node's death"
		case cut > 0:
			s += fmt.Sprintf(": %d of the runs before the last were cut short by the node's death", cut)
		}
	}
	if !tt.Interrupted.IsZero() && st != protocol.StateStart {
		s += "; a run was cut short by the node's death, and the restarted node ended the task (--resume-task)"
	}
	return s
}

// endStatus is the exit status of a run that ended the rounds of st as
// they ended (chainsync run's, worse of all rounds), and why, naming the
// first round that ended so.
func endStatus(st journal.State) (int, string) {
	code, why := ExitOK, ""
	for _, r := range st.Rounds {
		c, w := ExitOK, ""
		switch r.State {
		case protocol.StateFailed:
			c, w = ExitTaskFailed, "its task failed here"
		case protocol.StateAborted:
			c, w = ExitFault, "aborted by a fault"
			switch k := st.Faults[r.Round]; {
			case k == string(chainsync.FaultCancelled):
				c, w = ExitCancelled, "cancelled at the Head"
			case k != "" && st.Found[r.Round].Origin != "":
				f := st.Found[r.Round]
				w += " (" + k + ": " + f.Origin + " found " + f.Cause + ")"
			case k != "":
				w += " (" + k + ")"
			case r.Undo.Wave.Failed != "":
				w = "failed at " + r.Undo.Wave.Failed
			}
		}
		if worse(code, c) != code {
			code, why = c, "round "+status.RoundName(r.Round)+": "+w
		}
	}
	return code, why
}

func cmdName(c protocol.Command) string {
	if c == 0 {
		return ""
	}
	return c.String()
}

// holderText says what the lock file tells of the process that last ran
// on dir, which recorded no normal end: whether it still runs (it holds
// the lock file open), or is gone. Only /proc answers that (Linux); else
// it says what the lock file says.
func holderText(dir string, snap *journal.Snapshot) string {
	const none = "no normal end recorded"
	pid, host := snap.HolderPID()
	if pid <= 0 {
		return none + " (no lock file names the process that wrote it)"
	}
	self, _ := os.Hostname()
	who := fmt.Sprintf("pid %d on %s", pid, host)
	if host != self {
		return none + "; the lock was last held by " + who + ", another host: whether it runs cannot be told from here"
	}
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	if _, err := os.Stat("/proc/self"); err != nil {
		return none + "; the lock was last held by " + who
	}
	if _, err := os.Stat(proc); err != nil {
		return none + ": " + who + ", which last held the lock, is gone: it was killed or died, or stopped with rounds unfinished (by a signal, or a served node, which records no end)"
	}
	switch holdsFile(proc, filepath.Join(dir, "lock")) {
	case 1:
		return "running: " + who + " holds the lock (no end recorded while it runs)"
	case 0:
		return none + ": " + who + ", which last held the lock, is gone (its number now belongs to another process): it was killed or died, or stopped with rounds unfinished"
	}
	return none + "; " + who + ", which last held the lock, is alive: probably still running"
}

// holdsFile reports whether process proc (/proc/PID) has path open: 1 yes,
// 0 no, -1 cannot tell (its descriptors cannot be read).
func holdsFile(proc, path string) int {
	want, err := filepath.Abs(path)
	if err != nil {
		return -1
	}
	if real, err := filepath.EvalSymlinks(want); err == nil {
		want = real
	}
	fds, err := os.ReadDir(filepath.Join(proc, "fd"))
	if err != nil {
		return -1
	}
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(proc, "fd", fd.Name())); err == nil && target == want {
			return 1
		}
	}
	return 0
}

func printJournal(w io.Writer, doc journalDoc, snap *journal.Snapshot) {
	name := doc.Name
	if name == "" {
		name = "(no --name)"
	}
	fmt.Fprintf(w, "state directory %s: node %s (%s), journal %d bytes, %d round(s)\n", doc.Dir, quoteName(name), doc.Role, doc.Bytes, len(doc.Rounds))
	fmt.Fprintf(w, "node: %s\n", doc.Node)
	for _, s := range doc.Steering {
		fmt.Fprintf(w, "steering: %s\n", s)
	}
	if doc.Torn > 0 {
		fmt.Fprintf(w, "a last record of %d bytes is torn (a write cut short; the node drops it when it starts, or it is being written now)\n", doc.Torn)
	}
	if len(doc.Rounds) == 0 {
		fmt.Fprintln(w, "no round recorded")
		return
	}
	fmt.Fprintln(w, "(STARTED and ENDED: the times of the task's start and end as this node recorded them, local time; \"-\": not recorded, older journals have none. TASK: what the round's state says of this node's task)")
	fmt.Fprintln(w)
	now := time.Now()
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUND\tORDER\tSTATE\tTASK\tSTARTED\tENDED\tOUTCOME\tFAULT\tEXIT WAVE")
	for _, r := range doc.Rounds {
		order, fault := "-", r.Fault
		if r.Seq != 0 {
			order = strconv.FormatUint(r.Seq, 10)
		}
		if fault == "" {
			fault = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", status.Escape(status.RoundName(r.Round)), order, r.State, r.TaskText,
			tableTime(r.started, now), tableTime(r.ended, now), r.Outcome, fault, r.ExitWave)
	}
	tw.Flush()
}

// jsonMillis is t for --json: RFC 3339 in UTC with milliseconds, "" for
// a zero time (not recorded).
func jsonMillis(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// tableTime is t for the table: local time to the millisecond
// (14:02:03.512), with the date when it is not now's day; "-" for a zero
// time (not recorded).
func tableTime(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	t = t.In(now.Location())
	if ty, tm, td := t.Date(); ty == now.Year() && tm == now.Month() && td == now.Day() {
		return t.Format("15:04:05.000")
	}
	return t.Format("2006-01-02 15:04:05.000")
}

// quoteName quotes a node name that could be misread in running text
// or beside a count (a number, or with spaces or punctuation); "" stays
// "".
func quoteName(name string) string { return status.QuoteName(name) }
