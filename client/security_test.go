package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

const clientACL = `
users:
  - {username: app, password: app-secret}
  - {username: other, password: other-secret}
acls:
  - subject: User:app
    policies:
      - entries:
          - {resource: "Topic:SEC", actions: [Pub, Sub], decision: Allow}
          - {resource: "Group:sec-consumer", actions: [Sub], decision: Allow}
  - subject: User:other
    policies:
      - entries:
          - {resource: "Topic:ELSE", actions: [Pub], decision: Allow}
`

// startSecureBroker runs a broker whose requests pass an acl.Guard built
// from aclText.
func startSecureBroker(t *testing.T, aclText string) string {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(file, []byte(aclText), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := acl.Open(acl.Options{File: file, Dir: dir, Logger: testlog.New(t, "acl")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return startBroker(t, func(o *broker.Options) { o.Security = g })
}

// TestCredentials: a producer and a push consumer with credentials do
// everything their grants allow (routes, the auto-created topic,
// heartbeats, pulls, offsets) over an access-controlled broker, and every
// request without them, or with another secret or grant, is refused with
// NO_PERMISSION.
func TestCredentials(t *testing.T) {
	addr := startSecureBroker(t, clientACL)
	ctx := ctxT(t)
	creds := client.Credentials(auth.Credentials{AccessKey: "app", SecretKey: "app-secret"})
	p := realProducer(t, addr, creds)
	for i := 0; i < 5; i++ {
		if _, err := p.SendSync(ctx, &client.Message{Topic: "SEC", Body: []byte("m")}); err != nil {
			t.Fatalf("signed send: %v", err)
		}
	}
	var got atomic.Int64
	c := realPush(t, addr, creds, client.ConsumerGroup("sec-consumer"), client.Subscribe("SEC", "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset),
		client.WithConcurrentListener(func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			got.Add(int64(len(msgs)))
			return client.ConsumeSuccess
		}))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "5 messages through ACL", func() bool { return got.Load() >= 5 })

	denied := func(name string, err error) {
		t.Helper()
		var be *client.BrokerError
		if !errors.As(err, &be) || be.Code != protocol.RespNoPermission {
			t.Errorf("%s: %v, want NO_PERMISSION", name, err)
		}
	}
	sendCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	unsigned := realProducer(t, addr, client.SendRetries(0))
	_, err := unsigned.SendSync(sendCtx, &client.Message{Topic: "SEC", Body: []byte("x")})
	denied("unsigned", err)
	wrong := realProducer(t, addr, client.SendRetries(0), client.Credentials(auth.Credentials{AccessKey: "app", SecretKey: "guess"}))
	_, err = wrong.SendSync(sendCtx, &client.Message{Topic: "SEC", Body: []byte("x")})
	denied("wrong secret", err)
	other := realProducer(t, addr, client.SendRetries(0), client.Credentials(auth.Credentials{AccessKey: "other", SecretKey: "other-secret"}))
	_, err = other.SendSync(sendCtx, &client.Message{Topic: "SEC", Body: []byte("x")})
	denied("no grant", err)
	if _, err := other.SendSync(sendCtx, &client.Message{Topic: "ELSE", Body: []byte("x")}); err != nil {
		t.Errorf("other's own topic: %v", err)
	}
}
