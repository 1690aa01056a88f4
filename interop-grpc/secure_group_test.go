package interopgrpc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	rmtg "github.com/apogeemq/apogee/remoting"
)

// The combined test's ACL: the brokers' and controllers' own user (a super
// user: innerClientAuthenticationCredentials) and an application user
// allowed one topic and its consumer groups.
const secureACL = `users:
  - {username: inner, password: inner-secret, userType: Super}
  - {username: app, password: app-secret}
acls:
  - subject: User:app
    policies:
      - entries:
          - {resource: "Topic:SecTopic", actions: [Pub, Sub], decision: Allow}
          - {resource: "Group:SecGroup*", actions: [Sub], decision: Allow}
`

// innerCredsLine is the brokers' and controllers' own credentials as
// RocketMQ 5.3's properties give them.
const innerCredsLine = `innerClientAuthenticationCredentials={"accessKey":"inner","secretKey":"inner-secret"}`

const (
	secTopic   = "SecTopic"
	secCluster = "SecCluster"
	secGroup   = "sg1"
)

// secure is the combined test's deployment: its files and processes.
type secure struct {
	t                 *testing.T
	certFile, keyFile string
	aclFile           string
	ctlProps          string // the controllers' properties: their inner credentials
	roots             *x509.CertPool
	ctls              []*proctest.Controller
	ns                *proctest.Proc
	brokers           []*proctest.Proc
	inner             auth.Credentials
}

