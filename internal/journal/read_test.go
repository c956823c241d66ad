package journal

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestReadMatchesOpen: Read, which takes no lock and writes nothing, finds
// in a journal what Open loads from it, for every prefix of a journal
// written by Save (a torn tail included), and leaves the directory's
// files as they were. docs/JOURNAL.md, "Records" and "Damage".
func TestReadMatchesOpen(t *testing.T) {
	dir := t.TempDir()
	data, _, ends := writeJournal(t, dir, "a", "", "b")
	for _, cut := range append([]int{len(data) - 3}, ends...) {
		sub := t.TempDir()
		if err := os.WriteFile(filepath.Join(sub, "journal"), data[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		snap, err := Read(sub)
		if err != nil || snap.Damage != nil {
			t.Fatalf("cut at %d: Read: %v, damage %v", cut, err, snap.Damage)
		}
		after, _ := os.ReadFile(filepath.Join(sub, "journal"))
		if !reflect.DeepEqual(after, data[:cut]) {
			t.Fatalf("cut at %d: Read changed the journal", cut)
		}
		if _, err := os.Stat(filepath.Join(sub, "lock")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("cut at %d: Read made a lock file", cut)
		}
		want, err := openFile(t, data[:cut])
		if err != nil {
			t.Fatal(err)
		}
		if snap.Header != testHdr || !sameState(&snap.State, want) || snap.State.Dropped != want.Dropped || snap.State.Ended != want.Ended {
			t.Errorf("cut at %d: Read found %+v, Open %+v", cut, snap.State, *want)
		}
	}
}

// TestReadDamage: a journal damaged before its end is reported with where
// (ErrCorrupt, the offset), and the rounds of the records before the
// damage are still given; a directory without a journal is
// ErrNotStateDir. docs/JOURNAL.md, "Damage".
func TestReadDamage(t *testing.T) {
	dir := t.TempDir()
	data, _, ends := writeJournal(t, dir, "a", "b")
	bad := append([]byte(nil), data...)
	bad[ends[2]+frameHead] ^= 0x40 // a payload byte of the fourth record
	if err := os.WriteFile(filepath.Join(dir, "journal"), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(snap.Damage, ErrCorrupt) {
		t.Fatalf("damage %v, want ErrCorrupt", snap.Damage)
	}
	good, err := openFile(t, data[:ends[2]])
	if err != nil {
		t.Fatal(err)
	}
	if !sameState(&snap.State, good) {
		t.Errorf("before the damage Read found %+v, want %+v", snap.State.Rounds, good.Rounds)
	}
	if _, err := Read(t.TempDir()); !errors.Is(err, ErrNotStateDir) {
		t.Errorf("plain directory: %v, want ErrNotStateDir", err)
	}
}
