package journal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/chainsync-go/chainsync/protocol"
)

// ErrNotStateDir: the directory holds no journal (Read).
var ErrNotStateDir = errors.New("chainsync: not a state directory")

// Snapshot is what Read found in a state directory, for people: the
// journal's header and rounds as a node started on it would load them,
// and what the directory says of the process that wrote it.
type Snapshot struct {
	Header Header
	// State is the journal's content, as Open would load it (before the
	// compaction that Open makes).
	State State
	// Bytes is the journal's size.
	Bytes int
	// Holder is the lock file's text, "pid N on HOST": the last process
	// that opened the directory (it may have ended since); "" if none.
	Holder string
	// Damage, when not nil, is why the journal is corrupt (ErrCorrupt,
	// naming the offset); State then holds the records before it.
	Damage error
}

// HolderPID returns the pid and host the lock file names, or 0.
func (s *Snapshot) HolderPID() (pid int, host string) {
	rest, ok := strings.CutPrefix(s.Holder, "pid ")
	if !ok {
		return 0, ""
	}
	p, h, _ := strings.Cut(rest, " on ")
	n, err := strconv.Atoi(p)
	if err != nil {
		return 0, ""
	}
	return n, h
}

// Read reads the state directory dir without changing anything in it and
// without taking its lock, so it is safe beside the node that runs on it:
// the journal is read in one go (a compaction renames a whole new file
// over it, an append adds whole frames; a frame being written shows as a
// torn tail, which State.Dropped counts). A directory without a journal is
// ErrNotStateDir. A damaged journal is not an error of Read: Damage says
// where, and State holds what precedes it.
func Read(dir string) (*Snapshot, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrNotStateDir, dir)
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	snap := &Snapshot{}
	if lf, err := openIn(d, "lock", os.O_RDONLY, 0); err == nil {
		b, _ := io.ReadAll(io.LimitReader(lf, 200))
		lf.Close()
		snap.Holder = strings.TrimSpace(string(b))
	}
	f, err := openIn(d, "journal", os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no journal file (a node's --state-dir holds \"journal\" and \"lock\")", ErrNotStateDir, dir)
	}
	if err != nil {
		return nil, openErr(dir, "journal", err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("chainsync: cannot read %s: %w", filepath.Join(dir, "journal"), err)
	}
	snap.Bytes = len(data)
	path := filepath.Join(dir, "journal")
	entries, torn, derr := Decode(data)
	if derr != nil {
		entries = wholeEntries(data)
		snap.Damage = fmt.Errorf("%w: %s: %v", ErrCorrupt, path, derr)
	}
	if len(entries) == 0 {
		if derr == nil {
			return nil, fmt.Errorf("%w: %s/journal holds no record (a node writes its header when it starts)", ErrNotStateDir, dir)
		}
		return snap, nil
	}
	if entries[0].Header == nil {
		return nil, fmt.Errorf("%w: %s: the first record is not a journal header: not a chainsync journal", ErrNotStateDir, path)
	}
	snap.Header = *entries[0].Header
	st, ferr := fold(entries[1:])
	if ferr != nil && snap.Damage == nil {
		snap.Damage = fmt.Errorf("%w: %s: %v", ErrCorrupt, path, ferr)
	}
	st.Dropped = torn
	snap.State = st
	return snap, nil
}

// fold is load's reading of the records after the header: the last
// record of each round wins, a delivery stays set, an end record holds
// until a round record follows it, task time records give the rounds'
// TaskTimes. It stops at a second header.
func fold(entries []Entry) (State, error) {
	st := State{Faults: map[string]string{}, Found: map[string]Fault{}, TaskTimes: map[string]TaskTimes{}}
	last := map[string]protocol.Record{}
	var order []string
	pending := attempts{}
	for _, e := range entries {
		switch {
		case pending.note(e):
		case e.Header != nil:
			return collect(st, order, last), errors.New("a second header")
		case e.Delivered != "" || e.DeliveredUnnamed:
			if r, ok := last[e.round()]; ok {
				r.Delivered = true
				last[r.Round] = r
			}
		case e.Undo != nil:
			mergeUndo(last, e)
		case e.TaskTime != nil:
			if _, ok := last[e.Record.Round]; ok {
				applyTaskTime(st.TaskTimes, e)
			}
		case e.Ended != 0:
			st.Ended = e.Ended
		case e.FaultKind != "":
			st.Faults[e.Record.Round] = e.FaultKind
			delete(st.Found, e.Record.Round)
			if e.FaultOrigin != "" {
				st.Found[e.Record.Round] = Fault{Round: e.Record.Round, Kind: e.FaultKind, Cause: e.FaultCause, Origin: e.FaultOrigin}
			}
		default:
			r := pending.take(e.Record)
			prev, ok := last[r.Round]
			if !ok {
				order = append(order, r.Round)
			}
			r.Delivered = r.Delivered || prev.Delivered
			last[r.Round] = r
			st.Ended = 0
		}
	}
	return collect(st, order, last), nil
}

func collect(st State, order []string, last map[string]protocol.Record) State {
	for _, id := range order {
		st.Rounds = append(st.Rounds, last[id])
	}
	return st
}

// wholeEntries decodes the frames of a damaged journal up to the first
// one that is not whole and sound: what precedes the damage.
func wholeEntries(data []byte) []Entry {
	var out []Entry
	for off := 0; off < len(data); {
		e, n, ok := frameAt(data[off:])
		if !ok {
			break
		}
		out = append(out, e)
		off += n
	}
	return out
}

// frameAt decodes the frame at the start of b, if it is whole, its
// checksum right and its payload a record.
func frameAt(b []byte) (Entry, int, bool) {
	if len(b) < frameHead {
		return Entry{}, 0, false
	}
	entries, _, err := Decode(b[:min(len(b), frameHead+int(beUint32(b)))])
	if err != nil || len(entries) != 1 {
		return Entry{}, 0, false
	}
	return entries[0], frameHead + int(beUint32(b)), true
}

func beUint32(b []byte) uint32 {
	n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	if n > maxPayload {
		return 0
	}
	return n
}
