package interopgrpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"google.golang.org/grpc"

	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
)

// brokerBin is the apogee-broker under test, built once by TestMain (or
// given by APOGEE_BROKER_BIN). The failover test also runs apogee-namesrv
// and apogee-controller (binFor builds them on first use).
var brokerBin string

// binDir holds the binaries TestMain and binFor build.
var binDir string

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	// The 5.x client logs to a file under rocketmq.client.logRoot (by
	// default under the home directory); keep it in a temporary directory.
	logs, err := os.MkdirTemp("", "apogee-interop-grpc-logs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(logs)
	os.Setenv("rocketmq.client.logRoot", logs)
	if os.Getenv("rocketmq.client.logLevel") == "" {
		os.Setenv("rocketmq.client.logLevel", "error")
	}
	rmq.ResetLogger()
	rlog.SetLogLevel("error")

	if os.Getenv(childEnv) != "" {
		return runChild()
	}
	observeClients()
	binDir, err = os.MkdirTemp("", "apogee-interop-grpc-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(binDir)
	brokerBin = os.Getenv("APOGEE_BROKER_BIN")
	if brokerBin == "" {
		if brokerBin, err = buildBin("apogee-broker"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// buildBin builds ./cmd/name of the main module into binDir.
func buildBin(name string) (string, error) {
	bin := filepath.Join(binDir, name)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = ".." // the main module
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, out)
	}
	return bin, nil
}

var (
	binsMu sync.Mutex
	bins   = map[string]string{}
)

// binFor is the binary of the main module's command name: the one env
// names (APOGEE_NAMESRV_BIN, APOGEE_CONTROLLER_BIN), or one built on first
// use.
func binFor(t *testing.T, name, env string) string {
	t.Helper()
	if b := os.Getenv(env); b != "" {
		return b
	}
	binsMu.Lock()
	defer binsMu.Unlock()
	if b, ok := bins[name]; ok {
		return b
	}
	b, err := buildBin(name)
	if err != nil {
		t.Fatal(err)
	}
	bins[name] = b
	return b
}

// clientObserver, when set, sees every unary call the 5.x clients of this
// process make, with its outcome and when it began (observeUnary): the
// failover test watches the PushConsumer's acks there, which the SDK sends
// itself after the listener returns.
var clientObserver atomic.Pointer[func(method string, req, resp any, err error, began time.Time)]

func observeUnary(ctx context.Context, method string, req, resp any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker,
	opts ...grpc.CallOption) error {
	began := time.Now()
	err := invoker(ctx, method, req, resp, cc, opts...)
	if f := clientObserver.Load(); f != nil {
		(*f)(method, req, resp, err, began)
	}
	return err
}

// observeClients adds observeUnary to every connection the 5.x SDK makes
// from now on (the SDK dials through its package variable NewRpcClient and
// takes no dial options from a client's configuration).
func observeClients() {
	newRPC := rmq.NewRpcClient
	rmq.NewRpcClient = func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
		opts = append(opts, rmq.WithRpcClientConnOption(rmq.WithDialOptions(grpc.WithChainUnaryInterceptor(observeUnary))))
		return newRPC(target, opts...)
	}
}

var startLine = regexp.MustCompile(`^apogee-broker (\S+) listening on (\S+) \(advertised (\S+)\), name server on (\S+), data (.+), grpc on (\S+), flush (\S+), version (.+)$`)

// broker is one apogee-broker process of a test (package proctest: every
// listener on a port from :0, read from its ready file; its log in a file
// printed if the test fails).
type broker struct {
	Addr, NsAddr, GrpcAddr string
	p                      *proctest.Proc
}

// startBroker starts a broker with every listener on a loopback port from
// :0, its data in t's temporary directory and conf (broker.conf lines) as
// its configuration; it is stopped with SIGTERM when the test ends and
// must exit 0.
func startBroker(t *testing.T, conf ...string) *broker {
	t.Helper()
	dir := t.TempDir()
	args := []string{"--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0",
		"--grpc-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")}
	if len(conf) > 0 {
		path := filepath.Join(dir, "broker.conf")
		var b bytes.Buffer
		for _, l := range conf {
			b.WriteString(l + "\n")
		}
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", path)
	}
	p := proctest.New(t, "apogee-broker", brokerBin)
	t.Cleanup(p.StopClean)
	p.Run(args...)
	m := startLine.FindStringSubmatch(p.Line())
	if m == nil || m[6] != p.Ready.GRPC {
		t.Fatalf("start line %q, ready file %+v", p.Line(), p.Ready)
	}
	// The gRPC address a client is given: the listener's (127.0.0.1 here,
	// as the front end advertises in routes).
	return &broker{Addr: p.Ready.Advertise, NsAddr: p.Ready.Namesrv, GrpcAddr: p.Ready.GRPC, p: p}
}

