//go:build race

package journal

// raceOn: the race detector slows the journal's encoding tenfold, so the
// long compaction run writes fewer rounds (still more than KeepFinished).
const raceOn = true
