// Package journal is a node's durable state: an append-only file of
// checksummed records, one per change to a round, fsynced before the node
// acts on the change (docs/DESIGN.md, "Restarts and durable state").
//
// # Format
//
// The directory holds two files: "lock", which the running process holds
// an exclusive flock(2) on (its content names the holder, for the error a
// second process gets), and "journal". The journal is a sequence of
// frames:
//
//	length   4 bytes, big endian: the payload's length (1..16896)
//	checksum 4 bytes, big endian: CRC-32C (Castagnoli) of the payload
//	payload  length bytes of text, fields separated by one space
//
// The first payload is the header, "chainsync-journal 1 ROLE NAME" (NAME
// is "-" when the node has none, else ":" and the name). Every other
// payload is a round record,
//
//	R :ROUND STATE FLAGS LASTPRED LASTSUCC RECVPRED RECVSUCC [SEQ]
//
// (ROUND after a colon, so the unnamed round is ":"; STATE and the four
// commands as decimal numbers of the protocol package's State and
// Command, 0 for none; FLAGS five 0/1 digits: locally ready, READY from
// the predecessor, START from the successor, COMPLETE from the
// predecessor, COMPLETE from the successor, then two more when either is
// set (seven digits, never ending "00"): Record.Started and
// Record.Cancelled; SEQ, when present, the protocol package's
// Record.Seq: the order in which the node learned its rounds), preceded
// by the round's attempt records when it has been retried or cancelled
// (attempt.go: P for Record.Retries and Record.Prior, S for Record.Retry
// and Record.Cancel), or a delivery,
//
//	D :ROUND
//
// saying the round's final exit-wave COMPLETE was handed to a live
// connection to the predecessor: the protocol package's Record.Delivered,
// written after a round record that has it (once per round; it stays set
// whatever round record follows). The last round record of a round wins.
//
// Two more records describe how rounds and the node ended:
//
//	F :ROUND KIND
//
// says the round was aborted by a fault of KIND (a-z 0-9 -, as the
// --on-fault hook's CHAINSYNC_FAULT spells it), and
//
//	E UNIXTIME
//
// says the process ended normally at UNIXTIME (seconds), every round
// over: a later round record cancels it. A node started on a journal
// that ends so knows a rerun would do nothing.
//
// A task time record (times.go),
//
//	T :ROUND S|E|I UNIXMILLI
//
// says when the round's task started (S) or ended (E) at this node, in
// milliseconds of Unix time: SaveAll writes it right after the round
// record that moves the round into StateStart or out of it, in the same
// write; SaveTaskStart when a restarted node runs the task again. I
// says a run was cut short by the death of the process running it: Open
// writes it for a round it finds in StateStart. It is for people
// (State.TaskTimes); a journal without any loads as before.
//
// Every file is opened relative to the open directory and without
// following a symbolic link (openat with O_NOFOLLOW), the lock and the
// temporary file included: a link planted in the directory is refused (the
// lock, the journal) or removed as a link (a stale temporary file), never
// written through. A directory that group or others can write is refused
// (ErrUnsafe), as ssh refuses such a home directory.
//
// A crash can tear only the last frame (a short write): Open drops it. Any
// other damage (a bad checksum before the end, a payload that does not
// parse) is refused with ErrCorrupt: the journal is never guessed at.
//
// Compaction rewrites the file as the header plus the last record of each
// round (keeping at most KeepFinished finished rounds), to a temporary
// file that is fsynced, renamed over the journal, and the directory
// fsynced; so the file stays small over any number of rounds.
//
// # Other systems
//
// Linux is the system described above. On macOS and the BSDs the lock is
// the same flock(2), and the files are opened with O_NOFOLLOW too, but by
// the directory's path joined with the file's name (their syscall
// package has no openat): a link planted in place of the directory
// itself between two opens is not noticed there. On Windows (and any
// system whose syscall package has no flock) there is no state directory:
// CheckDir and Open refuse any directory with ErrUnsupported ("state
// directory is not supported on windows: ...") and create nothing, since
// the standard library gives neither a lock nor an open that refuses a
// link there, and the directory's mode cannot say who may write it.
package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chainsync-go/chainsync/protocol"
)

