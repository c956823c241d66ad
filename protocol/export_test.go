package protocol

// SharedRoundMoreIsZero reports whether the zero roundMore that ext
// gives every round without one of its own is still zero: a write
// through ext instead of own would change it for every such round.
func SharedRoundMoreIsZero() bool { return noMore == (roundMore{}) }
