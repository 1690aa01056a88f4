package testlog

import (
	"strings"
	"testing"
)

func TestLinesOfTwoLoggersGoToOneFile(t *testing.T) {
	a, b := New(t, "broker-a"), New(t, "broker-b")
	a.Info("started", "port", 1)
	b.Debug("joined")
	got := Lines(t)
	for _, want := range []string{"logger=broker-a", "msg=started", "logger=broker-b", "msg=joined"} {
		if !strings.Contains(got, want) {
			t.Fatalf("log lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "started") > strings.Index(got, "joined") {
		t.Fatalf("lines out of order:\n%s", got)
	}
}

// A logger used after its test ended (a goroutine the test left behind)
// writes nowhere and does not fail.
func TestLoggerOutlivesItsTest(t *testing.T) {
	var kept interface{ Info(string, ...any) }
	t.Run("inner", func(t *testing.T) {
		kept = New(t, "late")
	})
	kept.Info("after the end")
}
