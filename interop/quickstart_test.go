package interop

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestQuickstart runs the program that docs/operations.md shows, so the
// documented snippet keeps working.
func TestQuickstart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a program")
	}
	b := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./examples/quickstart", "-namesrv", b.NsAddr, "-topic", uniq("TQuickstart"))
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("quickstart: %v\n%s\n%s", err, out, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "sent ") ||
		!strings.HasPrefix(lines[1], `received "hello, apogee" with tag TagA from queue `) {
		t.Fatalf("quickstart printed:\n%s", out)
	}
}
