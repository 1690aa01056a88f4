package acl

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// syncBuf is a log destination safe for the watcher's goroutine.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestInitUsers: Options.InitUsers (initAuthenticationUser) is created as
// a super user when absent, kept in the store across restarts, never
// changed by a later start with another password (WARN, without the
// password), and never shadows a user of the file; a user without a
// password is an error that names no secret.
func TestInitUsers(t *testing.T) {
	dir := t.TempDir()
	var logs syncBuf
	open := func(o Options) (*Guard, error) {
		o.Dir, o.ClusterName, o.Logger = dir, "c1", slog.New(slog.NewTextHandler(&logs, nil))
		g, err := Open(o)
		if err == nil {
			t.Cleanup(func() { g.Close() })
		}
		return g, err
	}
	adminReq := func() *protocol.Command { return req(protocol.ReqUpdateBrokerConfig) }
	// No user at all: the WARN names the way out.
	if _, err := open(Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "initAuthenticationUser") {
		t.Errorf("the no-user WARN should name initAuthenticationUser:\n%s", logs.String())
	}

	g, err := open(Options{InitUsers: []User{{Name: "root", Password: "root-pw-1", Type: Normal}}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, remark := g.Check(local, signed(adminReq(), "root", "root-pw-1")); !ok {
		t.Fatalf("the initial user is refused an admin request (it must be a super user): %s", remark)
	}
	g.Close()

	// A restart with another password: the stored one stays.
	g, err = open(Options{InitUsers: []User{{Name: "root", Password: "root-pw-2"}}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := g.Check(local, signed(adminReq(), "root", "root-pw-1")); !ok {
		t.Error("the stored password of the initial user was replaced")
	}
	if ok, _, _ := g.Check(local, signed(adminReq(), "root", "root-pw-2")); ok {
		t.Error("the new password of an existing initial user was taken")
	}
	if !strings.Contains(logs.String(), "exists already with another password") {
		t.Errorf("no WARN for the password that differs:\n%s", logs.String())
	}
	g.Close()
	// And without the key, it is still there (a user like any other).
	g, err = open(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := g.Check(local, signed(adminReq(), "root", "root-pw-1")); !ok {
		t.Error("the initial user did not survive a restart without the key")
	}
	g.Close()

	// A user of the file is the file's.
	file := writeFile(t, t.TempDir(), "acl.yml", projectFile)
	g, err = open(Options{File: file, InitUsers: []User{{Name: "alice", Password: "alice-init-pw"}}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := g.Check(local, signed(adminReq(), "alice", "alice-secret")); ok {
		t.Error("the file's normal user alice became a super user")
	}
	if ok, _, _ := g.Check(local, signed(adminReq(), "alice", "alice-init-pw")); ok {
		t.Error("the initial user's password replaced the file's")
	}
	g.Close()

	if _, err := open(Options{InitUsers: []User{{Name: "nopw"}}}); err == nil {
		t.Error("an initial user without a password was accepted")
	}
	for _, secret := range []string{"root-pw-1", "root-pw-2", "alice-init-pw"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log holds the password %q:\n%s", secret, logs.String())
		}
	}
	if data, err := os.ReadFile(dir + "/" + StoreFile); err != nil || bytes.Contains(data, []byte("root-pw-1")) {
		t.Errorf("the store holds the password in clear (or is missing: %v)", err)
	}
}

// TestReloadErrorsThrottled: a file that does not load is logged once per
// ReloadErrorLogInterval, however many checks fail; when it loads again,
// one line says how many failures were not logged.
func TestReloadErrorsThrottled(t *testing.T) {
	fdir := t.TempDir()
	file := writeFile(t, fdir, "acl.yml", projectFile)
	var logs syncBuf
	g, err := Open(Options{File: file, Dir: t.TempDir(), ReloadInterval: 5 * time.Millisecond, ReloadErrorLogInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	// Replaced by a rename, as the docs advise: one version of the file.
	if err := os.Rename(writeFile(t, fdir, "acl.yml.bad", "users: [\n"), file); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "20 failed checks", func() error {
		if n := g.Stats().ReloadErrors; n < 20 {
			return fmt.Errorf("%d failed checks", n)
		}
		return nil
	})
	if n := strings.Count(logs.String(), "does not load"); n != 1 {
		t.Errorf("%d lines for one bad file, want 1:\n%s", n, logs.String())
	}
	tmp := writeFile(t, fdir, "acl.yml.tmp", projectFile+"\n# fixed\n")
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the file to load again", func() error {
		if !strings.Contains(logs.String(), "loads again") {
			return fmt.Errorf("no line yet:\n%s", logs.String())
		}
		return nil
	})
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "loads again") {
			line = l
		}
	}
	var n int
	if _, err := fmt.Sscanf(line[strings.Index(line, "failed_checks_not_logged="):], "failed_checks_not_logged=%d", &n); err != nil || n < 19 {
		t.Errorf("the recovery line %q should count the >= 19 failures not logged", line)
	}
}
