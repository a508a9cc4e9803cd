//go:build !unix

package policy

func processCPU() int64 { return -1 }
