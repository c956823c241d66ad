package hot

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestLookupAgreesWithTable checks, over random lookups, sets and
// deletes (the table stays the truth, told to the cache), that
// Lookup always says what the table says: a stale slot would hand a round
// that was forgotten, or the record of another round.
func TestLookupAgreesWithTable(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	table := map[string]*int{}
	var c Cache[*int]
	for i := range 200_000 {
		key := "r" + strconv.Itoa(rng.IntN(2000)) // many keys per slot
		switch rng.IntN(4) {
		case 0:
			v := new(int)
			*v = i
			table[key] = v
			c.Put(key, v)
		case 1:
			delete(table, key)
			c.Drop(key)
		default:
			if got, want := c.Lookup(table, key), table[key]; got != want {
				t.Fatalf("seed %d, step %d: Lookup(%q) = %p, the table has %p", seed, i, key, got, want)
			}
		}
	}
}

// TestMissingIsNotKept checks that a key missing from the table is not
// kept (the zero value marks an empty slot), and that Get, Put, Drop and
// Clear keep and forget what they say.
func TestMissingIsNotKept(t *testing.T) {
	var c Cache[*int]
	table := map[string]*int{}
	if v := c.Lookup(table, "a"); v != nil {
		t.Fatalf("Lookup of a missing key = %p, want nil", v)
	}
	if _, ok := c.Get("a"); ok {
		t.Fatal("a missing key was kept")
	}
	one := new(int)
	table["a"] = one
	if v := c.Lookup(table, "a"); v != one {
		t.Fatalf("Lookup = %p, want %p", v, one)
	}
	if v, ok := c.Get("a"); !ok || v != one {
		t.Fatalf("after Lookup, Get = %p, %v; want %p, true", v, ok, one)
	}
	c.Drop("a")
	if _, ok := c.Get("a"); ok {
		t.Fatal("Drop left the key")
	}
	c.Put("b", one)
	c.Clear()
	if _, ok := c.Get("b"); ok {
		t.Fatal("Clear left a key")
	}
}

// TestKeyOfAnotherSlotUntouched checks that Drop of a key that is not the
// one in its slot leaves that slot's key.
func TestKeyOfAnotherSlotUntouched(t *testing.T) {
	var c Cache[*int]
	// Two keys in one slot.
	a := "k0"
	b := ""
	for i := 1; ; i++ {
		if k := "k" + strconv.Itoa(i); index(k) == index(a) {
			b = k
			break
		}
	}
	v := new(int)
	c.Put(a, v)
	c.Drop(b)
	if got, ok := c.Get(a); !ok || got != v {
		t.Fatalf("Drop(%q) took %q out of their shared slot", b, a)
	}
}