// Errors Open returns, wrapped with details.
var (
	// ErrCorrupt: the journal is damaged other than by a torn last record.
	ErrCorrupt = errors.New("chainsync: state journal is corrupt")
	// ErrLocked: another process holds the state directory.
	ErrLocked = errors.New("chainsync: state directory is in use")
	// ErrMismatch: the journal belongs to a node in another place in a chain.
	ErrMismatch = errors.New("chainsync: state directory belongs to another node")
	// ErrUnsafe: the state directory is writable by group or others, or
	// holds a symbolic link where the node's lock or journal belongs.
	ErrUnsafe = errors.New("chainsync: state directory is not safe")
	// ErrUnsupported: this system cannot keep a state directory safely
	// (see the package doc, "Other systems"); CheckDir and Open return it
	// for any directory, and create nothing.
	ErrUnsupported = errors.New("chainsync: state directory is not supported")
)

const (
	magic = "chainsync-journal 1"
	// maxPayload bounds a frame's payload: a receipt record holds an
	// envelope (receipt.go).
	maxPayload = protocol.MaxReceiptEnvelope + 512
	frameHead  = 8
	// KeepFinished is how many finished rounds compaction keeps.
	KeepFinished = 16384
	// compactEvery: compact once this many records were appended since the
	// last compaction and they are at least as many as the rounds kept, so
	// the file stays within about twice its compacted size.
	compactEvery = 4096
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header identifies the node a journal belongs to.
type Header struct {
	Role string // "head", "middle", "tail" or "single"
	Name string // may be empty
}

// State is what a journal holds: the last record of each round, in the
// order the rounds first appeared (with Delivered set if a delivery was
// written for it).
type State struct {
	Rounds []protocol.Record
	// Dropped is the size in bytes of a torn last frame that Open removed
	// (0 if none), for the log.
	Dropped int
	// Ended is when (Unix seconds) the process that wrote the journal
	// ended normally, every round over, with no round record after it;
	// 0 if it did not (it died, or is a served node).
	Ended int64
	// Faults gives the fault kind each aborted round ended with.
	Faults map[string]string
	// Found gives, for a round aborted by a fault another node found
	// (a fault notice), which node found it and what (Fault.Origin,
	// Fault.Cause): a round ended by a task that failed further down the
	// chain is known to have run no task after it.
	Found map[string]Fault
	// TaskTimes gives when each round's task started and ended at this
	// node, for the rounds whose journal says so (task time records,
	// times.go); a restarted node does not need them.
	TaskTimes map[string]TaskTimes
}

// Journal is an open, locked journal. It is not safe for concurrent use.
type Journal struct {
	dir    string
	d      *os.File // the directory, open: every file is opened relative to it
	hdr    Header
	f      *os.File // the journal, opened for append
	lock   *os.File
	order  []string // round ids, first appearance first
	last   map[string]protocol.Record
	faults map[string]Fault // round -> the fault that aborted it
	times  map[string]TaskTimes
	now    func() time.Time // the clock of task time records; nil: time.Now
	ended  int64            // see State.Ended
	since  int              // records appended since the last compaction
	buf    []byte
	closed bool
	keep   int // finished rounds compaction keeps; 0: KeepFinished
	syncs  atomic.Uint64

	// OnSync, if set, is called before every fsync (tests use it to check
	// who syncs, and when).
	OnSync func()
}

// Syncs returns how many fsyncs the journal made since Open (of the
// journal, and of compaction's file and directory). Safe for concurrent
// use.
func (j *Journal) Syncs() uint64 { return j.syncs.Load() }

// sync fsyncs f, counting it.
func (j *Journal) sync(f *os.File) error {
	if j.OnSync != nil {
		j.OnSync()
	}
	j.syncs.Add(1)
	return f.Sync()
}

// Open creates dir (mode 0700) if needed, locks it, and loads its journal.
// The journal must belong to a node with the same role and name.
func Open(dir string, hdr Header) (*Journal, *State, error) { return openWith(dir, hdr, nil) }

// openWith is Open with the clock of the task time records (nil:
// time.Now).
func openWith(dir string, hdr Header, now func() time.Time) (*Journal, *State, error) {
	if err := supported(); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("chainsync: cannot create state directory: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("chainsync: cannot open state directory: %w", err)
	}
	fi, err := d.Stat()
	if err == nil {
		err = checkDirInfo(dir, fi)
	}
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	lock, err := lockDir(d, dir)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	j := &Journal{dir: dir, d: d, hdr: hdr, lock: lock, last: map[string]protocol.Record{}, faults: map[string]Fault{}, times: map[string]TaskTimes{}, now: now}
	st, err := j.load()
	if err != nil {
		lock.Close()
		d.Close()
		return nil, nil, err
	}
	// Start from a compacted file: it drops a torn tail and old rounds,
	// writes the header of a new journal, and the runs of tasks that the
	// death of the process before this one interrupted (times.go).
	j.markInterrupted()
	if err := j.compact(); err != nil {
		lock.Close()
		d.Close()
		return nil, nil, err
	}
	// Return what compaction kept: at most KeepFinished finished rounds.
	st.Rounds = st.Rounds[:0]
	for _, id := range j.order {
		st.Rounds = append(st.Rounds, j.last[id])
	}
	for id := range st.Faults {
		if _, kept := j.last[id]; !kept {
			delete(st.Faults, id)
		}
	}
	clear(st.TaskTimes)
	for id, t := range j.times { // compaction kept the kept rounds' only
		st.TaskTimes[id] = t
	}
	return j, st, nil
}

// CheckDir refuses a state directory that group or others can write
// (ErrUnsafe, naming its mode in octal): whoever can write it can replace
// the journal, so make the node skip or repeat its task. A directory that
// does not exist yet passes (Open creates it 0700). On a system without
// state directories (see "Other systems" in the package doc) it refuses
// every directory with ErrUnsupported.
func CheckDir(dir string) error {
	if err := supported(); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil // Open reports it, or creates the directory
	}
	return checkDirInfo(dir, fi)
}

