package dashboard_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/dashboard"
	"github.com/apogeemq/apogee/internal/testlog"
)

// serve runs a dashboard with options o over b.
func serve(t *testing.T, b *broker.Broker, o dashboard.Options) *httptest.Server {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testlog.New(t, "dashboard")
	}
	d, err := dashboard.New(b, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() }) // its sampler stops before the broker
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return srv
}

// request sends method path to srv with the Host and headers given and
// returns the status and body.
func request(t *testing.T, c *http.Client, srv *httptest.Server, method, path, host string, hdr map[string]string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHostNames: a request naming another host (DNS rebinding: Host and
// Origin both the attacker's name) is refused with 403 saying how to allow
// the name, GET or POST, and creates nothing; loopback addresses,
// localhost names, the machine's host name and configured names (exact or
// *.domain) are answered.
func TestHostNames(t *testing.T) {
	b, _ := runBroker(t, "")
	srv := serve(t, b, dashboard.Options{Hosts: []string{"dash.example", "*.corp.example", "10.9.8.7"}, HostsHint: "allow NAME with --dashboard-hosts"})
	c := &http.Client{Timeout: 10 * time.Second}
	_, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")

	// The attack of case 10: a confirmed action, then the POST as a
	// rebinding page sends it.
	page := browser{t: t, base: srv.URL, c: c}.get("/confirm?action=create-topic&topic=Rebound&queues=1", 200)
	form := confirmForm(t, page)
	evil := "evil.example:" + port
	status, body := request(t, c, srv, "POST", "/do", evil, map[string]string{"Origin": "http://" + evil}, form)
	if status != http.StatusForbidden || !strings.Contains(body, `"evil.example"`) || !strings.Contains(body, "allow evil.example with --dashboard-hosts") {
		t.Fatalf("POST with Host %s: %d\n%s", evil, status, body)
	}
	if _, ok := b.Core().TopicConfig("Rebound"); ok {
		t.Fatal("a request for another host's name created the topic")
	}
	for _, host := range []string{"evil.example", "evil.example:" + port, "dash.example.evil", "corp.example", "10.9.8.6"} {
		if status, _ := request(t, c, srv, "GET", "/topics", host, nil, nil); status != http.StatusForbidden {
			t.Errorf("GET /topics with Host %s: %d, want 403", host, status)
		}
	}
	hn, _ := os.Hostname()
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "app.localhost", "[::1]:" + port,
		"dash.example", "Dash.Example.", "a.corp.example:" + port, "10.9.8.7", hn} {
		if status, body := request(t, c, srv, "GET", "/topics", host, nil, nil); status != http.StatusOK {
			t.Errorf("GET /topics with Host %s: %d, want 200\n%s", host, status, body)
		}
	}
	// The same POST under the listener's own name is carried out.
	if status, body := request(t, c, srv, "POST", "/do", "", map[string]string{"Origin": srv.URL}, form); status != http.StatusOK {
		t.Fatalf("POST under the listener's address: %d\n%s", status, body)
	}
	if _, ok := b.Core().TopicConfig("Rebound"); !ok {
		t.Fatal("the confirmed action did not create the topic")
	}
	if _, err := dashboard.New(b, dashboard.Options{Hosts: []string{"dash.example:8080"}}); err == nil {
		t.Error("a configured host with a port accepted")
	}
}

// TestTokenBinding: a token authenticates the action and every value the
// confirmation showed: a token minted for topic csrf-a does not create
// csrf-other (nor with other queues, nor with the field given twice), a
// token of another action is refused, an expired one too, and a POST
// whose Origin or Referer names another site is refused.
func TestTokenBinding(t *testing.T) {
	b, _ := runBroker(t, "")
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	srv := serve(t, b, dashboard.Options{Now: clock, TokenTTL: time.Minute})
	br := browser{t: t, base: srv.URL, c: &http.Client{Timeout: 10 * time.Second}}
	form := confirmForm(t, br.get("/confirm?action=create-topic&topic=csrf-a&queues=2&perm=6&order=false", 200))

	with := func(k, v string) url.Values {
		f := url.Values{}
		for key, vs := range form {
			f[key] = append([]string(nil), vs...)
		}
		f.Set(k, v)
		return f
	}
	br.post(with("topic", "csrf-other"), "", http.StatusForbidden)
	br.post(with("queues", "64"), "", http.StatusForbidden)
	br.post(with("order", "true"), "", http.StatusForbidden)
	br.post(with("action", "reset-offset"), "", http.StatusForbidden)
	twice := with("topic", "csrf-a")
	twice.Add("topic", "csrf-other")
	br.post(twice, "", http.StatusForbidden)
	br.post(form, "http://evil.example", http.StatusForbidden)
	br.post(form, "null", http.StatusForbidden)
	if status, _ := request(t, br.c, srv, "POST", "/do", "", map[string]string{"Referer": "http://evil.example/x"}, form); status != http.StatusForbidden {
		t.Errorf("POST with another site's Referer: %d, want 403", status)
	}
	for _, topic := range []string{"csrf-a", "csrf-other"} {
		if _, ok := b.Core().TopicConfig(topic); ok {
			t.Fatalf("a refused POST created %s", topic)
		}
	}
	// Past its TTL the token is refused; a fresh confirmation works.
	mu.Lock()
	now = now.Add(time.Minute + time.Second)
	mu.Unlock()
	if p := br.post(form, "", http.StatusForbidden); !strings.Contains(p, "expired") {
		t.Fatalf("an expired token:\n%s", p)
	}
	form = confirmForm(t, br.get("/confirm?action=create-topic&topic=csrf-a&queues=2&perm=6&order=false", 200))
	if p := br.post(form, srv.URL, http.StatusOK); !strings.Contains(p, "Topic csrf-a has 2 queues") {
		t.Fatalf("the confirmed action:\n%s", p)
	}
	if _, ok := b.Core().TopicConfig("csrf-other"); ok {
		t.Fatal("csrf-other exists")
	}
}

const aclFile = `
users:
  - {username: admin, password: admin-secret, userType: Super}
  - {username: alice, password: alice-secret}
acls:
  - subject: User:alice
    policies:
      - entries:
          - {resource: "Topic:orders-*", actions: [Create, Update, Pub, Sub], decision: Allow}
`

func openGuard(t *testing.T) *acl.Guard {
	t.Helper()
	file := filepath.Join(t.TempDir(), "acl.yml")
	if err := os.WriteFile(file, []byte(aclFile), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := acl.Open(acl.Options{File: file, Dir: t.TempDir(), Logger: testlog.New(t, "acl")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// loginAs logs br in as user (its jar keeps the cookie) and returns the
// login's answer (a redirect when it worked).
func loginAs(t *testing.T, br browser, user, password string) (*http.Response, string) {
	t.Helper()
	page := br.get("/login", 200)
	m := hidden.FindStringSubmatch(page[strings.Index(page, `id="login"`):])
	if m == nil || m[1] != "token" {
		t.Fatalf("no token on the login page:\n%s", page)
	}
	c := *br.c
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.PostForm(br.base+"/login", url.Values{"token": {m[2]}, "user": {user}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestLoginWithACL: under ACL the dashboard is read-only without a login;
// a login as an ACL user allows what the user's policies allow the
// remoting request of each action (a super user everything, alice topics
// orders-*), refuses the rest with a message naming the user, and ends
// at logout. The cookie is HttpOnly and SameSite=Strict; a token is bound
// to its login; failed logins are limited per source.
func TestLoginWithACL(t *testing.T) {
	b, _ := runBroker(t, "")
	srv := serve(t, b, dashboard.Options{Users: openGuard(t)})
	newBrowser := func() browser {
		jar, _ := cookiejar.New(nil)
		return browser{t: t, base: srv.URL, c: &http.Client{Jar: jar, Timeout: 10 * time.Second}}
	}

	anon := newBrowser()
	if p := anon.get("/topics", 200); !strings.Contains(p, `id="login-link"`) || !strings.Contains(p, "read-only") {
		t.Fatalf("the topics page without a login:\n%s", p)
	}
	if p := anon.get("/confirm?action=create-topic&topic=orders-a", 403); !strings.Contains(p, "log in to act") {
		t.Fatalf("a confirmation without a login:\n%s", p)
	}
	anon.post(url.Values{"action": {"create-topic"}, "topic": {"orders-a"}}, "", http.StatusForbidden)

	if resp, body := loginAs(t, anon, "alice", "wrong"); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "wrong user name or password") {
		t.Fatalf("a wrong password: %d\n%s", resp.StatusCode, body)
	}
	if resp, _ := loginAs(t, anon, "mallory", "x"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("an unknown user: %d", resp.StatusCode)
	}

	alice := newBrowser()
	resp, body := loginAs(t, alice, "alice", "alice-secret")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("alice's login: %d\n%s", resp.StatusCode, body)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "apogee_dashboard_session" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Secure || cookie.MaxAge <= 0 {
		t.Fatalf("the session cookie: %+v", cookie)
	}
	if p := alice.get("/", 200); !strings.Contains(p, `<span id="user">alice</span>`) {
		t.Fatalf("the overview after alice's login:\n%s", p)
	}
	form := confirmForm(t, alice.get("/confirm?action=create-topic&topic=orders-a&queues=2", 200))
	// Alice's token is hers: without her cookie, or with another login's,
	// it is refused.
	anon.post(form, "", http.StatusForbidden)
	admin := newBrowser()
	if resp, _ := loginAs(t, admin, "admin", "admin-secret"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("admin's login: %d", resp.StatusCode)
	}
	if p := admin.post(form, "", http.StatusForbidden); !strings.Contains(p, "does not match") {
		t.Fatalf("alice's token in admin's session:\n%s", p)
	}
	if p := alice.post(form, srv.URL, http.StatusOK); !strings.Contains(p, "Topic orders-a has 2 queues") {
		t.Fatalf("alice creates orders-a:\n%s", p)
	}
	// Not hers: another topic, a reset of offsets, a resend (the
	// cluster's Update, as CONSUME_MESSAGE_DIRECTLY on the remoting port).
	for _, q := range []string{
		"action=create-topic&topic=payments",
		"action=reset-offset&group=g&topic=orders-a&time=now",
		"action=resend&group=g&client=c&msgid=m",
	} {
		if p := alice.get("/confirm?"+q, 403); !strings.Contains(p, "user alice may not do this") {
			t.Errorf("alice's %s:\n%s", q, p)
		}
	}
	alice.post(url.Values{"action": {"create-topic"}, "topic": {"payments"}, "token": {form.Get("token")}}, "", http.StatusForbidden)
	if _, ok := b.Core().TopicConfig("payments"); ok {
		t.Fatal("alice created payments")
	}
	// The super user may.
	if p := admin.post(confirmForm(t, admin.get("/confirm?action=create-topic&topic=payments", 200)), "", http.StatusOK); !strings.Contains(p, "Topic payments") {
		t.Fatalf("admin creates payments:\n%s", p)
	}

	// Logout ends the session: read-only again.
	page := alice.get("/", 200)
	m := hidden.FindStringSubmatch(page[strings.Index(page, `id="logout"`):])
	if m == nil {
		t.Fatalf("no logout form:\n%s", page)
	}
	c := *alice.c
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	lresp, err := c.PostForm(srv.URL+"/logout", url.Values{"token": {m[2]}})
	if err != nil {
		t.Fatal(err)
	}
	lresp.Body.Close()
	if lresp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", lresp.StatusCode)
	}
	alice.get("/confirm?action=create-topic&topic=orders-b", 403)
	// The old cookie, replayed, is no login either.
	replay := newBrowser()
	u, _ := url.Parse(srv.URL)
	replay.c.Jar.SetCookies(u, []*http.Cookie{cookie})
	replay.get("/confirm?action=create-topic&topic=orders-b", 403)

	// Failed logins: after 10 from one source, even the right password is
	// refused (429) until the window ends.
	guess := newBrowser()
	for i := range 10 {
		if resp, _ := loginAs(t, guess, "admin", "guess"); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("failed login %d: %d", i, resp.StatusCode)
		}
	}
	if resp, _ := loginAs(t, guess, "admin", "admin-secret"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a login after 10 failures: %d, want 429", resp.StatusCode)
	}
}

// TestSecureCookieOverTLS: served over TLS, the session cookie is Secure.
func TestSecureCookieOverTLS(t *testing.T) {
	b, _ := runBroker(t, "")
	d, err := dashboard.New(b, dashboard.Options{Users: openGuard(t), Logger: testlog.New(t, "dashboard")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	srv := httptest.NewTLSServer(d)
	defer srv.Close()
	c := srv.Client()
	c.Timeout = 10 * time.Second
	c.Transport.(*http.Transport).TLSClientConfig.MinVersion = tls.VersionTLS12
	br := browser{t: t, base: srv.URL, c: c}
	resp, body := loginAs(t, br, "admin", "admin-secret")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d\n%s", resp.StatusCode, body)
	}
	cs := resp.Cookies()
	if len(cs) != 1 || !cs[0].Secure || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookies over TLS: %+v", cs)
	}
}
