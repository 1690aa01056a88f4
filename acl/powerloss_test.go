package acl

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/crashfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
	"github.com/apogeemq/apogee/protocol"
)

// storedUsers opens the users and ACLs kept in dir and returns each user's
// secret.
func storedUsers(fsys vfs.FS, dir string) (map[string]string, error) {
	g, err := Open(Options{Dir: dir, FS: fsys, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer g.Close()
	out := map[string]string{}
	for name, u := range g.store.users {
		out[name] = u.Password
	}
	return out, nil
}

func userName(i int64) string { return fmt.Sprintf("u%03d", i) }

// The users and ACLs created through the admin codes under power loss:
// while users are created one after another (u001, u002, ... each with its
// own secret, as fast as the guard answers), a crash clone taken at any
// moment opens, and holds exactly the users of the last creation answered
// before it or of one in flight, each secret decrypting with the key file:
// acl.json is never empty or torn, and acl.key is durable before the first
// secret it encrypts.
func TestStorePowerLoss(t *testing.T) {
	root := t.TempDir()
	fsys, err := crashfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Open(Options{Dir: filepath.Join(root, "acl"), FS: fsys, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()

	crashfs.CloneDuringWrites(t, fsys, 40, func(i int64) error {
		if code, remark, _ := admin(t, g, protocol.ReqAuthCreateUser, "", UserInfo{Password: "secret-" + userName(i)}, "username", userName(i)); code != protocol.RespSuccess {
			return fmt.Errorf("create %s: code %d: %s", userName(i), code, remark)
		}
		return nil
	}, func(c crashfs.Clone) {
		users, err := storedUsers(vfs.Default, filepath.Join(c.Dir, "acl"))
		if err != nil {
			t.Fatalf("%s: the store does not open: %v", c.Where, err)
		}
		n := int64(len(users))
		if n < c.Lo || n > c.Hi {
			t.Fatalf("%s: %d users %v, want the users of one creation in [%d, %d] (the last answered, the last begun)", c.Where, n, slices.Sorted(maps.Keys(users)), c.Lo, c.Hi)
		}
		for j := int64(1); j <= n; j++ {
			if users[userName(j)] != "secret-"+userName(j) {
				t.Fatalf("%s: user %s has secret %q (users %v)", c.Where, userName(j), users[userName(j)], slices.Sorted(maps.Keys(users)))
			}
		}
	})
}

// Every file operation of the admin changes and of opening the store failed
// in turn: a change that fails is answered with an error and not applied;
// a change answered SUCCESS is on disk; the store on disk always opens
// (its key with it) and holds the state before or after each change.
func TestStoreFaults(t *testing.T) {
	errorfs.Walk(t, vfs.Default, []errorfs.Mode{errorfs.Once, errorfs.Stop}, func(t *testing.T, fsys *errorfs.FS, root string) {
		dir := filepath.Join(root, "acl")
		g, err := Open(Options{Dir: dir, FS: fsys, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			if !errorsIsInjected(err) {
				t.Fatalf("open: %v, not the injected failure", err)
			}
			return
		}
		defer g.Close()
		// want is what the guard holds; possible, every state the disk may
		// hold: want once a change succeeded, and every state a failed
		// change since then tried to write (a write that fails after its
		// rename, at the directory's fsync, may have replaced the file).
		want := map[string]string{}
		possible := []map[string]string{want}
		change := func(code int32, name string, apply func(map[string]string), body any) {
			attempted := maps.Clone(want)
			apply(attempted)
			r := req(code, "username", name)
			if body != nil {
				r.Body, _ = json.Marshal(body)
			}
			_, err := g.serveAdmin(r) // ServeAdmin answers this error as SYSTEM_ERROR
			switch {
			case err == nil:
				want, possible = attempted, []map[string]string{attempted}
			case errorsIsInjected(err):
				possible = append(possible, attempted)
				if got := storeUsersOf(g); !maps.Equal(got, want) {
					t.Fatalf("a failed change (%v) was applied: users %v, want %v", err, got, want)
				}
			default:
				t.Fatalf("change: %v, not the injected failure", err)
			}
		}
		for _, name := range []string{"ann", "bob"} {
			change(protocol.ReqAuthCreateUser, name, func(m map[string]string) { m[name] = "secret-" + name }, UserInfo{Password: "secret-" + name})
		}
		if _, ok := want["bob"]; ok {
			change(protocol.ReqAuthUpdateUser, "bob", func(m map[string]string) { m["bob"] = "new-secret" }, UserInfo{Password: "new-secret"})
		}
		if _, ok := want["ann"]; ok {
			change(protocol.ReqAuthDeleteUser, "ann", func(m map[string]string) { delete(m, "ann") }, nil)
		}

		// Opening it again through the faults fails only with the fault.
		if _, err := storedUsers(fsys, dir); err != nil && !errorsIsInjected(err) {
			t.Fatalf("reopen: %v, not the injected failure", err)
		}
		got, err := storedUsers(vfs.Default, dir)
		if err != nil {
			t.Fatalf("after the faults the store does not open: %v", err)
		}
		if !slices.ContainsFunc(possible, func(m map[string]string) bool { return maps.Equal(got, m) }) {
			t.Fatalf("stored users %v, want one of %v", got, possible)
		}
	})
}

func storeUsersOf(g *Guard) map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]string{}
	for name, u := range g.store.users {
		out[name] = u.Password
	}
	return out
}

func errorsIsInjected(err error) bool { return errors.Is(err, errorfs.ErrInjected) }