func checkDirInfo(dir string, fi os.FileInfo) error {
	if !fi.IsDir() {
		return fmt.Errorf("chainsync: state directory %s is not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%w: %s is writable by group or others (mode %04o): they could replace the journal or plant links in it; run: chmod 700 %s",
			ErrUnsafe, dir, perm, dir)
	}
	return nil
}

// openErr explains a failure to open name in the state directory: a
// symbolic link there is refused, never followed.
func openErr(dir, name string, err error) error {
	path := filepath.Join(dir, name)
	if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
		target, _ := os.Readlink(path)
		return fmt.Errorf("%w: %s is a symbolic link (to %s); a node never follows links in its state directory: remove it", ErrUnsafe, path, target)
	}
	return fmt.Errorf("chainsync: cannot open %s: %w", path, err)
}

func lockDir(d *os.File, dir string) (*os.File, error) {
	f, err := openIn(d, "lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, openErr(dir, "lock", err)
	}
	if err := flock(f); err != nil {
		holder, _ := io.ReadAll(io.LimitReader(f, 200))
		f.Close()
		who := strings.TrimSpace(string(holder))
		if who == "" {
			who = "unknown process"
		}
		return nil, fmt.Errorf("%w: %s is held by %s; run one chainsync per state directory", ErrLocked, dir, who)
	}
	host, _ := os.Hostname()
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d on %s\n", os.Getpid(), host)), 0)
	return f, nil
}

