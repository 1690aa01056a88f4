//go:build !unix

package auth

import "testing"

// reportCPU reports nothing where getrusage is not available.
func reportCPU(*testing.B) func() { return func() {} }
