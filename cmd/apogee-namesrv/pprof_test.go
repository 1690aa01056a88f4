package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pprofStatus is the status of GET /debug/pprof/cmdline on addr, with
// basic authentication unless user is "".
func pprofStatus(t *testing.T, addr, user, password string) int {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+"/debug/pprof/cmdline", nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestPprofGuarded: --pprof is open without access control; under
// --acl-file it needs basic authentication with a Super user (401 without
// credentials, 403 for a normal user); on an address that is not loopback
// the start is refused, naming --pprof-allow-remote.
func TestPprofGuarded(t *testing.T) {
	open := start(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--pprof", "127.0.0.1:0")
	if s := pprofStatus(t, open.Ready.Pprof, "", ""); s != http.StatusOK {
		t.Fatalf("pprof without ACL: %d", s)
	}
	open.stop(t, syscall.SIGTERM)

	file := filepath.Join(t.TempDir(), "acl.yml")
	if err := os.WriteFile(file, []byte("users:\n  - {username: root, password: root-secret, userType: Super}\n  - {username: app, password: app-secret}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--pprof", "127.0.0.1:0", "--acl-file", file)
	for _, c := range []struct {
		user, password string
		want           int
	}{{"", "", 401}, {"app", "app-secret", 403}, {"root", "wrong", 401}, {"root", "root-secret", 200}} {
		if s := pprofStatus(t, p.Ready.Pprof, c.user, c.password); s != c.want {
			t.Errorf("pprof under ACL as %q: %d, want %d", c.user, s, c.want)
		}
	}
	p.stop(t, syscall.SIGTERM)

	// Bound for an instant on every interface, refused before it serves.
	out, err := exec.Command(binPath, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--pprof", "0.0.0.0:0").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "--pprof-allow-remote") {
		t.Fatalf("pprof on 0.0.0.0: %v\n%s", err, out)
	}
}
