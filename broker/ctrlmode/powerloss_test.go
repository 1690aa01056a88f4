package ctrlmode

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/crashfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
)

// The identity file (controllerIdentity.json) under power loss: while the
// node rewrites it (a new broker id after each registration, here as fast
// as it can), a crash clone taken at any moment holds, under its own name,
// the identity of the last write that returned before the clone or of one
// in flight during it, never an empty, torn or missing file, and never a
// new token: loadIdentity on the clone recovers it.
func TestIdentityPowerLoss(t *testing.T) {
	root := t.TempDir()
	fsys, err := crashfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	dir := filepath.Join(root, "broker")
	if err := durable.MkdirAll(fsys, dir, 0o755); err != nil { // as Start does
		t.Fatal(err)
	}
	first, err := loadIdentity(fsys, dir, -1, quiet)
	if err != nil {
		t.Fatal(err)
	}

	// Write i gives the identity broker id i (0: the first identity).
	crashfs.CloneDuringWrites(t, fsys, 40, func(id int64) error {
		return saveIdentity(fsys, dir, identity{BrokerID: id, Token: first.Token})
	}, func(c crashfs.Clone) {
		got, err := loadIdentity(vfs.Default, filepath.Join(c.Dir, "broker"), -1, quiet)
		if err != nil {
			t.Fatalf("%s: the identity does not load: %v", c.Where, err)
		}
		if got.Token != first.Token || got.BrokerID < c.Lo || got.BrokerID > c.Hi {
			t.Fatalf("%s: identity %+v, want token %s and a broker id in [%d, %d] (the last write returned, the last begun)",
				c.Where, got, first.Token, c.Lo, c.Hi)
		}
	})
}

// Every file operation of saving and loading the identity failed in turn:
// a failed save reports the error and leaves the previous identity
// loadable; a failed load reports the error and never replaces an identity
// that exists with a new one.
func TestIdentityFaults(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	errorfs.Walk(t, vfs.Default, []errorfs.Mode{errorfs.Once, errorfs.Stop}, func(t *testing.T, fsys *errorfs.FS, root string) {
		dir := filepath.Join(root, "broker")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		check := func(what string, err error) bool {
			if err != nil && !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("%s: %v, not the injected failure", what, err)
			}
			return err == nil
		}
		// A new identity, then a change of broker id, then a load.
		id, err := loadIdentity(fsys, dir, 3, quiet)
		if !check("first load", err) {
			// Nothing durable promised: a later start makes one again.
			return
		}
		next := identity{BrokerID: 7, Token: id.Token}
		saved := check("save", saveIdentity(fsys, dir, next))
		got, err := loadIdentity(fsys, dir, 3, quiet)
		if check("second load", err) && got.Token != id.Token {
			t.Fatalf("the load made a new token %s over %s", got.Token, id.Token)
		}
		// What is on disk, read without faults: the saved identity, or
		// when the save failed either one (it may have failed after its
		// rename), never anything else.
		got, err = loadIdentity(vfs.Default, dir, 3, quiet)
		if err != nil {
			t.Fatalf("after the faults the identity does not load: %v", err)
		}
		if got != next && (saved || got != id) {
			t.Fatalf("identity %+v after a save that returned %v; want %+v (or %+v had it failed)", got, saved, next, id)
		}
	})
}
