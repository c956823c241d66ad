package hot

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestTableAgreesWithMap checks, over random sets, deletes and gets of
// many keys per slot, that a Table always says what a plain map given
// the same changes says: a stale slot would hand a round that was
// forgotten, or the record of another round, or an older record of the
// same round.
func TestTableAgreesWithMap(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	want := map[string]*int{}
	tab := NewTable[*int]()
	for i := range 200_000 {
		key := "r" + strconv.Itoa(rng.IntN(2000))
		switch rng.IntN(4) {
		case 0:
			v := new(int)
			*v = i
			want[key] = v
			tab.Set(key, v)
		case 1:
			delete(want, key)
			tab.Delete(key)
		default:
			if got := tab.Get(key); got != want[key] {
				t.Fatalf("seed %d, step %d: Get(%q) = %p, want %p", seed, i, key, got, want[key])
			}
		}
	}
	if tab.Len() != len(want) {
		t.Fatalf("seed %d: Len %d, want %d", seed, tab.Len(), len(want))
	}
	n := 0
	for k, v := range tab.All() {
		if want[k] != v {
			t.Fatalf("seed %d: All yields %q = %p, want %p", seed, k, v, want[k])
		}
		n++
	}
	if n != len(want) {
		t.Fatalf("seed %d: All yields %d keys, want %d", seed, n, len(want))
	}
}

// bigTable returns a table that holds more keys than the array has
// slots, so that it has the array: none of its keys starts with "a" or
// "k".
func bigTable() Table[*int] {
	tab := NewTable[*int]()
	for i := range size + 1 {
		tab.Set("x"+strconv.Itoa(i), new(int))
	}
	return tab
}

// TestArrayOnlyForBigTables checks that a table gets its array once it
// holds more keys than the array has slots, and not before.
func TestArrayOnlyForBigTables(t *testing.T) {
	tab := NewTable[*int]()
	for i := range size {
		tab.Set("x"+strconv.Itoa(i), new(int))
	}
	if tab.c != nil {
		t.Fatalf("a table of %d keys has the array", size)
	}
	tab.Set("one more", new(int))
	if tab.c == nil {
		t.Fatalf("a table of %d keys has no array", size+1)
	}
}

// TestMissingIsNotKept checks that a key missing from the map takes no
// slot (the zero value marks an empty one), and that a key found in the
// map is kept in its slot for the next Get.
func TestMissingIsNotKept(t *testing.T) {
	tab := bigTable()
	clear(tab.c.slots[:])
	if v := tab.Get("a"); v != nil {
		t.Fatalf("Get of a missing key = %p, want nil", v)
	}
	if s := tab.c.slots[index("a")]; s != (slot[*int]{}) {
		t.Fatalf("a missing key took its slot: %+v", s)
	}
	one := new(int)
	tab.m["a"] = one // in the map, not in the array
	if v := tab.Get("a"); v != one {
		t.Fatalf("Get = %p, want %p", v, one)
	}
	if s := tab.c.slots[index("a")]; s.key != "a" || s.v != one {
		t.Fatalf("Get did not keep what it found: slot %+v", s)
	}
}

// TestDeleteLeavesAnotherKeysSlot checks that deleting a key that is not
// the one in its slot leaves that slot's key.
func TestDeleteLeavesAnotherKeysSlot(t *testing.T) {
	tab := bigTable()
	a, b := "k0", ""
	for i := 1; ; i++ {
		if k := "k" + strconv.Itoa(i); index(k) == index(a) {
			b = k
			break
		}
	}
	v := new(int)
	tab.Set(a, v)
	tab.Delete(b)
	if s := tab.c.slots[index(a)]; s.key != a || s.v != v {
		t.Fatalf("Delete(%q) took %q out of their shared slot", b, a)
	}
	if got := tab.Get(a); got != v {
		t.Fatalf("Get(%q) = %p, want %p", a, got, v)
	}
}
