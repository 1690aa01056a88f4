package main

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/proctest"
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

// TestPprofGuarded: under --acl-file the controller's --pprof needs basic
// authentication with a Super user (401 without credentials, 403 for a
// normal user); without access control it is open; on an address that is
// not loopback the start is refused, naming --pprof-allow-remote.
func TestPprofGuarded(t *testing.T) {
	c := proctest.StartControllers(t, binPath, 1, append(aclFlags(t), "--pprof", "127.0.0.1:0")...)[0]
	for _, tc := range []struct {
		user, password string
		want           int
	}{{"", "", 401}, {"app", "app-secret", 403}, {"brokers", "wrong", 401}, {"brokers", "brokers-secret", 200}} {
		if s := pprofStatus(t, c.P.Ready.Pprof, tc.user, tc.password); s != tc.want {
			t.Errorf("pprof under ACL as %q: %d, want %d", tc.user, s, tc.want)
		}
	}

	open := proctest.StartControllers(t, binPath, 1, "--pprof", "127.0.0.1:0")[0]
	if s := pprofStatus(t, open.P.Ready.Pprof, "", ""); s != http.StatusOK {
		t.Fatalf("pprof without ACL: %d", s)
	}

	// Bound for an instant on every interface, refused before it serves.
	out, err := exec.Command(binPath, "--id", "c1", "--peers", "c1=127.0.0.1:0", "--raft-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--pprof", "0.0.0.0:0").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "--pprof-allow-remote") {
		t.Fatalf("pprof on 0.0.0.0: %v\n%s", err, out)
	}
}
