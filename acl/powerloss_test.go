package acl

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

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

	var began, returned atomic.Int64 // the number of the last user whose creation began, was answered
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			began.Store(i)
			if code, remark, _ := admin(t, g, protocol.ReqAuthCreateUser, "", UserInfo{Password: "secret-" + userName(i)}, "username", userName(i)); code != protocol.RespSuccess {
				done <- fmt.Errorf("create %s: code %d: %s", userName(i), code, remark)
				return
			}
			returned.Store(i)
		}
	}()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	lost := 0
	for i := range 40 {
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		o := crashfs.CloneOptions{Mode: crashfs.Mode(i % 2), Seed: rng.Uint64()}
		lo := returned.Load()
		clone := filepath.Join(t.TempDir(), "clone")
		st, err := fsys.CrashClone(clone, o)
		if err != nil {
			t.Fatal(err)
		}
		hi := began.Load()
		if st.UnsyncedEntries+int(st.UnsyncedBytes) > 0 {
			lost++
		}
		where := fmt.Sprintf("test seed %d, clone %d (%s, seed %d; %v)", seed, i, o.Mode, o.Seed, st)
		users, err := storedUsers(vfs.Default, filepath.Join(clone, "acl"))
		if err != nil {
			t.Fatalf("%s: the store does not open: %v", where, err)
		}
		n := int64(len(users))
		if n < lo || n > hi {
			t.Fatalf("%s: %d users %v, want the users of one creation in [%d, %d] (the last answered, the last begun)", where, n, slices.Sorted(maps.Keys(users)), lo, hi)
		}
		for j := int64(1); j <= n; j++ {
			if users[userName(j)] != "secret-"+userName(j) {
				t.Fatalf("%s: user %s has secret %q (users %v)", where, userName(j), users[userName(j)], slices.Sorted(maps.Keys(users)))
			}
		}
	}
	if lost == 0 {
		t.Fatalf("test seed %d: no clone had anything unsynced to lose: the test did not crash a write", seed)
	}
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
