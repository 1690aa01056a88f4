//go:build !unix

package acl

import "testing"

// reportCPU reports nothing where getrusage is not available.
func reportCPU(*testing.B) func() { return func() {} }