// load reads the journal into j and returns what it holds.
func (j *Journal) load() (*State, error) {
	path := filepath.Join(j.dir, "journal")
	f, err := openIn(j.d, "journal", os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return &State{Faults: map[string]string{}, Found: map[string]Fault{}, TaskTimes: map[string]TaskTimes{}}, nil
	}
	if err != nil {
		return nil, openErr(j.dir, "journal", err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("chainsync: cannot read %s: %w", path, err)
	}
	recs, torn, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v; refusing to guess: move the directory aside to start this node afresh (it may then run its task again)", ErrCorrupt, path, err)
	}
	st := &State{Faults: map[string]string{}, Found: map[string]Fault{}, TaskTimes: map[string]TaskTimes{}, Dropped: torn}
	if len(recs) == 0 {
		return st, nil // an empty file, or only a torn header: a new journal
	}
	if recs[0].Header == nil {
		return nil, fmt.Errorf("%w: %s: the first record is not a journal header", ErrCorrupt, path)
	}
	h := *recs[0].Header
	if h.Role != j.hdr.Role || h.Name != j.hdr.Name {
		return nil, fmt.Errorf("%w: %s holds the state of node %q (%s), but this is node %q (%s); give each node its own --state-dir",
			ErrMismatch, j.dir, h.Name, h.Role, j.hdr.Name, j.hdr.Role)
	}
	pending, rcs := attempts{}, receiptChanges{}
	for _, e := range recs[1:] {
		switch {
		case pending.note(e), rcs.note(e):
		case e.Header != nil:
			return nil, fmt.Errorf("%w: %s: a second header", ErrCorrupt, path)
		case e.Delivered != "" || e.DeliveredUnnamed:
			if r, ok := j.last[e.round()]; ok {
				r.Delivered = true
				j.last[r.Round] = r
			}
		case e.Undo != nil:
			mergeUndo(j.last, e)
		case e.TaskTime != nil:
			if _, ok := j.last[e.Record.Round]; ok {
				applyTaskTime(j.times, e)
			}
		case e.Ended != 0:
			j.ended = e.Ended
		case e.FaultKind != "":
			j.faults[e.Record.Round] = Fault{Round: e.Record.Round, Kind: e.FaultKind, Cause: e.FaultCause, Origin: e.FaultOrigin}
		default:
			r, err := rcs.take(pending.take(e.Record), j.last[e.Record.Round].Receipt)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
			}
			j.remember(r)
			j.ended = 0
		}
	}
	for _, id := range j.order {
		st.Rounds = append(st.Rounds, j.last[id])
	}
	st.Ended = j.ended
	for id, f := range j.faults {
		st.Faults[id] = f.Kind
		if f.Origin != "" {
			st.Found[id] = f
		}
	}
	for id, t := range j.times {
		st.TaskTimes[id] = t
	}
	return st, nil
}

// remember makes r the last record of its round; Delivered, once set,
// stays set.
func (j *Journal) remember(r protocol.Record) {
	prev, ok := j.last[r.Round]
	if !ok {
		j.order = append(j.order, r.Round)
	}
	r.Delivered = r.Delivered || prev.Delivered
	j.last[r.Round] = r
}

// Entry is one decoded journal record: a header, a round record, a
// delivery, an end, a fault, an undo or a task time record.
type Entry struct {
	Header           *Header
	Record           protocol.Record
	Delivered        string          // a delivery for this round
	DeliveredUnnamed bool            // a delivery for the unnamed round
	Ended            int64           // an end record: the node ended normally then (Unix seconds)
	FaultKind        string          // a fault record: Record.Round was aborted by a fault of this kind
	FaultCause       string          // and, if another node found it, what it found (a fault kind)
	FaultOrigin      string          // and which node found it
	Undo             *UndoEntry      // an undo record for Record.Round (undo.go)
	TaskTime         *TaskTimeEntry  // a task time record for Record.Round (times.go)
	Attempt          *AttemptEntry   // an attempt record for Record.Round's next round record (attempt.go)
	Steer            *protocol.Steer // a retry or cancel line for Record.Round's next round record (attempt.go)
	Receipt          *ReceiptEntry   // a receipt record for Record.Round's next round record (receipt.go)
}

func (e Entry) round() string {
	if e.Delivered != "" {
		return e.Delivered
	}
	return e.Record.Round
}

