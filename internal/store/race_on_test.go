//go:build race

package store

// raceBuild: the race detector slows TestPowerCut tenfold; under it the test runs its short
// form, and the long tier (make test-long) runs the full one without it.
const raceBuild = true
