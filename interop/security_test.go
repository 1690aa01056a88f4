package interop

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/apogeemq/apogee/internal/wait"
)

// The users of the ACL tests: app may publish and subscribe to its
// topics; reader may only subscribe; root is a super user.
const aclFile = `
users:
  - {username: app, password: app-secret}
  - {username: reader, password: reader-secret}
  - {username: root, password: root-secret, userType: Super}
acls:
  - subject: User:app
    policies:
      - entries:
          - {resource: "Topic:ACL*", actions: [Pub, Sub], decision: Allow}
          - {resource: "Group:GACL*", actions: [Sub], decision: Allow}
  - subject: User:reader
    policies:
      - entries:
          - {resource: "Topic:ACL*", actions: [Sub], decision: Allow}
          - {resource: "Group:GREAD*", actions: [Sub], decision: Allow}
`

var (
	appCreds    = primitive.Credentials{AccessKey: "app", SecretKey: "app-secret"}
	readerCreds = primitive.Credentials{AccessKey: "reader", SecretKey: "reader-secret"}
	rootCreds   = primitive.Credentials{AccessKey: "root", SecretKey: "root-secret"}
)

func writeACL(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "acl.yml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// sendOnce sends one message without retries and returns the error.
func sendOnce(t *testing.T, b *Broker, topic string, opts ...producer.Option) error {
	t.Helper()
	p := newProducer(t, b, append([]producer.Option{producer.WithRetry(0), producer.WithSendMsgTimeout(5 * time.Second)}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte("acl")))
	return err
}

// wantNoPermission checks that err is NO_PERMISSION (16). The Go client
// reports a refused route lookup as "route info not found": then the
// broker's log must show the refusal (logRefusal, a substring of it).
func wantNoPermission(t *testing.T, b *Broker, what string, err error, logRefusal string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: accepted, want NO_PERMISSION (16)", what)
	case strings.Contains(err.Error(), "CODE: 16") || strings.Contains(strings.ToLower(err.Error()), "permission"):
	case strings.Contains(err.Error(), "route info not found") && logRefusal != "" && strings.Contains(b.Stderr(), logRefusal):
	default:
		t.Errorf("%s: %v, want NO_PERMISSION (16)", what, err)
	}
}

