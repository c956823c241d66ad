package protocol

// Outcome returns how the round of r ended at its node, as the ActDone
// that ended it said, or 0 while it runs. For a round DONE at a node with
// a predecessor it returns Done: whether its final COMPLETE was handed
// over is Delivered. A restarted node's driver reads the outcome of the
// rounds that ended before it from here, not from its own reading of
// the states.
func (r Record) Outcome() Outcome {
	switch r.State {
	case StateDone:
		return Done
	case StateFailed:
		return TaskFailed
	case StateAborted:
		// Aborted in COMPLETE: this node's COMPLETE went on and no exit
		// wave came back (abortOutcome).
		if r.LastSucc == Complete && !r.ExitRecv {
			return NoExitWave
		}
		return Aborted
	}
	return 0
}
