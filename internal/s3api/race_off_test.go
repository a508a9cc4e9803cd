//go:build !race

package s3api_test

const raceEnabled = false