// Decode parses a whole journal file. torn is the length of a torn last
// frame that was ignored (0 if none). Any other damage is an error that
// says where.
func Decode(data []byte) (entries []Entry, torn int, err error) {
	off := 0
	for off < len(data) {
		rest := data[off:]
		if len(rest) < frameHead {
			return entries, len(rest), nil // torn frame header
		}
		n := int(binary.BigEndian.Uint32(rest))
		sum := binary.BigEndian.Uint32(rest[4:])
		if n == 0 || n > maxPayload {
			if allZero(rest) {
				return entries, len(rest), nil // a zero-filled tail: space allocated, never written
			}
			return nil, 0, fmt.Errorf("offset %d: frame length %d out of range", off, n)
		}
		if frameHead+n > len(rest) {
			if holdsFrame(rest) {
				return nil, 0, fmt.Errorf("offset %d: frame length %d runs past whole frames", off, n)
			}
			return entries, len(rest), nil // torn payload
		}
		payload := rest[frameHead : frameHead+n]
		if crc32.Checksum(payload, castagnoli) != sum {
			if frameHead+n == len(rest) && !holdsFrame(rest) {
				return entries, len(rest), nil // the last frame, partly written
			}
			return nil, 0, fmt.Errorf("offset %d: checksum mismatch", off)
		}
		e, perr := parsePayload(payload)
		if perr != nil {
			return nil, 0, fmt.Errorf("offset %d: %v", off, perr)
		}
		entries = append(entries, e)
		off += frameHead + n
	}
	return entries, 0, nil
}