// TestSecureControllerGroup (issue 29): a controller-mode group of two
// brokers, three controllers and a name server, with access control and
// TLS enforcing on every listener (remoting, gRPC, HA, the embedded and the
// standalone name server, the controllers' remoting and Raft, the operator
// port): the group elects a master and replicates (the brokers sign their
// requests to each other, the controllers and the name server with
// innerClientAuthenticationCredentials); the official 4.x client (TLS,
// credentials) and the official 5.x client (TLS, credentials) send and
// consume; a stranger without credentials is refused on every port.
//
// Not parallel: the 4.x client's TLS switch is process-wide.
func TestSecureControllerGroup(t *testing.T) {
	s := startSecure(t)
	master, slave := s.waitReplicated()

	// The official 5.x client, over TLS with credentials, through the
	// master's gRPC port.
	cfg := func(group string) *rmq.Config {
		return &rmq.Config{Endpoint: master.Ready.GRPC, ConsumerGroup: group,
			Credentials: &credentials.SessionCredentials{AccessKey: "app", AccessSecret: "app-secret"}}
	}
	p5, err := rmq.NewProducer(cfg(""), rmq.WithTopics(secTopic))
	if err != nil {
		t.Fatal(err)
	}
	if err := p5.Start(); err != nil {
		t.Fatalf("5.x producer start over TLS with credentials: %v", err)
	}
	t.Cleanup(func() { p5.GracefulStop() })
	const n = 5
	for i := range n {
		if _, err := p5.Send(context.Background(), &rmq.Message{Topic: secTopic, Body: []byte(fmt.Sprintf("from-5x-%d", i))}); err != nil {
			t.Fatalf("5.x send %d: %v", i, err)
		}
	}

	// The official 4.x client, over TLS with credentials, through the
	// standalone name server.
	creds := primitive.Credentials{AccessKey: "app", SecretKey: "app-secret"}
	ns := primitive.NewPassthroughResolver([]string{s.ns.Ready.Listen})
	p4, err := rocketmq.NewProducer(producer.WithNsResolver(ns), producer.WithGroupName("SecProducer"), producer.WithRetry(2),
		producer.WithCredentials(creds), producer.WithTls(true))
	if err != nil {
		t.Fatal(err)
	}
	// The 4.x client's TLS switch is process-wide: set it back for the
	// tests after this one.
	t.Cleanup(func() { _, _ = rocketmq.NewProducer(producer.WithTls(false), producer.WithNsResolver(ns)) })
	if err := p4.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p4.Shutdown() })
	wait.For(t, "4.x sends over TLS with credentials", func() error {
		r, err := p4.SendSync(context.Background(), primitive.NewMessage(secTopic, []byte("from-4x-probe")))
		if err != nil {
			return err
		}
		if r.Status != primitive.SendOK {
			return fmt.Errorf("status %v", r.Status)
		}
		return nil
	})
	for i := range n {
		r, err := p4.SendSync(context.Background(), primitive.NewMessage(secTopic, []byte(fmt.Sprintf("from-4x-%d", i))))
		if err != nil || r.Status != primitive.SendOK {
			t.Fatalf("4.x send %d: %v %v", i, r, err)
		}
	}

	// Every body reaches a 4.x push consumer and a 5.x simple consumer.
	var mu sync.Mutex
	got4 := map[string]bool{}
	pc, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(ns), consumer.WithGroupName("SecGroup4"),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset), consumer.WithCredentials(creds), consumer.WithTls(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Subscribe(secTopic, consumer.MessageSelector{}, func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range ms {
			got4[string(m.Body)] = true
		}
		return consumer.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Shutdown() })
	want := []string{}
	for i := range n {
		want = append(want, fmt.Sprintf("from-5x-%d", i), fmt.Sprintf("from-4x-%d", i))
	}
	wait.For(t, "the 4.x push consumer has every body", func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range want {
			if !got4[w] {
				return fmt.Errorf("missing %s (have %d)", w, len(got4))
			}
		}
		return nil
	})
	sc, err := rmq.NewSimpleConsumer(cfg("SecGroup5"), rmq.WithSimpleAwaitDuration(2*time.Second),
		rmq.WithSimpleSubscriptionExpressions(all(secTopic)))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(); err != nil {
		t.Fatalf("5.x consumer start: %v", err)
	}
	t.Cleanup(func() { sc.GracefulStop() })
	got5 := map[string]bool{}
	wait.For(t, "the 5.x simple consumer has every body", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		mvs, err := sc.Receive(ctx, 16, 30*time.Second)
		for _, mv := range mvs {
			got5[string(mv.GetBody())] = true
			if err := sc.Ack(context.Background(), mv); err != nil {
				return fmt.Errorf("ack: %w", err)
			}
		}
		for _, w := range want {
			if !got5[w] {
				return fmt.Errorf("missing %s (have %d; last receive: %v)", w, len(got5), err)
			}
		}
		return nil
	})

	// The slave has the messages too: its log follows the master's.
	wait.For(t, "the slave's log at the master's", func() error {
		mo, err := s.commitLogMax(master.Ready.Listen)
		if err != nil {
			return err
		}
		so, err := s.commitLogMax(slave.Ready.Listen)
		if err != nil {
			return err
		}
		if so < mo || mo == 0 {
			return fmt.Errorf("master's log ends at %d, the slave's at %d", mo, so)
		}
		return nil
	})

	s.strangersRefused(master, slave)
}

