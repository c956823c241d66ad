//go:build race

package chainsync

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = true
