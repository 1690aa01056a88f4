package logsetup

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	var b bytes.Buffer
	l, err := New(&b, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("dropped")
	l.Warn("kept", "k", 1)
	var line map[string]any
	if err := json.Unmarshal(b.Bytes(), &line); err != nil || line["msg"] != "kept" || line["k"] != float64(1) {
		t.Fatalf("json at warn wrote %q (%v); want one object for the warning alone", b.String(), err)
	}
	b.Reset()
	if l, err = New(&b, "", ""); err != nil {
		t.Fatal(err)
	}
	l.Debug("dropped")
	l.Info("kept")
	if got := b.String(); !strings.Contains(got, "msg=kept") || strings.Contains(got, "dropped") {
		t.Fatalf("the defaults (info, text) wrote %q", got)
	}
	if _, err := New(&b, "loud", "text"); err == nil || !strings.HasPrefix(err.Error(), "--log-level") {
		t.Fatalf("an unknown level: %v, want an error naming --log-level", err)
	}
	if _, err := New(&b, "info", "xml"); err == nil || !strings.HasPrefix(err.Error(), "--log-format") {
		t.Fatalf("an unknown format: %v, want an error naming --log-format", err)
	}
}
