// Package hot keeps the entries of a big table that are in use now, by
// key, in a small array in front of it: a node's table of rounds holds
// every round opened and not yet forgotten (thousands, when an
// application opens rounds far ahead), but the lines that arrive touch
// the few dozen in flight. A lookup in a big map touches memory that is
// cold by then (its cost is the cache and TLB misses, not the hashing);
// a hit here touches only the small array, which stays warm.
//
// A Cache is direct-mapped: each key has one slot, chosen by a hash of
// its bytes; a key whose slot another key took is simply looked up in
// the table again. The table stays the truth: whoever changes it tells
// the cache (Put a value set, Drop a key deleted). Not safe for
// concurrent use.
package hot

// size is the number of slots, a power of two.
const size = 256

// Cache is the small array in front of a table of V by string key. The
// zero Cache is empty and ready to use.
type Cache[V comparable] struct {
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

// Get returns the value kept for key, and whether one is.
func (c *Cache[V]) Get(key string) (V, bool) {
	s := &c.slots[index(key)]
	var zero V
	if s.v != zero && s.key == key {
		return s.v, true
	}
	return zero, false
}

// Put keeps v for key, in place of whatever held its slot. v must not be
// the zero V (which marks an empty slot).
func (c *Cache[V]) Put(key string, v V) {
	c.slots[index(key)] = slot[V]{key, v}
}

// Lookup returns table[key], from the cache if it is kept there; a value
// found in table is kept for the next lookup.
func (c *Cache[V]) Lookup(table map[string]V, key string) V {
	s := &c.slots[index(key)]
	var zero V
	if s.v != zero && s.key == key {
		return s.v
	}
	v := table[key]
	if v != zero {
		*s = slot[V]{key, v}
	}
	return v
}

// Drop forgets key, if it is kept.
func (c *Cache[V]) Drop(key string) {
	s := &c.slots[index(key)]
	if s.key == key {
		*s = slot[V]{}
	}
}

// Clear forgets every key.
func (c *Cache[V]) Clear() { clear(c.slots[:]) }
