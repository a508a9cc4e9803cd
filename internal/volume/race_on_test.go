//go:build race

package volume

// raceBuild: the race detector slows TestECPowerCut about tenfold; under it the test runs
// fewer seeds.
const raceBuild = true
