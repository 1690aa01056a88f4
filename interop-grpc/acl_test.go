package interopgrpc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

// aclFile grants app Pub and Sub on the topics granted* and Sub on the
// group app-group.
const aclFile = `users:
  - {username: app, password: app-secret}
acls:
  - subject: User:app
    policies:
      - entries:
          - {resource: "Topic:granted*", actions: [Pub, Sub], decision: Allow}
          - {resource: "Group:app-group", actions: [Sub], decision: Allow}
`

// The RocketMQ 5 status codes of a refusal.
const (
	codeUnauthorized = 40100
	codeForbidden    = 40300
)

// TestACL: the official 5.x client with credentials against a broker with
// --acl-file: a granted topic is sent to and received from; a topic not
// granted is refused FORBIDDEN; a wrong secret is refused UNAUTHORIZED;
// nothing is logged with a secret.
func TestACL(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "acl.yml")
	if err := os.WriteFile(file, []byte(aclFile), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, "aclEnable=true", "aclFile="+file)
	as := func(group, ak, sk string) *rmq.Config {
		c := b.config(group)
		c.Credentials = &credentials.SessionCredentials{AccessKey: ak, AccessSecret: sk}
		return c
	}

	p, err := rmq.NewProducer(as("", "app", "app-secret"), rmq.WithTopics("granted-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("producer start: %v", err)
	}
	t.Cleanup(func() { p.GracefulStop() })
	const n = 5
	for i := 0; i < n; i++ {
		if _, err := p.Send(context.Background(), &rmq.Message{Topic: "granted-1", Body: []byte("granted")}); err != nil {
			t.Fatalf("granted send %d: %v", i, err)
		}
	}
	c, err := rmq.NewSimpleConsumer(as("app-group", "app", "app-secret"), rmq.WithAwaitDuration(2*time.Second),
		rmq.WithSubscriptionExpressions(all("granted-1")))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("consumer start: %v", err)
	}
	t.Cleanup(func() { c.GracefulStop() })
	if got := receive(t, c, n, 30*time.Second, 30*time.Second, true); len(got) != n {
		t.Fatalf("granted receive: %d of %d messages", len(got), n)
	}

	// A topic not granted: the route (and so the send) is refused.
	_, err = p.Send(context.Background(), &rmq.Message{Topic: "billing", Body: []byte("x")})
	if codeOf(err) != codeForbidden || !strings.Contains(err.Error(), "Topic:billing") {
		t.Errorf("send to a topic not granted: %v, want %d naming Topic:billing", err, codeForbidden)
	}

	// A wrong secret: the producer cannot even start.
	bad, err := rmq.NewProducer(as("", "app", "guess"), rmq.WithTopics("granted-1"))
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Start()
	if err == nil {
		bad.GracefulStop()
		t.Fatal("a producer with a wrong secret started")
	}
	// The client wraps its start's error without the status type.
	if !strings.Contains(err.Error(), "UNAUTHORIZED") || !strings.Contains(err.Error(), "signature") {
		t.Errorf("wrong secret: %v, want UNAUTHORIZED (%d) naming the signature", err, codeUnauthorized)
	}
}