// holdsFrame reports whether b holds a whole frame with a good checksum
// somewhere after its first byte. A crash tears only the end of the last
// write, so nothing whole can follow a torn frame: if something does, a
// frame's length was damaged, and the tail is not torn but corrupt.
func holdsFrame(b []byte) bool {
	for off := 1; off+frameHead < len(b); off++ {
		n := int(binary.BigEndian.Uint32(b[off:]))
		if n == 0 || n > maxPayload || off+frameHead+n > len(b) {
			continue
		}
		if crc32.Checksum(b[off+frameHead:off+frameHead+n], castagnoli) == binary.BigEndian.Uint32(b[off+4:]) {
			return true
		}
	}
	return false
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func parsePayload(p []byte) (Entry, error) {
	s := string(p)
	if rest, ok := strings.CutPrefix(s, magic+" "); ok {
		role, name, ok := strings.Cut(rest, " ")
		if !ok || role == "" {
			return Entry{}, fmt.Errorf("bad header %q", s)
		}
		switch {
		case name == "-":
			name = ""
		case strings.HasPrefix(name, ":"):
			name = name[1:]
		default:
			return Entry{}, fmt.Errorf("bad header %q", s)
		}
		return Entry{Header: &Header{Role: role, Name: name}}, nil
	}
	f := strings.Split(s, " ")
	roundOf := func(field string) (string, error) {
		id, ok := strings.CutPrefix(field, ":")
		if !ok || !protocol.ValidRound(id) {
			return "", fmt.Errorf("bad round field %q", field)
		}
		return id, nil
	}
	switch {
	case len(f) == 2 && f[0] == "E":
		t, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || t <= 0 {
			return Entry{}, fmt.Errorf("bad end record %q", s)
		}
		return Entry{Ended: t}, nil
	case (len(f) == 3 || len(f) == 5) && f[0] == "F":
		id, err := roundOf(f[1])
		if err != nil {
			return Entry{}, err
		}
		e := Entry{Record: protocol.Record{Round: id}, FaultKind: f[2]}
		if len(f) == 5 {
			e.FaultCause, e.FaultOrigin = f[3], f[4]
		}
		if !(Fault{Round: id, Kind: e.FaultKind, Cause: e.FaultCause, Origin: e.FaultOrigin}).valid() {
			return Entry{}, fmt.Errorf("bad fault record %q", s)
		}
		return e, nil
	case f[0] == "U":
		return parseUndo(s, f)
	case f[0] == "T":
		return parseTaskTime(s, f)
	case f[0] == "P":
		return parseAttempt(s, f)
	case f[0] == "S":
		return parseSteerRecord(s, f)
	case f[0] == "K" || f[0] == "O" || f[0] == "A":
		return parseReceipt(s, f)
	case len(f) == 2 && f[0] == "D":
		id, err := roundOf(f[1])
		if err != nil {
			return Entry{}, err
		}
		if id == "" {
			return Entry{DeliveredUnnamed: true}, nil
		}
		return Entry{Delivered: id}, nil
	case (len(f) == 8 || len(f) == 9) && f[0] == "R":
		id, err := roundOf(f[1])
		if err != nil {
			return Entry{}, err
		}
		num := func(field string, lo, hi int) (int, error) {
			v, err := strconv.Atoi(field)
			if err != nil || v < lo || v > hi {
				return 0, fmt.Errorf("bad number %q in %q", field, s)
			}
			return v, nil
		}
		r := protocol.Record{Round: id}
		st, err := num(f[2], int(protocol.StateSync), int(protocol.StateAborted))
		if err != nil {
			return Entry{}, err
		}
		r.State = protocol.State(st)
		if len(f[3]) != 5 && (len(f[3]) != 7 || f[3][5:] == "00") || strings.Trim(f[3], "01") != "" {
			return Entry{}, fmt.Errorf("bad flags %q", f[3])
		}
		flags := []*bool{&r.LocalReady, &r.PredReady, &r.StartRecv, &r.CompleteRecv, &r.ExitRecv, &r.Started, &r.Cancelled}
		for i := range f[3] {
			*flags[i] = f[3][i] == '1'
		}
		cmds := []*protocol.Command{&r.LastPred, &r.LastSucc, &r.RecvPred, &r.RecvSucc}
		for i, c := range cmds {
			v, err := num(f[4+i], 0, int(protocol.Complete))
			if err != nil {
				return Entry{}, err
			}
			*c = protocol.Command(v)
		}
		if len(f) == 9 {
			seq, err := strconv.ParseUint(f[8], 10, 64)
			if err != nil || seq == 0 {
				return Entry{}, fmt.Errorf("bad sequence number %q in %q", f[8], s)
			}
			r.Seq = seq
		}
		return Entry{Record: r}, nil
	}
	return Entry{}, fmt.Errorf("unknown record %q", s)
}

// appendFrame appends one frame holding payload to b.
func appendFrame(b []byte, payload []byte) []byte {
	var head [frameHead]byte
	binary.BigEndian.PutUint32(head[:], uint32(len(payload)))
	binary.BigEndian.PutUint32(head[4:], crc32.Checksum(payload, castagnoli))
	b = append(b, head[:]...)
	return append(b, payload...)
}

func headerPayload(h Header) []byte {
	name := "-"
	if h.Name != "" {
		name = ":" + h.Name
	}
	return []byte(magic + " " + h.Role + " " + name)
}

// EncodeRecord returns the payload of a round record.
func EncodeRecord(r protocol.Record) []byte { return appendRecord(nil, r) }

// appendRecord appends the payload of a round record to b: "R :ROUND
// STATE FLAGS LASTPRED LASTSUCC RECVPRED RECVSUCC [SEQ]" (no fmt: this is
// on every durable step's path).
func appendRecord(b []byte, r protocol.Record) []byte {
	b = append(b, "R :"...)
	b = append(b, r.Round...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(r.State), 10)
	b = append(b, ' ')
	flags := [...]bool{r.LocalReady, r.PredReady, r.StartRecv, r.CompleteRecv, r.ExitRecv, r.Started, r.Cancelled}
	n := len(flags)
	if !r.Started && !r.Cancelled {
		n -= 2 // five digits, as before these two facts were kept
	}
	for _, f := range flags[:n] {
		if f {
			b = append(b, '1')
		} else {
			b = append(b, '0')
		}
	}
	for _, c := range [...]protocol.Command{r.LastPred, r.LastSucc, r.RecvPred, r.RecvSucc} {
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(c), 10)
	}
	if r.Seq != 0 {
		b = append(b, ' ')
		b = strconv.AppendUint(b, r.Seq, 10)
	}
	return b
}

