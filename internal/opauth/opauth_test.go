package opauth

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeUsers: alice/right is a user, white is a global white address;
// refusals are recorded.
type fakeUsers struct {
	white   netip.Addr
	refused []string
}

var errWrong = errors.New("wrong password")

func (f *fakeUsers) Login(user, password string) error {
	if user == "alice" && password == "right" || user == "bob" && password == "bobs" {
		return nil
	}
	return errWrong
}

func (f *fakeUsers) AllowWhite(ip netip.Addr) bool { return ip == f.white }

func (f *fakeUsers) Refused(op, user string, _ netip.Addr, err error) {
	f.refused = append(f.refused, op+" "+user+": "+err.Error())
}

func (f *fakeUsers) RequireSuper(user string) error {
	if user != "alice" {
		return errors.New("not a Super user")
	}
	return nil
}

func serve(h http.Handler, remote, user, password string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/metrics", nil)
	r.RemoteAddr = remote
	if user != "" {
		r.SetBasicAuth(user, password)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestRequire: no credentials is a challenge (401, WWW-Authenticate, not
// counted), a wrong password 401 and counted, a right one without the
// permission 403, with it the endpoint; ten failures block the source
// (429 with Retry-After, even with the right password) for the window,
// other sources are not blocked; a white address needs no credentials.
func TestRequire(t *testing.T) {
	users := &fakeUsers{white: netip.MustParseAddr("192.0.2.9")}
	now := time.Unix(1_000_000, 0)
	h := Require(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("metrics")) }),
		Options{Users: users, Op: "metrics", Now: func() time.Time { return now },
			Permit: func(user string, _ netip.Addr) error {
				if user != "alice" {
					return errors.New("no Get on the cluster")
				}
				return nil
			}})
	const src = "192.0.2.1:5000"
	if w := serve(h, src, "", ""); w.Code != 401 || w.Header().Get("WWW-Authenticate") != `Basic realm="apogee"` {
		t.Fatalf("no credentials: %d %q", w.Code, w.Header())
	}
	if w := serve(h, src, "alice", "right"); w.Code != 200 || w.Body.String() != "metrics" {
		t.Fatalf("alice: %d %q", w.Code, w.Body)
	}
	if w := serve(h, src, "bob", "bobs"); w.Code != 403 || !strings.Contains(w.Body.String(), "no Get on the cluster") {
		t.Fatalf("bob: %d %q", w.Code, w.Body)
	}
	if w := serve(h, "192.0.2.9:1", "", ""); w.Code != 200 {
		t.Fatalf("a white address: %d", w.Code)
	}
	for i := range MaxFailures {
		if w := serve(h, src, "alice", "guess"); w.Code != 401 || w.Header().Get("WWW-Authenticate") == "" {
			t.Fatalf("guess %d: %d", i, w.Code)
		}
	}
	w := serve(h, src, "alice", "right")
	if w.Code != 429 || w.Header().Get("Retry-After") != "601" {
		t.Fatalf("after %d failures: %d, Retry-After %q", MaxFailures, w.Code, w.Header().Get("Retry-After"))
	}
	if w := serve(h, "192.0.2.2:5000", "alice", "right"); w.Code != 200 {
		t.Fatalf("another source: %d", w.Code)
	}
	now = now.Add(Window)
	if w := serve(h, src, "alice", "right"); w.Code != 200 {
		t.Fatalf("a window later: %d", w.Code)
	}
	if len(users.refused) != MaxFailures+1 || !strings.HasPrefix(users.refused[0], "metrics bob: ") || strings.Contains(strings.Join(users.refused, "\n"), "guess") {
		t.Fatalf("refusals reported: %q", users.refused)
	}
}

// TestPprof: pprof on an address that is not loopback is refused unless
// allowed; under access control it needs a Super user.
func TestPprof(t *testing.T) {
	if err := CheckPprofAddr(tcp("0.0.0.0:6060"), false); !errors.Is(err, ErrPprofNotLoopback) || !strings.Contains(err.Error(), PprofAllowRemoteFlag) {
		t.Fatalf("0.0.0.0 without the override: %v", err)
	}
	for _, c := range []struct {
		addr  string
		allow bool
	}{{"127.0.0.1:6060", false}, {"[::1]:6060", false}, {"0.0.0.0:6060", true}, {"192.0.2.1:6060", true}} {
		if err := CheckPprofAddr(tcp(c.addr), c.allow); err != nil {
			t.Errorf("%s (allowed %v): %v", c.addr, c.allow, err)
		}
	}
	users := &fakeUsers{}
	h := Require(PprofHandler(), Options{Users: users, Op: "pprof", Permit: func(u string, _ netip.Addr) error { return users.RequireSuper(u) }})
	for _, c := range []struct {
		user, password string
		want           int
	}{{"", "", 401}, {"bob", "bobs", 403}, {"alice", "right", 200}} {
		r := httptest.NewRequest("GET", "/debug/pprof/cmdline", nil)
		r.RemoteAddr = "127.0.0.1:1"
		if c.user != "" {
			r.SetBasicAuth(c.user, c.password)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%q: %d, want %d", c.user, w.Code, c.want)
		}
	}
}

func tcp(s string) *net.TCPAddr {
	return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s))
}

// everywhere is a loopback listener that says it listens on every
// interface (what --pprof 0.0.0.0:PORT binds), so that the test serves
// nothing beyond loopback.
type everywhere struct{ net.Listener }

func (everywhere) Addr() net.Addr { return tcp("0.0.0.0:6060") }

// TestServePprofAllowedRemote: with the override pprof serves on an
// address that is not loopback, with a WARN naming the override, and
// under access control needs a Super user; without the override it is
// refused and serves nothing.
func TestServePprofAllowedRemote(t *testing.T) {
	for _, acl := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		var buf bytes.Buffer
		var mu sync.Mutex
		logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
		var users Supers
		if acl {
			users = &fakeUsers{}
		}
		if err := ServePprof(everywhere{ln}, false, users, logger); !errors.Is(err, ErrPprofNotLoopback) {
			t.Fatalf("acl %v, without the override: %v", acl, err)
		}
		if err := ServePprof(everywhere{ln}, true, users, logger); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		log := buf.String()
		mu.Unlock()
		if !strings.Contains(log, "level=WARN") || !strings.Contains(log, PprofAllowRemoteFlag) || strings.Contains(log, "WITHOUT authentication") == acl {
			t.Errorf("acl %v: the WARN: %s", acl, log)
		}
		want := http.StatusOK
		if acl {
			want = http.StatusUnauthorized
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/debug/pprof/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("acl %v: %d, want %d", acl, resp.StatusCode, want)
		}
		ln.Close()
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
