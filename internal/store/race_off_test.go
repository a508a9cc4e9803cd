//go:build !race

package store

const raceBuild = false
