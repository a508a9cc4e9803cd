//go:build race

package erasure

const raceEnabled = true