// withAdmin runs fn with an admin client signing with creds. The Go
// client keeps one admin client per process (client ID IP@DEFAULT) and
// its first credentials: each one is closed before the next is made. Its
// admin signs broker requests only once RegisterACL ran, which
// GetAllSubscriptionGroup does first (CreateTopic and DeleteTopic do not):
// withAdmin calls it before fn.
func withAdmin(t *testing.T, b *Broker, creds primitive.Credentials, fn func(context.Context, admin.Admin)) {
	t.Helper()
	adm, err := admin.NewAdmin(admin.WithResolver(b.NameServer()), admin.WithCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, _ = adm.GetAllSubscriptionGroup(ctx, b.Addr, 5*time.Second)
	fn(ctx, adm)
}

// routeExists asks the name server for a topic's route as root would.
func routeExists(t *testing.T, b *Broker, topic string) (ok bool) {
	t.Helper()
	withAdmin(t, b, rootCreds, func(ctx context.Context, adm admin.Admin) {
		mqs, err := adm.FetchPublishMessageQueues(ctx, topic)
		ok = err == nil && len(mqs) > 0
	})
	return ok
}

// TestACL runs the official Go client with credentials against a broker
// with access control: what a user is granted works end to end, each
// operation it is not granted is refused with NO_PERMISSION, requests
// without a signature or with another secret are refused, and a change of
// the ACL file takes effect without a restart.
func TestACL(t *testing.T) {
	file := writeACL(t, aclFile)
	b := startBroker(t, "--acl-file", file)
	topic := uniq("ACLT")

	// Allowed: send, push-consume, pull.
	p := newProducer(t, b, producer.WithCredentials(appCreds))
	want := bodies("acl", 20)
	sendAll(t, p, topic, "", want)
	rec := newRecorder()
	startPush(t, b, uniq("GACL"), topic, consumer.MessageSelector{}, rec, consumer.WithCredentials(appCreds))
	wait.Until(t, "messages through ACL", func() bool { return rec.distinct() == len(want) })

	// Refused: no credentials, another secret, a topic not granted, and a
	// user with Sub only.
	wantNoPermission(t, b, "unsigned send", sendOnce(t, b, topic), "the request carries no AccessKey")
	wantNoPermission(t, b, "wrong secret", sendOnce(t, b, topic, producer.WithCredentials(primitive.Credentials{AccessKey: "app", SecretKey: "guess"})), "check signature failed")
	wantNoPermission(t, b, "send to a topic not granted", sendOnce(t, b, uniq("OTHER"), producer.WithCredentials(appCreds)), "")
	wantNoPermission(t, b, "send with Sub only", sendOnce(t, b, topic, producer.WithCredentials(readerCreds)), "")

	// Pull: allowed for a granted group, refused for another.
	pull := func(creds primitive.Credentials, group string) error {
		pc, err := consumer.NewPullConsumer(consumerOpts(b, group, consumer.WithCredentials(creds))...)
		if err != nil {
			t.Fatal(err)
		}
		if err := pc.Assign(topic, nil); err != nil {
			t.Fatal(err)
		}
		if err := pc.Start(); err != nil {
			return err
		}
		defer pc.Shutdown()
		mqs, err := pc.GetTopicRouteInfo(topic)
		if err != nil || len(mqs) == 0 {
			return fmt.Errorf("route: %v (%d queues)", err, len(mqs))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := pc.PullFrom(ctx, mqs[0], 0, 1)
		if err != nil {
			return err
		}
		if res.Status != primitive.PullFound {
			return fmt.Errorf("status %v", res.Status)
		}
		return nil
	}
	if err := pull(readerCreds, uniq("GREAD")); err != nil {
		t.Errorf("pull by a reader of its group: %v", err)
	}
	wantNoPermission(t, b, "pull for a group not granted", pull(readerCreds, uniq("GNOPE")), "")

	// Topic administration: the admin API needs Create/Delete on the topic
	// (root, a super user, has them). The Go client's CreateTopic ignores
	// the answer: the route tells whether the topic exists.
	created := uniq("ACLADM")
	// The broker logs at most 10 refusals a second: the refusals below
	// start a second of their own, so their lines are there to check. (The
	// limiter's window is a second of the clock: letting one pass is the
	// only way into a fresh one, so this sleep is not a wait for a state.)
	time.Sleep(1100 * time.Millisecond)
	withAdmin(t, b, readerCreds, func(ctx context.Context, adm admin.Admin) {
		_ = adm.CreateTopic(ctx, admin.WithTopicCreate(created), admin.WithBrokerAddrCreate(b.Addr))
	})
	if routeExists(t, b, created) {
		t.Error("a user without Create created a topic")
	}
	if !strings.Contains(b.Stderr(), "Topic:"+created+" (Create)") {
		t.Error("the refused CreateTopic is not in the broker's log")
	}
	withAdmin(t, b, rootCreds, func(ctx context.Context, adm admin.Admin) {
		if err := adm.CreateTopic(ctx, admin.WithTopicCreate(created), admin.WithBrokerAddrCreate(b.Addr)); err != nil {
			t.Fatalf("root's CreateTopic: %v", err)
		}
	})
	if !routeExists(t, b, created) {
		t.Fatal("root's CreateTopic created no topic")
	}
	// DeleteTopic, like CreateTopic, ignores the broker's answer. A fresh
	// second of the log limiter again, as above.
	time.Sleep(1100 * time.Millisecond)
	withAdmin(t, b, appCreds, func(ctx context.Context, adm admin.Admin) {
		_ = adm.DeleteTopic(ctx, admin.WithTopicDelete(created), admin.WithBrokerAddrDelete(b.Addr), admin.WithNameSrvAddr([]string{b.NsAddr}))
	})
	if !routeExists(t, b, created) {
		t.Error("a user without Delete deleted a topic")
	}
	if !strings.Contains(b.Stderr(), "Topic:"+created+" (Delete)") {
		t.Error("the refused DeleteTopic is not in the broker's log")
	}

	// Hot reload: grant reader Pub; its send goes through without a restart.
	if err := os.WriteFile(file+".new", []byte(strings.Replace(aclFile, `actions: [Sub], decision: Allow}
          - {resource: "Group:GREAD*"`, `actions: [Pub, Sub], decision: Allow}
          - {resource: "Group:GREAD*"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the reloaded grant", func() bool { return sendOnce(t, b, topic, producer.WithCredentials(readerCreds)) == nil })
	if !strings.Contains(b.Stderr(), "reloaded the ACL file") {
		t.Error("no reload line in the broker's log")
	}
	if strings.Contains(b.Stderr(), "app-secret") || strings.Contains(b.Stderr(), "reader-secret") {
		t.Error("the broker logged a secret")
	}
}

// testPKI writes a CA, a server certificate for 127.0.0.1 signed by it
// (server.pem, server-key.pem) and returns the directory; reissue writes a
// new server certificate signed by the same CA.
func testPKI(t *testing.T) (dir string, reissue func()) {
	t.Helper()
	dir = t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "interop CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	var serial atomic.Int64
	serial.Store(1)
	write := func(name, typ string, der []byte) {
		tmp := filepath.Join(dir, name+".tmp")
		if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.pem", "CERTIFICATE", caDER)
	reissue = func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		leaf := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: "interop broker"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalPKCS8PrivateKey(key)
		write("server-key.pem", "PRIVATE KEY", kder)
		write("server.pem", "CERTIFICATE", der)
	}
	reissue()
	return dir, reissue
}

// TestTLS runs the official Go client over TLS (WithTls(true)) against a
// broker in enforcing and in permissive mode: TLS clients produce and
// consume in both; a plain client is refused in enforcing mode and served
// in permissive mode; the certificate is rotated while a producer keeps
// sending, and a client connecting after the rotation works too.
func TestTLS(t *testing.T) {
	if raceEnabled {
		// Seen in CI: the client's pushConsumer.Shutdown writes a process
		// queue its pullMessage goroutine reads (consumer.go:308 against
		// process_queue.go:128), a race inside the official client.
		t.Skip("the official client's consumer shutdown races with its pulls; run without -race")
	}
	t.Cleanup(func() {
		// Whatever failed, leave the Go client's process-wide default plain.
		if p, err := rocketmq.NewProducer(producer.WithTls(false), producer.WithNsResolver(primitive.NewPassthroughResolver([]string{"127.0.0.1:1"}))); err == nil {
			_ = p
		}
	})
	for _, mode := range []string{"enforcing", "permissive"} {
		t.Run(mode, func(t *testing.T) {
			dir, reissue := testPKI(t)
			b := startBroker(t, "--tls-mode", mode, "--tls-cert", filepath.Join(dir, "server.pem"), "--tls-key", filepath.Join(dir, "server-key.pem"))
			topic := uniq("TTLS")
			p := newProducer(t, b, producer.WithTls(true))
			want := bodies("tls", 10)
			sendAll(t, p, topic, "", want)
			rec := newRecorder()
			startPush(t, b, uniq("GTLS"), topic, consumer.MessageSelector{}, rec, consumer.WithTls(true))
			wait.Until(t, "messages over TLS", func() bool { return rec.distinct() == len(want) })

			// Rotation while the producer keeps its connections.
			reissue()
			b.p.AwaitLog("reloaded the certificate files") // the broker checks the files every 5 s
			after := bodies("rotated", 5)
			sendAll(t, p, topic, "", after)
			if err := sendOnce(t, b, topic, producer.WithTls(true)); err != nil {
				t.Errorf("a TLS client after the rotation: %v", err)
			}
			wait.Until(t, "messages after the rotation", func() bool { return rec.distinct() >= len(want)+len(after) })
			if !strings.Contains(b.Stderr(), "reloaded the certificate files") {
				t.Error("no reload line in the broker's log")
			}

			// A plain client. The Go client's WithTls sets a process-wide
			// default (remote.DefaultRemotingClientConfig), which
			// WithTls(false) sets back for the tests after this one: it
			// goes last, once the TLS clients are done.
			err := sendOnce(t, b, topic, producer.WithTls(false))
			if mode == "enforcing" && err == nil {
				t.Error("a plain client was served in enforcing mode")
			}
			if mode == "permissive" && err != nil {
				t.Errorf("a plain client in permissive mode: %v", err)
			}
		})
	}
}
