// Package hot is a table of values by string key that keeps the entries
// in use now in a small array in front of its map: a node's table of
// rounds holds every round opened and not yet forgotten (thousands, when
// an application opens rounds far ahead), but the lines that arrive
// touch the few dozen in flight. A lookup in a big map touches memory
// that is cold by then (its cost is the cache and TLB misses, not the
// hashing); a hit in the array touches only the array, which stays warm.
//
// The array is direct-mapped: each key has one slot, chosen by a hash of
// its bytes; a key whose slot another key took is simply looked up in
// the map again. The map stays the truth, and the table's Set and Delete
// keep the array in step with it. A table gets its array only once it
// holds more keys than the array has slots: a small map is warm anyway,
// and a process with 10,000 nodes, each with a table of a few rounds,
// keeps no array for any. Not safe for concurrent use.
package hot

import (
	"iter"
	"maps"
)

// Table is a map of V by string key with the entries in use in front of
// it. The zero V stands for "none", as a map's lookup of a missing key
// returns it: a Table holds no zero values. Make one with NewTable; do
// not copy it once used.
type Table[V comparable] struct {
	m map[string]V
	c *cache[V] // nil until the map holds more than size keys
}

// NewTable returns an empty table.
func NewTable[V comparable]() Table[V] { return Table[V]{m: make(map[string]V)} }

// Get returns the value of key, the zero V if there is none.
func (t *Table[V]) Get(key string) V {
	if t.c == nil {
		return t.m[key]
	}
	s := &t.c.slots[index(key)]
	var zero V
	if s.v != zero && s.key == key {
		return s.v
	}
	v := t.m[key]
	if v != zero {
		*s = slot[V]{key, v}
	}
	return v
}

// Set makes v the value of key. v must not be the zero V.
func (t *Table[V]) Set(key string, v V) {
	t.m[key] = v
	switch {
	case t.c != nil:
		t.c.slots[index(key)] = slot[V]{key, v}
	case len(t.m) > size:
		t.c = new(cache[V]) // filled as keys are used
	}
}

// Delete removes key, if it is there.
func (t *Table[V]) Delete(key string) {
	delete(t.m, key)
	if t.c == nil {
		return
	}
	if s := &t.c.slots[index(key)]; s.key == key {
		*s = slot[V]{}
	}
}

// Len is the number of keys.
func (t *Table[V]) Len() int { return len(t.m) }

// All yields every key and its value, in no particular order. The table
// must not be changed meanwhile.
func (t *Table[V]) All() iter.Seq2[string, V] { return maps.All(t.m) }

// size is the number of slots, a power of two.
const size = 256

// cache is the array in front of the map.
type cache[V comparable] struct {
	slots [size]slot[V]
}

type slot[V comparable] struct {
	key string
	v   V
}

// index is the slot of key: FNV-1a of its bytes.
func index(key string) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h & (size - 1))
}
