//go:build race

package bench

// raceEnabled says the race detector is on: timings mean little then.
const raceEnabled = true