// config is the 5.x client's configuration for this broker: its gRPC
// endpoint and nothing else.
func (b *broker) config(group string) *rmq.Config {
	return &rmq.Config{Endpoint: b.GrpcAddr, ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}}
}

// producer starts a 5.x producer of topics (stopped when the test ends).
func (b *broker) producer(t *testing.T, opts ...rmq.ProducerOption) rmq.Producer {
	t.Helper()
	return startProducer(t, b.config(""), opts...)
}

// startProducer starts a 5.x producer with cfg (stopped when the test ends).
func startProducer(t *testing.T, cfg *rmq.Config, opts ...rmq.ProducerOption) rmq.Producer {
	t.Helper()
	p, err := rmq.NewProducer(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("producer start: %v", err)
	}
	t.Cleanup(func() { p.GracefulStop() })
	return p
}

// consumer starts a 5.x simple consumer of group (stopped when the test
// ends) with subs (topic → filter) and the await duration given.
func (b *broker) consumer(t *testing.T, group string, await time.Duration, subs map[string]*rmq.FilterExpression) rmq.SimpleConsumer {
	t.Helper()
	c, err := rmq.NewSimpleConsumer(b.config(group), rmq.WithSimpleAwaitDuration(await), rmq.WithSimpleSubscriptionExpressions(subs))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("consumer start: %v", err)
	}
	t.Cleanup(func() { c.GracefulStop() })
	return c
}

// codeOf returns the status code of a 5.x client error (0 when it has none).
func codeOf(err error) int32 {
	var e *rmq.ErrRpcStatus
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// codeMessageNotFound is what an empty receive answers.
const codeMessageNotFound = 40401

// receiveOnce is one Receive of up to n messages (the consumer's long
// polling), acking each when ack is set.
func receiveOnce(t *testing.T, c rmq.SimpleConsumer, n int, invisible time.Duration, ack bool) []*rmq.MessageView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	mvs, err := c.Receive(ctx, int32(min(n, 32)), invisible)
	cancel()
	if err != nil {
		if codeOf(err) == codeMessageNotFound {
			return nil
		}
		t.Fatalf("receive: %v", err)
	}
	for _, mv := range mvs {
		if ack {
			if err := c.Ack(context.Background(), mv); err != nil {
				t.Fatalf("ack %s: %v", mv.GetMessageId(), err)
			}
		}
	}
	return mvs
}

// receive collects n messages, acking each when ack is set; the test fails
// if they do not come (bounded by wait.DefaultTimeout only).
func receive(t *testing.T, c rmq.SimpleConsumer, n int, invisible time.Duration, ack bool) []*rmq.MessageView {
	t.Helper()
	var got []*rmq.MessageView
	wait.For(t, fmt.Sprintf("%d messages received", n), func() error {
		got = append(got, receiveOnce(t, c, n-len(got), invisible, ack)...)
		if len(got) < n {
			return fmt.Errorf("%d received", len(got))
		}
		return nil
	})
	return got
}

