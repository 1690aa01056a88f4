//go:build !unix

package benchcpu

func processCPU() (int64, bool) { return 0, false }
