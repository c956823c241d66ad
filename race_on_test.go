//go:build race

package chainsync_test

// raceEnabled: this test binary runs under the race detector.
const raceEnabled = true