// receiveFor receives for the span d (or until n came) and returns what
// came: for a test that checks that nothing (more) comes, an absence being
// checked over a span, not waited for.
func receiveFor(t *testing.T, c rmq.SimpleConsumer, n int, invisible, d time.Duration, ack bool) []*rmq.MessageView {
	t.Helper()
	var got []*rmq.MessageView
	for end := time.Now().Add(d); len(got) < n && time.Now().Before(end); {
		got = append(got, receiveOnce(t, c, n-len(got), invisible, ack)...)
	}
	return got
}

// remoting sends one request over RocketMQ's remoting protocol to addr and
// returns the response's code and remark: the admin requests the 5.x
// client has no API for.
func remoting(t *testing.T, addr string, code int, ext map[string]string, body []byte) (int, string) {
	t.Helper()
	r, err := remotingCall(addr, code, ext, body, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return r.Code, r.Remark
}

// reply is a remoting response: its header's code, remark and extFields,
// and its body.
type reply struct {
	Code   int               `json:"code"`
	Remark string            `json:"remark"`
	Ext    map[string]string `json:"extFields"`
	Body   []byte            `json:"-"`
}

// remotingCall sends one request over RocketMQ's remoting protocol to addr
// and returns the response, or an error when addr does not answer within d
// (a process of the failover test may be dead or paused).
func remotingCall(addr string, code int, ext map[string]string, body []byte, d time.Duration) (reply, error) {
	var r reply
	hdr, err := json.Marshal(map[string]any{"code": code, "language": "GO", "version": 317, "opaque": 1, "flag": 0,
		"extFields": ext})
	if err != nil {
		return r, err
	}
	frame := make([]byte, 8, 8+len(hdr)+len(body))
	binary.BigEndian.PutUint32(frame, uint32(4+len(hdr)+len(body)))
	binary.BigEndian.PutUint32(frame[4:], uint32(len(hdr)))
	frame = append(append(frame, hdr...), body...)
	conn, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return r, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(d))
	if _, err := conn.Write(frame); err != nil {
		return r, err
	}
	var head [8]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return r, fmt.Errorf("request %d to %s: %w", code, addr, err)
	}
	total := binary.BigEndian.Uint32(head[:])
	hlen := binary.BigEndian.Uint32(head[4:]) & 0xFFFFFF
	if total < 4+hlen {
		return r, fmt.Errorf("request %d to %s: a frame of %d bytes with a header of %d", code, addr, total, hlen)
	}
	rest := make([]byte, total-4)
	if _, err := io.ReadFull(conn, rest); err != nil {
		return r, fmt.Errorf("request %d to %s: %w", code, addr, err)
	}
	if err := json.Unmarshal(rest[:hlen], &r); err != nil {
		return r, fmt.Errorf("request %d to %s: header: %w", code, addr, err)
	}
	r.Body = rest[hlen:]
	return r, nil
}

// createTopic creates a topic with queues queues (and a message.type
// attribute unless typ is "").
func (b *broker) createTopic(t *testing.T, topic string, queues int, typ string) {
	t.Helper()
	ext := map[string]string{"topic": topic, "defaultTopic": "TBW102", "readQueueNums": strconv.Itoa(queues),
		"writeQueueNums": strconv.Itoa(queues), "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
	if typ != "" {
		ext["attributes"] = "+message.type=" + typ
	}
	if code, remark := remoting(t, b.Addr, 17, ext, nil); code != 0 {
		t.Fatalf("create topic %s: %d %s", topic, code, remark)
	}
}

// updateGroup creates or changes a consumer group: FIFO delivery
// (consumeMessageOrderly) and its retries.
func (b *broker) updateGroup(t *testing.T, group string, orderly bool, retryMax int) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"groupName": group, "consumeEnable": true, "consumeFromMinEnable": true,
		"consumeBroadcastEnable": true, "consumeMessageOrderly": orderly, "retryQueueNums": 1, "retryMaxTimes": retryMax,
		"brokerId": 0, "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": true})
	if code, remark := remoting(t, b.Addr, 200, map[string]string{}, body); code != 0 {
		t.Fatalf("update group %s: %d %s", group, code, remark)
	}
}
