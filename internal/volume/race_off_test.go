//go:build !race

package volume

const raceBuild = false