// appendRecordFrame appends the frames of r to b: its attempt records
// (attempt.go), its receipt records where they changed since prev, the
// receipts of the round's previous round record (receipt.go), one frame
// holding its round record, encoded in place, and its undo record
// (undo.go).
func appendRecordFrame(b []byte, r protocol.Record, prev protocol.ReceiptRecord) []byte {
	b = appendAttemptFrames(b, r)
	b = appendReceiptFrames(b, r.Round, r.Receipt, prev)
	start := len(b)
	b = append(b, make([]byte, frameHead)...)
	b = appendRecord(b, r)
	payload := b[start+frameHead:]
	binary.BigEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return appendUndoFrame(b, r) // undo.go
}

// Fault is a fault record: Round was aborted by a fault of Kind (a-z 0-9
// -), so that a node restarted after it reports the fault it ended with.
// For a fault another node found (a fault notice), Origin names that
// node and Cause what it found (a kind); both or neither are set.
type Fault struct{ Round, Kind, Cause, Origin string }

// valid reports whether f can be written and read back as it is.
func (f Fault) valid() bool {
	if !validKind(f.Kind) || !protocol.ValidRound(f.Round) {
		return false
	}
	if f.Cause == "" && f.Origin == "" {
		return true
	}
	return validKind(f.Cause) && f.Origin != "-" && f.Origin != "" && protocol.NoticeName(f.Origin) == f.Origin
}

// payload is f's record.
func (f Fault) payload() []byte {
	s := "F :" + f.Round + " " + f.Kind
	if f.Origin != "" {
		s += " " + f.Cause + " " + f.Origin
	}
	return []byte(s)
}

// Save appends round records in one write, and fsyncs once, before it
// returns: only then may the node act on them. A node saves everything a
// batch of events produced in one call (group commit). A record whose
// Delivered is newly set is followed by a delivery; if nothing else
// changed, the delivery alone is written.
func (j *Journal) Save(recs []protocol.Record) error { return j.SaveAll(nil, recs) }

// SaveAll is Save with fault records, written first in the same write:
// any prefix of it on disk that holds a round's aborted record holds its
// fault record too.
func (j *Journal) SaveAll(faults []Fault, recs []protocol.Record) error {
	if j.closed {
		return errors.New("chainsync: journal closed")
	}
	for _, f := range faults {
		if !f.valid() {
			return fmt.Errorf("chainsync: bad fault record %q %q %q %q", f.Round, f.Kind, f.Cause, f.Origin)
		}
	}
	j.buf = j.buf[:0]
	frames := 0
	var at time.Time // read once, when a task time record needs it
	now := func() time.Time {
		if at.IsZero() {
			at = millis(j.clock()())
		}
		return at
	}
	for _, f := range faults {
		j.faults[f.Round] = f
		j.buf = appendFrame(j.buf, f.payload())
		frames++
	}
	for _, r := range recs {
		prev, known := j.last[r.Round]
		same := r
		same.Delivered = prev.Delivered
		if !known || same != prev {
			j.buf = appendRecordFrame(j.buf, r, prev.Receipt)
			frames++
			var n int
			j.buf, n = j.noteTaskTime(j.buf, r, prev, known, now) // times.go
			frames += n
		}
		j.remember(r)
		if r.Delivered && !prev.Delivered {
			j.buf = appendFrame(j.buf, []byte("D :"+r.Round))
			frames++
		}
		j.ended = 0
	}
	if len(j.buf) == 0 {
		return nil
	}
	if _, err := j.f.Write(j.buf); err != nil {
		return fmt.Errorf("chainsync: cannot write the state journal: %w", err)
	}
	if err := j.sync(j.f); err != nil {
		return fmt.Errorf("chainsync: cannot sync the state journal: %w", err)
	}
	j.since += frames
	if j.since >= compactEvery && j.since >= len(j.order) {
		return j.compact()
	}
	return nil
}

// SaveFault records, and fsyncs, that round was aborted by a fault of
// kind (a-z 0-9 -), so that a node restarted after it reports the fault
// it ended with.
func (j *Journal) SaveFault(round, kind string) error {
	return j.SaveAll([]Fault{{Round: round, Kind: kind}}, nil)
}

