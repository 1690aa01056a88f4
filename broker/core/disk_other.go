//go:build !unix

package core

// diskSpace is not measured on this platform: zeros.
func diskSpace(string) (ratio float64, total, free int64) { return 0, 0, 0 }
