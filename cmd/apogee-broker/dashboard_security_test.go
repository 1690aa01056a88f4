package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// dashClient is a browser of the dashboard at base: a cookie jar, no
// redirects followed (a login's answer is read as it is).
type dashClient struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newDashClient(t *testing.T, addr string) dashClient {
	jar, _ := cookiejar.New(nil)
	return dashClient{t: t, base: "http://" + addr, c: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// do sends a request with Host host ("" the address's) and the headers
// hdr, and returns the status and body.
func (d dashClient) do(method, path, host string, hdr map[string]string, form url.Values) (int, string) {
	d.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, d.base+path, body)
	if err != nil {
		d.t.Fatal(err)
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
	resp, err := d.c.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var (
	dashHidden  = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	dashConfirm = regexp.MustCompile(`(?s)<form method="post" action="/do" id="confirm">.*?</form>`)
	dashLogin   = regexp.MustCompile(`(?s)<form method="post" action="/login" id="login".*?</form>`)
)

// confirm opens the confirmation page of query and returns its form.
func (d dashClient) confirm(query string) url.Values {
	d.t.Helper()
	status, page := d.do("GET", "/confirm?"+query, "", nil, nil)
	if status != http.StatusOK {
		d.t.Fatalf("confirmation of %s: %d\n%s", query, status, page)
	}
	v := url.Values{}
	for _, m := range dashHidden.FindAllStringSubmatch(dashConfirm.FindString(page), -1) {
		v.Set(m[1], strings.ReplaceAll(m[2], "&#43;", "+"))
	}
	if v.Get("token") == "" {
		d.t.Fatalf("no token on the confirmation of %s:\n%s", query, page)
	}
	return v
}

// topicExists asks the dashboard's topic page.
func (d dashClient) topicExists(topic string) bool {
	d.t.Helper()
	status, _ := d.do("GET", "/topic?t="+url.QueryEscape(topic), "", nil, nil)
	return status == http.StatusOK
}

// login logs in as user and returns the answer's status.
func (d dashClient) login(user, password string) int {
	d.t.Helper()
	status, page := d.do("GET", "/login", "", nil, nil)
	m := dashHidden.FindStringSubmatch(dashLogin.FindString(page))
	if status != http.StatusOK || m == nil {
		d.t.Fatalf("login page: %d\n%s", status, page)
	}
	status, _ = d.do("POST", "/login", "", nil, url.Values{"token": {m[2]}, "user": {user}, "password": {password}})
	return status
}

// TestDashboardAttacks: issue 29's case 10 against the broker binary
// without ACL. A POST with Host and Origin both evil.example (what a
// DNS-rebinding page sends), carrying a valid confirmation, is refused with
// a 403 naming --dashboard-hosts, and a confirmation minted for topic
// csrf-a does not create csrf-other; the same confirmation, unchanged and
// from this site, is carried out.
func TestDashboardAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	p := start(t, buildBinary(t), "--namesrv-listen", "", "--data-dir", t.TempDir(), "--metrics-listen", "127.0.0.1:0")
	defer p.stop(t, syscall.SIGTERM)
	addr := p.metricsAddr(t)
	d := newDashClient(t, addr)
	_, port, _ := strings.Cut(addr, ":")

	form := d.confirm("action=create-topic&topic=csrf-a&queues=2&perm=6&order=false")
	evil := "evil.example:" + port
	status, body := d.do("POST", "/do", evil, map[string]string{"Origin": "http://" + evil}, form)
	if status != http.StatusForbidden || !strings.Contains(body, "--dashboard-hosts") {
		t.Fatalf("POST with Host and Origin %s: %d\n%s", evil, status, body)
	}
	if status, _ := d.do("GET", "/topics", evil, nil, nil); status != http.StatusForbidden {
		t.Errorf("GET /topics with Host %s: %d, want 403", evil, status)
	}
	other := url.Values{}
	for k, v := range form {
		other[k] = v
	}
	other.Set("topic", "csrf-other")
	if status, body := d.do("POST", "/do", "", nil, other); status != http.StatusForbidden {
		t.Fatalf("csrf-a's token with topic csrf-other: %d\n%s", status, body)
	}
	if d.topicExists("csrf-a") || d.topicExists("csrf-other") {
		t.Fatal("a refused POST created a topic")
	}
	if status, body := d.do("POST", "/do", "", map[string]string{"Origin": "http://" + addr}, form); status != http.StatusOK {
		t.Fatalf("the confirmed action: %d\n%s", status, body)
	}
	if !d.topicExists("csrf-a") || d.topicExists("csrf-other") {
		t.Fatal("after the confirmed action: want csrf-a only")
	}
	if log := p.RunLog(); !strings.Contains(log, "dashboard: refused a request for a name") || !strings.Contains(log, "host=evil.example") {
		t.Errorf("the refused name is not logged:\n%s", log)
	}
}

// The users of TestDashboardLoginWithACL: admin is a super user, app may
// only publish and subscribe to Dash* topics.
const dashACLFile = `
users:
  - {username: admin, password: admin-secret, userType: Super}
  - {username: app, password: app-secret}
acls:
  - subject: User:app
    policies:
      - entries:
          - {resource: "Topic:Dash*", actions: [Pub, Sub], decision: Allow}
`

// TestDashboardLoginWithACL: under --acl-file the dashboard is read-only
// without a login; logged in as a super user it creates a topic; logged in
// as a user whose policies do not allow UPDATE_AND_CREATE_TOPIC it is
// refused with a message naming the user. A name given with
// --dashboard-hosts is answered.
func TestDashboardLoginWithACL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(file, []byte(dashACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, buildBinary(t), "--namesrv-listen", "", "--data-dir", filepath.Join(dir, "data"), "--acl-file", file,
		"--metrics-listen", "127.0.0.1:0", "--dashboard-hosts", "dash.example,*.ops.example")
	defer p.stop(t, syscall.SIGTERM)
	addr := p.metricsAddr(t)

	anon := newDashClient(t, addr)
	if status, page := anon.do("GET", "/confirm?action=create-topic&topic=DashMade", "", nil, nil); status != http.StatusForbidden || !strings.Contains(page, "log in") {
		t.Fatalf("a confirmation without a login: %d\n%s", status, page)
	}
	for _, host := range []string{"dash.example", "a.ops.example"} {
		if status, _ := anon.do("GET", "/topics", host, nil, nil); status != http.StatusOK {
			t.Errorf("GET /topics with Host %s (--dashboard-hosts): %d, want 200", host, status)
		}
	}

	admin := newDashClient(t, addr)
	if status := admin.login("admin", "wrong"); status != http.StatusForbidden {
		t.Fatalf("a wrong password: %d, want 403", status)
	}
	if status := admin.login("admin", "admin-secret"); status != http.StatusSeeOther {
		t.Fatalf("admin's login: %d", status)
	}
	if status, body := admin.do("POST", "/do", "", map[string]string{"Origin": "http://" + addr}, admin.confirm("action=create-topic&topic=DashMade&queues=3")); status != http.StatusOK || !strings.Contains(body, "Topic DashMade has 3 queues") {
		t.Fatalf("admin creates DashMade: %d\n%s", status, body)
	}
	if !admin.topicExists("DashMade") {
		t.Fatal("DashMade does not exist")
	}

	app := newDashClient(t, addr)
	if status := app.login("app", "app-secret"); status != http.StatusSeeOther {
		t.Fatalf("app's login: %d", status)
	}
	if status, page := app.do("GET", "/confirm?action=create-topic&topic=DashOther", "", nil, nil); status != http.StatusForbidden || !strings.Contains(page, "user app may not do this") {
		t.Fatalf("app's confirmation: %d\n%s", status, page)
	}
	// A confirmation of admin's, replayed in app's session, is refused too.
	form := admin.confirm("action=create-topic&topic=DashOther")
	if status, _ := app.do("POST", "/do", "", nil, form); status != http.StatusForbidden {
		t.Fatalf("app posts admin's confirmation: %d", status)
	}
	if app.topicExists("DashOther") {
		t.Fatal("app created DashOther")
	}
	if log := p.RunLog(); !strings.Contains(log, "dashboard: login refused") || strings.Contains(log, "admin-secret") {
		t.Errorf("the log lacks the refused login, or holds a secret:\n%s", log)
	}
}
