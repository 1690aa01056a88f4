package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
)

// The users of TestOperatorPortAuth: admin is a super user, scraper may
// read the broker's state (Get on the cluster: what
// GET_BROKER_RUNTIME_INFO needs), app may only publish and subscribe.
const opACLFile = `
users:
  - {username: admin, password: admin-secret, userType: Super}
  - {username: scraper, password: scraper-secret}
  - {username: app, password: app-secret}
acls:
  - subject: User:scraper
    policies:
      - entries:
          - {resource: "Cluster:DefaultCluster", actions: [Get], decision: Allow}
  - subject: User:app
    policies:
      - entries:
          - {resource: "Topic:*", actions: [Pub, Sub], decision: Allow}
`

// opGet sends GET path to addr, with basic authentication unless user is
// "", and returns the answer (its body read).
func opGet(t *testing.T, addr, path, user, password string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestOperatorPortAuth: under --acl-file, /metrics needs basic
// authentication with an ACL user who may read the broker's state (401
// with the challenge without credentials or with a wrong password, 403
// for a user without Get on the cluster, 200 with the rocketmq_ series
// for such a user and for a super user), and pprof a super user; without
// ACL both stay open; --metrics-auth=false opens /metrics under ACL with a
// WARN; pprof on an address that is not loopback is refused at start,
// naming the override.
func TestOperatorPortAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(file, []byte(opACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	hasMetrics := func(body string) bool { return strings.Contains(body, "\nrocketmq_") }

	t.Run("acl", func(t *testing.T) {
		p := start(t, bin, "--namesrv-listen", "", "--data-dir", filepath.Join(t.TempDir(), "data"), "--acl-file", file,
			"--metrics-listen", "127.0.0.1:0", "--pprof", "127.0.0.1:0")
		defer p.stop(t, syscall.SIGTERM)
		addr := p.metricsAddr(t)
		resp, body := opGet(t, addr, "/metrics", "", "")
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Basic realm="apogee"` || hasMetrics(body) {
			t.Fatalf("/metrics without credentials: %d %q\n%s", resp.StatusCode, resp.Header, body)
		}
		if resp, body := opGet(t, addr, "/metrics", "admin", "wrong"); resp.StatusCode != http.StatusUnauthorized || hasMetrics(body) {
			t.Fatalf("/metrics with a wrong password: %d\n%s", resp.StatusCode, body)
		}
		if resp, body := opGet(t, addr, "/metrics", "app", "app-secret"); resp.StatusCode != http.StatusForbidden || hasMetrics(body) || !strings.Contains(body, "User:app") {
			t.Fatalf("/metrics as app (no Get on the cluster): %d\n%s", resp.StatusCode, body)
		}
		for _, u := range [][2]string{{"scraper", "scraper-secret"}, {"admin", "admin-secret"}} {
			if resp, body := opGet(t, addr, "/metrics", u[0], u[1]); resp.StatusCode != http.StatusOK || !hasMetrics(body) || !strings.Contains(body, "rocketmq_broker_") {
				t.Fatalf("/metrics as %s: %d\n%.2000s", u[0], resp.StatusCode, body)
			}
		}
		// The dashboard's pages stay readable without a login (its
		// actions need one).
		if resp, _ := opGet(t, addr, "/topics", "", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("the dashboard's /topics without a login: %d", resp.StatusCode)
		}
		// pprof: a super user only.
		for _, c := range []struct {
			user, password string
			want           int
		}{{"", "", 401}, {"scraper", "scraper-secret", 403}, {"admin", "wrong", 401}, {"admin", "admin-secret", 200}} {
			if resp, body := opGet(t, p.Ready.Pprof, "/debug/pprof/cmdline", c.user, c.password); resp.StatusCode != c.want {
				t.Fatalf("pprof as %q: %d, want %d\n%s", c.user, resp.StatusCode, c.want, body)
			}
		}
		log := p.RunLog()
		if !strings.Contains(log, "op=metrics user=app") || !strings.Contains(log, "op=pprof user=scraper") {
			t.Errorf("the refusals are not logged:\n%s", log)
		}
		for _, secret := range []string{"admin-secret", "app-secret", "scraper-secret"} {
			if strings.Contains(log, secret) {
				t.Errorf("the log holds %s:\n%s", secret, log)
			}
		}
	})

	t.Run("failures are limited per source", func(t *testing.T) {
		p := start(t, bin, "--namesrv-listen", "", "--data-dir", filepath.Join(t.TempDir(), "data"), "--acl-file", file,
			"--metrics-listen", "127.0.0.1:0")
		defer p.stop(t, syscall.SIGTERM)
		addr := p.metricsAddr(t)
		for i := range 10 {
			if resp, _ := opGet(t, addr, "/metrics", "admin", "guess"); resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("guess %d: %d", i, resp.StatusCode)
			}
		}
		resp, body := opGet(t, addr, "/metrics", "admin", "admin-secret")
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || hasMetrics(body) {
			t.Fatalf("the right password after 10 failures: %d %q", resp.StatusCode, resp.Header)
		}
	})

	t.Run("no acl", func(t *testing.T) {
		p := start(t, bin, "--namesrv-listen", "", "--data-dir", filepath.Join(t.TempDir(), "data"),
			"--metrics-listen", "127.0.0.1:0", "--pprof", "127.0.0.1:0")
		defer p.stop(t, syscall.SIGTERM)
		if resp, body := opGet(t, p.metricsAddr(t), "/metrics", "", ""); resp.StatusCode != http.StatusOK || !hasMetrics(body) {
			t.Fatalf("/metrics without ACL: %d\n%.2000s", resp.StatusCode, body)
		}
		if resp, _ := opGet(t, p.Ready.Pprof, "/debug/pprof/cmdline", "", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("pprof without ACL: %d", resp.StatusCode)
		}
	})

	t.Run("metrics auth off", func(t *testing.T) {
		conf := filepath.Join(t.TempDir(), "broker.conf")
		if err := os.WriteFile(conf, []byte("aclEnable=true\naclFile="+file+"\nmetricsAuthEnable=false\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"--acl-file", file, "--metrics-auth=false"}, {"-c", conf}} {
			p := start(t, bin, append([]string{"--namesrv-listen", "", "--data-dir", filepath.Join(t.TempDir(), "data"),
				"--metrics-listen", "127.0.0.1:0"}, args...)...)
			if resp, body := opGet(t, p.metricsAddr(t), "/metrics", "", ""); resp.StatusCode != http.StatusOK || !hasMetrics(body) {
				t.Fatalf("%v: /metrics without credentials: %d\n%.2000s", args, resp.StatusCode, body)
			}
			if log := p.RunLog(); !strings.Contains(log, "level=WARN msg=\"/metrics is open to anyone under access control") {
				t.Errorf("%v: no WARN:\n%s", args, log)
			}
			p.stop(t, syscall.SIGTERM)
		}
	})

	t.Run("pprof not loopback", func(t *testing.T) {
		// Bound for an instant on every interface, refused before it
		// serves anything.
		pp := proctest.New(t, "apogee-broker", bin)
		if err := pp.Launch(withListeners([]string{"--namesrv-listen", "", "--data-dir", filepath.Join(t.TempDir(), "data"), "--pprof", "0.0.0.0:0"})...); err != nil {
			t.Fatal(err)
		}
		wait.Until(t, "the broker exits", func() bool { return !pp.Running() })
		if code := pp.ExitCode(); code != 1 {
			t.Fatalf("exit code %d, want 1", code)
		}
		if log := pp.RunLog(); !strings.Contains(log, "pprof refused on an address that is not loopback") || !strings.Contains(log, "--pprof-allow-remote") {
			t.Fatalf("the refusal does not name the override:\n%s", log)
		}
		if _, err := os.Stat(pp.ReadyPath()); err == nil {
			t.Fatal("a ready file after a refused start")
		}
	})
}

// TestMetricsAuthKey: --metrics-auth is on by default; broker.conf's
// metricsAuthEnable=false turns it off unless the flag is given.
func TestMetricsAuthKey(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "broker.conf")
	if err := os.WriteFile(conf, []byte("metricsAuthEnable=false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"--metrics-auth=false"}, false},
		{[]string{"-c", conf}, false},
		{[]string{"-c", conf, "--metrics-auth=true"}, true},
	} {
		cfg, err := parseConfig(c.args)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if cfg.op.metricsAuth != c.want {
			t.Errorf("%v: metricsAuth %v, want %v", c.args, cfg.op.metricsAuth, c.want)
		}
	}
}
