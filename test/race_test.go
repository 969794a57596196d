//go:build race

package test

// raceEnabled: this test binary has the race detector, and so has the
// skein it builds.
const raceEnabled = true
