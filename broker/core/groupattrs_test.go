package core

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/protocol"
)

// TestGroupAttributes: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP's attributes
// are changes as RocketMQ 5 applies them (a new group takes +key=value; an
// update adds, replaces and removes; no attributes keep the group's; a
// refused change leaves the group as it was), and the group's attributes
// follow the configuration log to a replica, which, opened as the master
// with its state files lost, has them from the log.
func TestGroupAttributes(t *testing.T) {
	m := newTestCore(t, nil)
	sdir := t.TempDir()
	s := newSlaveCore(t, func(o *Options) { o.DataDir = sdir })
	update := func(attrs map[string]string) error {
		g := protocol.DefaultSubscriptionGroupConfig("LiteGroup")
		g.Attributes = attrs
		return m.Admin().UpdateSubscriptionGroup(g)
	}
	attrsOf := func(c *Core) map[string]string {
		t.Helper()
		g, err := c.SubscriptionGroup([]byte("LiteGroup"))
		if err != nil {
			t.Fatal(err)
		}
		return g.Attributes
	}
	for _, tc := range []struct {
		attrs map[string]string
		want  string
	}{
		{map[string]string{"-lite.bind.topic": ""}, "a new group takes +key=value only"},
		{map[string]string{"lite.bind.topic": "Parent"}, "want +key (add or change) or -key (remove)"},
		{map[string]string{"+no.such": "1"}, `unsupported group attribute "no.such"`},
		{map[string]string{"+lite.sub.model": "Mixed"}, "want Shared or Exclusive"},
	} {
		if err := update(tc.attrs); err == nil || !strings.Contains(err.Error(), tc.want) || Code(err) != protocol.RespInvalidParameter {
			t.Errorf("create with %v: %v, want %q", tc.attrs, err, tc.want)
		}
	}
	if err := update(map[string]string{"+lite.bind.topic": "Parent", "+lite.sub.model": "Shared"}); err != nil {
		t.Fatal(err)
	}
	if got := attrsOf(m); !maps.Equal(got, map[string]string{"lite.bind.topic": "Parent", "lite.sub.model": "Shared"}) {
		t.Fatalf("created with %v", got)
	}
	if err := update(nil); err != nil { // mqadmin without --attributes
		t.Fatal(err)
	}
	if err := update(map[string]string{"+lite.sub.model": "Exclusive", "-lite.bind.topic": "", "+priority.factor": "40"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"lite.sub.model": "Exclusive", "priority.factor": "40"}
	if got := attrsOf(m); !maps.Equal(got, want) {
		t.Fatalf("after the changes: %v, want %v", got, want)
	}
	if err := update(map[string]string{"-lite.bind.topic": "", "+priority.factor": "50"}); err == nil ||
		!strings.Contains(err.Error(), "no such attribute to remove") {
		t.Fatalf("removing an absent attribute: %v", err)
	}
	if got := attrsOf(m); !maps.Equal(got, want) {
		t.Fatalf("a refused change changed the group: %v", got)
	}

	replicate(t, m, s)
	if got := attrsOf(s); !maps.Equal(got, want) {
		t.Fatalf("the replica's attributes: %v, want %v", got, want)
	}
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{TopicsFile, SubscriptionGroupFile} {
		os.Remove(filepath.Join(sdir, ConfigDir, f))
		os.Remove(filepath.Join(sdir, ConfigDir, f+BakSuffix))
	}
	nm := newTestCore(t, func(o *Options) { o.DataDir = sdir })
	if got := attrsOf(nm); !maps.Equal(got, want) {
		t.Fatalf("the new master's attributes (from its log): %v, want %v", got, want)
	}
}
