//go:build race

package policy

// raceEnabled is set when the race detector is on: sync.Pool then drops items
// at random, so regexp's matcher cache allocates now and then.
const raceEnabled = true
