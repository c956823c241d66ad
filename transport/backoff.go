package transport

import (
	"math/rand/v2"
	"time"
)

// Backoff is a capped exponential backoff with jitter. The zero value uses
// the defaults: 50ms doubling up to 2s, each delay drawn uniformly from
// [d/2, d] so that nodes restarted together do not dial in lockstep.
type Backoff struct {
	Min, Max time.Duration
	// Rand, if set, draws jitter from this source (tests); otherwise the
	// global source.
	Rand *rand.Rand
	n    int
}

// Next returns the delay before the next attempt and counts the attempt.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = 50 * time.Millisecond
	}
	if hi <= 0 {
		hi = 2 * time.Second
	}
	hi = max(hi, lo)
	d := lo
	for i := 0; i < b.n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	b.n++
	half := int64(d / 2)
	var j int64
	if b.Rand != nil {
		j = b.Rand.Int64N(half + 1)
	} else {
		j = rand.Int64N(half + 1)
	}
	return time.Duration(half + j)
}

// Attempts returns how many delays Next has handed out since the last Reset.
func (b *Backoff) Attempts() int { return b.n }

// Reset starts the sequence again from Min, after a success.
func (b *Backoff) Reset() { b.n = 0 }