// SaveEnd records, and fsyncs, that the node ended normally at unix
// (seconds), every round over: a node started on this journal again would
// do nothing (State.Ended).
func (j *Journal) SaveEnd(unix int64) error {
	if unix <= 0 {
		return fmt.Errorf("chainsync: bad end time %d", unix)
	}
	j.ended = unix
	return j.appendSynced([]byte("E " + strconv.FormatInt(unix, 10)))
}

func (j *Journal) appendSynced(payload []byte) error {
	if j.closed {
		return errors.New("chainsync: journal closed")
	}
	if _, err := j.f.Write(appendFrame(nil, payload)); err != nil {
		return fmt.Errorf("chainsync: cannot write the state journal: %w", err)
	}
	if err := j.sync(j.f); err != nil {
		return fmt.Errorf("chainsync: cannot sync the state journal: %w", err)
	}
	j.since++
	return nil
}

func validKind(k string) bool {
	if len(k) == 0 || len(k) > 32 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// SetKeepFinished makes later compactions keep at most n finished rounds
// instead of KeepFinished (n > 0).
func (j *Journal) SetKeepFinished(n int) { j.keep = n }

func (j *Journal) keepFinished() int {
	if j.keep > 0 {
		return j.keep
	}
	return KeepFinished
}

// compact rewrites the journal as the header plus the last record of each
// round, keeping at most KeepFinished (or SetKeepFinished's) finished
// rounds.
func (j *Journal) compact() error {
	finished := 0
	for _, id := range j.order {
		if j.last[id].State.Terminal() {
			finished++
		}
	}
	keep := j.order[:0:0]
	for _, id := range j.order {
		if j.last[id].State.Terminal() && finished > j.keepFinished() {
			finished--
			delete(j.last, id)
			delete(j.faults, id)
			delete(j.times, id)
			continue
		}
		keep = append(keep, id)
	}
	j.order = keep
	b := appendFrame(nil, headerPayload(j.hdr))
	for _, id := range j.order {
		b = appendRecordFrame(b, j.last[id], protocol.ReceiptRecord{})
		b = j.appendTaskTimes(b, id) // times.go
		if j.last[id].Delivered {
			b = appendFrame(b, []byte("D :"+id))
		}
		if f, ok := j.faults[id]; ok {
			b = appendFrame(b, f.payload())
		}
	}
	if j.ended != 0 {
		b = appendFrame(b, []byte("E "+strconv.FormatInt(j.ended, 10)))
	}
	if err := j.writeSynced("journal.tmp", b); err != nil {
		return err
	}
	if err := renameIn(j.d, "journal.tmp", "journal"); err != nil {
		return fmt.Errorf("chainsync: cannot replace the state journal: %w", err)
	}
	if err := j.sync(j.d); err != nil {
		return fmt.Errorf("chainsync: cannot sync %s: %w", j.dir, err)
	}
	if j.f != nil {
		j.f.Close()
	}
	f, err := openIn(j.d, "journal", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("chainsync: cannot open the state journal: %w", err)
	}
	j.f, j.since = f, 0
	return nil
}

// writeSynced writes b to a new file name in the directory, synced. A
// file or symbolic link already there (left by a crash, or planted) is
// removed first, as a link, so nothing is written through it.
func (j *Journal) writeSynced(name string, b []byte) error {
	path := filepath.Join(j.dir, name)
	if err := removeIn(j.d, name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("chainsync: cannot remove %s: %w", path, err)
	}
	f, err := openIn(j.d, name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("chainsync: cannot write %s: %w", path, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = j.sync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = removeIn(j.d, name)
		return fmt.Errorf("chainsync: cannot write %s: %w", path, err)
	}
	return nil
}

// Size returns the journal file's size in bytes.
func (j *Journal) Size() int64 {
	fi, err := j.f.Stat()
	if err != nil {
		return 0
	}
	return fi.Size()
}

// Close closes the journal and releases the directory's lock.
func (j *Journal) Close() error {
	if j.closed {
		return nil
	}
	j.closed = true
	err := j.f.Close()
	j.lock.Close()
	j.d.Close()
	return err
}
