package dashboard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The users of TestLoginInChromium: admin is a super user; app may only
// publish and subscribe to App* topics.
const aclFile = `
users:
  - {username: admin, password: admin-secret, userType: Super}
  - {username: app, password: app-secret}
acls:
  - subject: User:app
    policies:
      - entries:
          - {resource: "Topic:App*", actions: [Pub, Sub], decision: Allow}
`

// TestLoginInChromium: a broker with --acl-file, in headless Chromium. The
// pages are read-only until a login (an action asks for one); logged in
// as admin, a topic is created through its confirmation; logged out and
// in again as app, whose policies do not allow creating topics, the same
// action is refused with a message naming the user.
func TestLoginInChromium(t *testing.T) {
	ctx := browser(t)
	file := filepath.Join(t.TempDir(), "acl.yml")
	if err := os.WriteFile(file, []byte(aclFile), 0o600); err != nil {
		t.Fatal(err)
	}
	_, web := startBroker(t, "--acl-file", file)
	base := "http://" + web

	// Without a login: read-only.
	run(t, ctx, "topics", chromedp.Navigate(base+"/topics"), chromedp.WaitVisible("#login-link", chromedp.ByQuery))
	run(t, ctx, "create without a login",
		chromedp.SetValue(`#create-topic input[name="topic"]`, "Made", chromedp.ByQuery),
		chromedp.Click(`#create-topic button`, chromedp.ByQuery),
		chromedp.WaitVisible("#error", chromedp.ByQuery))
	if got := text(t, ctx, "#error"); !strings.Contains(got, "log in to act") {
		t.Fatalf("an action without a login: %q", got)
	}

	login := func(user, password string) {
		t.Helper()
		run(t, ctx, "log in as "+user, chromedp.Click("#login-link", chromedp.ByQuery),
			chromedp.WaitVisible("#login", chromedp.ByQuery),
			chromedp.SetValue(`#login input[name="user"]`, user, chromedp.ByQuery),
			chromedp.SetValue(`#login input[name="password"]`, password, chromedp.ByQuery),
			chromedp.Click("#login-button", chromedp.ByQuery),
			chromedp.WaitVisible("#user", chromedp.ByQuery))
		if got := text(t, ctx, "#user"); got != user {
			t.Fatalf("logged in as %q, want %s", got, user)
		}
	}
	create := func(topic, want string) string {
		t.Helper()
		run(t, ctx, "create "+topic, chromedp.Navigate(base+"/topics"),
			chromedp.WaitVisible("#create-topic", chromedp.ByQuery),
			chromedp.SetValue(`#create-topic input[name="topic"]`, topic, chromedp.ByQuery),
			chromedp.SetValue(`#create-topic input[name="queues"]`, "2", chromedp.ByQuery),
			chromedp.Click(`#create-topic button`, chromedp.ByQuery),
			chromedp.WaitVisible(want, chromedp.ByQuery))
		return text(t, ctx, want)
	}

	login("admin", "admin-secret")
	create("Made", "#confirm-button")
	run(t, ctx, "confirm", chromedp.Click("#confirm-button", chromedp.ByQuery), chromedp.WaitVisible("#done", chromedp.ByQuery))
	if got := text(t, ctx, "#done"); !strings.Contains(got, "Topic Made has 2 queues") {
		t.Fatalf("admin's action: %q", got)
	}
	run(t, ctx, "topics after", chromedp.Navigate(base+"/topics"), chromedp.WaitVisible(`#topics tr[data-key="Made"]`, chromedp.ByQuery))

	run(t, ctx, "log out", chromedp.Click("#logout-button", chromedp.ByQuery), chromedp.WaitVisible("#login-link", chromedp.ByQuery))
	login("app", "app-secret")
	if got := create("Other", "#error"); !strings.Contains(got, "user app may not do this") {
		t.Fatalf("app's action: %q", got)
	}
}
