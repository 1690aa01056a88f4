package acl

import (
	"errors"
	"testing"
)

// TestRequireSuper: pprof's check passes an enabled Super user only; a
// normal user, a disabled one and an unknown name are denied (ErrDenied),
// and each refusal is counted.
func TestRequireSuper(t *testing.T) {
	g := openGuard(t, writeFile(t, t.TempDir(), "acl.yml", projectFile))
	if err := g.RequireSuper("admin"); err != nil {
		t.Fatalf("admin: %v", err)
	}
	before := g.Stats().Denied
	for _, u := range []string{"alice", "bob", "nobody"} {
		if err := g.RequireSuper(u); !errors.Is(err, ErrDenied) {
			t.Errorf("%s: %v, want ErrDenied", u, err)
		}
	}
	if d := g.Stats().Denied - before; d != 3 {
		t.Errorf("%d refusals counted, want 3", d)
	}
}