// startSecure writes the certificate and the ACL file and starts the
// controllers, the name server and two brokers, all with ACL and TLS
// enforcing.
func startSecure(t *testing.T) *secure {
	t.Helper()
	dir := t.TempDir()
	s := &secure{t: t, inner: auth.Credentials{AccessKey: "inner", SecretKey: "inner-secret"}}
	s.certFile, s.keyFile, s.roots = writeCA(t, dir)
	s.aclFile = filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(s.aclFile, []byte(secureACL), 0o600); err != nil {
		t.Fatal(err)
	}

	s.ctlProps = filepath.Join(dir, "controller.properties")
	if err := os.WriteFile(s.ctlProps, []byte(innerCredsLine+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctlBin := binFor(t, "apogee-controller", "APOGEE_CONTROLLER_BIN")
	nsBin := binFor(t, "apogee-namesrv", "APOGEE_NAMESRV_BIN")
	s.ctls = proctest.StartControllers(t, ctlBin, 3, append([]string{
		"--raft-heartbeat-timeout", "300ms", "--raft-election-timeout", "300ms", "--raft-leader-lease-timeout", "150ms",
		"--heartbeat-timeout", "3s", "--scan-interval", "200ms"}, s.controllerSecurity()...)...)
	for _, c := range s.ctls {
		t.Cleanup(func() { _ = c.P.Stop(syscall.SIGTERM) })
	}
	wait.For(t, "three controllers in every controller's configuration", func() error {
		for _, c := range s.ctls {
			r, err := s.call(c.Addr, 1005, nil, nil, true) // GET_METADATA_INFO
			if err != nil {
				return err
			}
			if peers, _ := r.Ext.GetString("peers"); len(strings.Split(peers, ",")) != 3 {
				return fmt.Errorf("%s has peers %q (code %d %s)", c.ID, peers, r.Code, r.Remark)
			}
		}
		return nil
	})

	s.ns = proctest.New(t, "apogee-namesrv", nsBin)
	t.Cleanup(func() { _ = s.ns.Stop(syscall.SIGTERM) })
	s.ns.Run("--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "namesrv"), "--acl-file", s.aclFile,
		"--tls-mode", "enforcing", "--tls-cert", s.certFile, "--tls-key", s.keyFile)

	conf := strings.Join([]string{"brokerClusterName=" + secCluster, "brokerName=" + secGroup, "enableControllerMode=true",
		"controllerAddr=" + proctest.ControllerAddrs(s.ctls), "allAckInSyncStateSet=true",
		"aclEnable=true", "aclFile=" + s.aclFile,
		innerCredsLine,
		"tls.server.mode=enforcing", "tls.server.certPath=" + s.certFile, "tls.server.keyPath=" + s.keyFile,
		"tls.enable=true", "tls.client.trustCertPath=" + s.certFile,
		"tls.client.certPath=" + s.certFile, "tls.client.keyPath=" + s.keyFile}, "\n")
	for i := range 2 {
		bdir := t.TempDir()
		cf := filepath.Join(bdir, "broker.conf")
		if err := os.WriteFile(cf, []byte(conf+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p := proctest.New(t, fmt.Sprintf("apogee-broker-%d", i+1), brokerBin)
		t.Cleanup(p.StopClean)
		p.Run("--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
			"--namesrv-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
			"--data-dir", filepath.Join(bdir, "data"), "-c", cf, "--namesrv", s.ns.Ready.Listen)
		s.brokers = append(s.brokers, p)
	}
	return s
}

// waitReplicated waits for a master with a SyncStateSet of two, creates
// the topic and the groups on it, and returns the master and the slave.
func (s *secure) waitReplicated() (master, slave *proctest.Proc) {
	t := s.t
	t.Helper()
	wait.For(t, "a master and a SyncStateSet of two (replication under ACL and TLS)", func() error {
		m, set, err := s.replicaInfo()
		if err != nil {
			return err
		}
		master, slave = nil, nil
		for _, b := range s.brokers {
			if b.Ready.Advertise == m {
				master = b
			} else {
				slave = b
			}
		}
		if master == nil {
			return fmt.Errorf("master %q", m)
		}
		if set != 2 {
			return fmt.Errorf("master %s, SyncStateSet of %d", m, set)
		}
		return nil
	})
	ext := map[string]string{"topic": secTopic, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
		"perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
	if r, err := s.call(master.Ready.Listen, 17, ext, nil, true); err != nil || r.Code != 0 { // UPDATE_AND_CREATE_TOPIC
		t.Fatalf("create topic %s on the master: %v %v", secTopic, r, err)
	}
	for _, g := range []string{"SecGroup4", "SecGroup5"} {
		body, _ := json.Marshal(map[string]any{"groupName": g, "consumeEnable": true, "consumeFromMinEnable": true,
			"retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
			"notifyConsumerIdsChangedEnable": true})
		if r, err := s.call(master.Ready.Listen, 200, map[string]string{}, body, true); err != nil || r.Code != 0 { // UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
			t.Fatalf("create group %s on the master: %v %v", g, r, err)
		}
	}
	wait.For(t, "the topic on the slave (its table follows the master's under ACL)", func() error {
		r, err := s.call(slave.Ready.Listen, 21, nil, nil, true) // GET_ALL_TOPIC_CONFIG
		if err != nil {
			return err
		}
		if r.Code != 0 || !strings.Contains(string(r.Body), `"`+secTopic+`"`) {
			return fmt.Errorf("the slave lacks %s (code %d %s)", secTopic, r.Code, r.Remark)
		}
		return nil
	})
	return master, slave
}

// replicaInfo asks the controllers, signed, for the group's master and the
// size of its SyncStateSet (CONTROLLER_GET_REPLICA_INFO, which only the
// leader answers).
func (s *secure) replicaInfo() (master string, set int, err error) {
	err = errors.New("no controller answered")
	for _, c := range s.ctls {
		r, cerr := s.call(c.Addr, 1004, map[string]string{"brokerName": secGroup}, nil, true)
		if cerr != nil {
			err = cerr
			continue
		}
		if r.Code != 0 {
			err = fmt.Errorf("controller %s: %d %s", c.ID, r.Code, r.Remark)
			continue
		}
		var body struct {
			Set []int64 `json:"syncStateSet"`
		}
		if jerr := json.Unmarshal(r.Body, &body); jerr != nil {
			return "", 0, fmt.Errorf("controller %s: replica info %q: %w", c.ID, r.Body, jerr)
		}
		m, _ := r.Ext.GetString("masterAddress")
		return m, len(body.Set), nil
	}
	return "", 0, err
}

// commitLogMax is a broker's commit-log end from its runtime information
// (GET_BROKER_RUNTIME_INFO, signed).
func (s *secure) commitLogMax(addr string) (int64, error) {
	r, err := s.call(addr, 28, nil, nil, true)
	if err != nil {
		return 0, err
	}
	if r.Code != 0 {
		return 0, fmt.Errorf("runtime info of %s: %d %s", addr, r.Code, r.Remark)
	}
	var body struct {
		Table map[string]string `json:"table"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return 0, err
	}
	var v int64
	_, err = fmt.Sscan(body.Table["commitLogMaxOffset"], &v)
	return v, err
}

// call sends one remoting request over TLS (verifying the deployment's
// certificate), signed with the inner credentials when signed is set.
func (s *secure) call(addr string, code int32, ext map[string]string, body []byte, signed bool) (*protocol.Command, error) {
	opts := &rmtg.ClientOptions{TLS: &tls.Config{RootCAs: s.roots}, DialTimeout: 5 * time.Second}
	if signed {
		opts.Signer = auth.NewSigner(s.inner)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := rmtg.Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var req protocol.Command
	req.InitRequest(code, 0)
	req.Language = protocol.LangGo
	req.Version = protocol.VersionV4_5_2
	req.SerializeType = protocol.SerializeJSON
	for k, v := range ext {
		req.Ext.SetString(k, v)
	}
	req.Body = body
	return cl.Invoke(ctx, &req)
}

// strangersRefused checks that a peer without credentials (and one without
// TLS) is refused on every listener of the deployment.
func (s *secure) strangersRefused(master, slave *proctest.Proc) {
	t := s.t
	t.Helper()
	before, _, err := s.replicaInfo()
	if err != nil {
		t.Fatal(err)
	}

	// Remoting: the brokers' ports, their embedded name servers, the
	// standalone name server and the controllers.
	type probe struct {
		what, addr string
		code       int32
		ext        map[string]string
	}
	sendExt := map[string]string{"producerGroup": "Stranger", "topic": secTopic, "defaultTopic": "TBW102",
		"defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": "",
		"reconsumeTimes": "0", "unitMode": "false", "batch": "false"}
	regExt := map[string]string{"brokerAddr": "127.0.0.1:1", "brokerName": "stranger", "clusterName": secCluster,
		"brokerId": "0", "haServerAddr": "127.0.0.1:2", "compressed": "false"}
	probes := []probe{
		{"the master's remoting port: a send", master.Ready.Listen, 10, sendExt},
		{"the slave's remoting port: its runtime info", slave.Ready.Listen, 28, nil},
		{"the master's embedded name server: a registration", master.Ready.Namesrv, 103, regExt},
		{"the standalone name server: a registration", s.ns.Ready.Listen, 103, regExt},
	}
	for _, c := range s.ctls {
		probes = append(probes,
			probe{"controller " + c.ID + ": apply a broker id", c.Addr, 1013,
				map[string]string{"clusterName": secCluster, "brokerName": secGroup, "appliedBrokerId": "9", "registerCheckCode": "127.0.0.1:3;1"}},
			probe{"controller " + c.ID + ": elect a master", c.Addr, 1002,
				map[string]string{"clusterName": secCluster, "brokerName": secGroup, "brokerId": "9"}})
	}
	for _, p := range probes {
		r, err := s.call(p.addr, p.code, p.ext, []byte("stranger"), false)
		if err == nil && r.Code == 0 {
			t.Errorf("%s: a stranger without credentials was served (code 0)", p.what)
		}
		if _, err := plainCall(p.addr, p.code); err == nil {
			t.Errorf("%s: a plaintext stranger was answered on a TLS-enforcing port", p.what)
		}
	}

	// gRPC: an unsigned stream is refused from its headers.
	for _, b := range []*proctest.Proc{master, slave} {
		cc, err := grpc.NewClient(b.Ready.GRPC, grpc.WithTransportCredentials(grpccreds.NewTLS(&tls.Config{RootCAs: s.roots})))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", "stranger")
		_, err = v2.NewMessagingServiceClient(cc).QueryRoute(ctx, &v2.QueryRouteRequest{Topic: &v2.Resource{Name: secTopic}})
		cancel()
		cc.Close()
		if st, _ := status.FromError(err); err == nil || st.Code() != codes.Unauthenticated {
			t.Errorf("gRPC %s: an unsigned QueryRoute answered %v, want Unauthenticated", b.Ready.GRPC, err)
		}
	}

	// HA: a stranger on the master's HA port (TLS, no credentials) that
	// reports offset 0 and then acknowledges 2^40 gets no byte of the log
	// and is disconnected.
	if got, err := haStranger(master.Ready.HA, s.roots); err != nil || got > 0 {
		t.Errorf("HA %s: a stranger read %d bytes of the log (err %v)", master.Ready.HA, got, err)
	}

	// Raft: a stranger on every controller's Raft port is dropped.
	for _, c := range s.ctls {
		if err := raftStranger(c.Raft, s.roots); err != nil {
			t.Errorf("Raft %s: a stranger was not dropped: %v", c.Raft, err)
		}
	}

	// The operator port: metrics only for an ACL user with cluster rights,
	// the dashboard acts for nobody without a login, and nothing is served
	// in plaintext.
	for _, b := range []*proctest.Proc{master, slave} {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.roots}}}
		get := func(user, pass string) int {
			req, err := http.NewRequest(http.MethodGet, "https://"+b.Ready.Metrics+"/metrics", nil)
			if err != nil {
				t.Fatal(err)
			}
			if user != "" {
				req.SetBasicAuth(user, pass)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("metrics of %s: %v", b.Ready.Metrics, err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if code := get("", ""); code != http.StatusUnauthorized {
			t.Errorf("operator port %s: /metrics without credentials answered %d, want 401", b.Ready.Metrics, code)
		}
		if code := get("app", "app-secret"); code != http.StatusForbidden {
			t.Errorf("operator port %s: /metrics for a user without cluster rights answered %d, want 403", b.Ready.Metrics, code)
		}
		if code := get("inner", "inner-secret"); code != http.StatusOK {
			t.Errorf("operator port %s: /metrics for the super user answered %d, want 200", b.Ready.Metrics, code)
		}
		resp, err := hc.PostForm("https://"+b.Ready.Metrics+"/do", map[string][]string{"action": {"createTopic"}, "topic": {"StrangerTopic"}})
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode < 400 {
				t.Errorf("operator port %s: a stranger's POST answered %d", b.Ready.Metrics, resp.StatusCode)
			}
		}
		if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + b.Ready.Metrics + "/metrics"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("operator port %s: served metrics in plaintext under TLS enforcing", b.Ready.Metrics)
			}
		}
	}

	// Nothing a stranger did moved the group.
	after, set, err := s.replicaInfo()
	if err != nil {
		t.Fatal(err)
	}
	if after != before || set != 2 {
		t.Errorf("after the strangers: master %s (was %s), SyncStateSet of %d", after, before, set)
	}
	if r, err := s.call(master.Ready.Listen, 21, nil, nil, true); err != nil || strings.Contains(string(r.Body), "StrangerTopic") {
		t.Errorf("after the strangers: the master's topics %q (%v)", r.Body, err)
	}
}

// plainCall sends one unsigned remoting request in plaintext and returns
// the answer's code, or an error when none comes.
func plainCall(addr string, code int32) (int, error) {
	r, err := remotingCall(addr, int(code), nil, nil, 5*time.Second)
	return r.Code, err
}

// haStranger connects to an HA port over TLS without credentials, reports
// offset 0 and acknowledges 2^40, and returns how many bytes of the log it
// read before the master closed the connection (an error when it was not
// closed within 10 s).
func haStranger(addr string, roots *x509.CertPool) (int, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots})
	if err != nil {
		return 0, nil // refused at the handshake
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b [8]byte
	for _, off := range []uint64{0, 1 << 40} {
		binary.BigEndian.PutUint64(b[:], off)
		if _, err := conn.Write(b[:]); err != nil {
			return 0, nil
		}
	}
	n, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return int(n), fmt.Errorf("still connected after 10 s: %w", err)
	}
	return int(n), nil
}

// raftStranger connects to a Raft port twice, in plaintext and over TLS
// without a client certificate, writes what hashicorp/raft's transport
// would take as the start of a request, and returns nil when both
// connections were closed without a byte of Raft (the plaintext one may
// get a TLS alert).
func raftStranger(addr string, roots *x509.CertPool) error {
	try := func(tlsConf *tls.Config) (int64, error) {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return 0, nil
		}
		if tlsConf != nil {
			conn = tls.Client(conn, tlsConf)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write([]byte{0, 0x81, 0xa4, 'T', 'e', 'r', 'm', 0x7f}); err != nil {
			return 0, nil
		}
		n, err := io.Copy(io.Discard, conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return n, fmt.Errorf("still connected after 10 s")
		}
		return n, nil
	}
	if _, err := try(nil); err != nil {
		return fmt.Errorf("plaintext: %w", err)
	}
	n, err := try(&tls.Config{RootCAs: roots})
	if err != nil {
		return fmt.Errorf("TLS without a client certificate: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("TLS without a client certificate: answered %d bytes", n)
	}
	return nil
}

// writeCA writes a self-signed certificate for 127.0.0.1 that serves as
// the deployment's CA, every server's certificate and every client's (for
// mutual TLS between the controllers), and returns its files and a pool
// holding it.
func writeCA(t *testing.T, dir string) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "apogee-secure"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

// controllerSecurity is every controller's flags for TLS enforcing on its
// remoting port, Raft over mutual TLS, pushes to brokers over TLS, and
// access control with the deployment's ACL file.
func (s *secure) controllerSecurity() []string {
	return []string{"--tls-mode", "enforcing", "--tls-cert", s.certFile, "--tls-key", s.keyFile, "--tls-ca", s.certFile,
		"--tls-client-ca", s.certFile, "--tls-client-cert", s.certFile, "--tls-client-key", s.keyFile,
		"--raft-tls", "--notify-tls", "--acl-file", s.aclFile, "-c", s.ctlProps}
}
