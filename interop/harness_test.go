package interop

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// brokerBin and namesrvBin are the binaries under test, built once by
// TestMain (or given by APOGEE_BROKER_BIN and APOGEE_NAMESRV_BIN).
var brokerBin, namesrvBin, controllerBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	// The client logs every rebalance and reconnect at info level.
	level := os.Getenv("ROCKETMQ_GO_LOG_LEVEL")
	if level == "" {
		level = "error"
	}
	rlog.SetLogLevel(level)

	brokerBin, namesrvBin = os.Getenv("APOGEE_BROKER_BIN"), os.Getenv("APOGEE_NAMESRV_BIN")
	controllerBin = os.Getenv("APOGEE_CONTROLLER_BIN")
	if brokerBin != "" && namesrvBin != "" && controllerBin != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "apogee-interop-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	for _, c := range []struct {
		bin  *string
		name string
	}{{&brokerBin, "apogee-broker"}, {&namesrvBin, "apogee-namesrv"}, {&controllerBin, "apogee-controller"}} {
		if *c.bin != "" {
			continue
		}
		*c.bin = filepath.Join(dir, c.name)
		// Build from the main module's root: ../cmd/... is outside this
		// module.
		cmd := exec.Command("go", "build", "-o", *c.bin, "./cmd/"+c.name)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "interop: go build ./cmd/%s (in ..): %v\n%s", c.name, err, out)
			return 1
		}
	}
	return m.Run()
}

// startLine matches the broker's one start-up line.
var startLine = regexp.MustCompile(`^apogee-broker (\S+) listening on (\S+) \(advertised (\S+)\), name server on (\S+), data (.+), grpc on (\S+), flush (\S+), version (.+)$`)

// lockedBuffer collects a process's stderr; the exec package writes it from
// its own goroutine while a failing test may read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Broker is one apogee-broker process (and its restarts) owned by one test.
type Broker struct {
	t       testing.TB
	dataDir string
	extra   []string // flags besides the addresses and the data directory

	Addr   string // the broker's remoting address, as advertised in routes
	NsAddr string // the embedded name server's listener, or the first of namesrvs
	Line   string // the start-up line as printed

	// namesrvs are the standalone name servers the broker registers with
	// (--namesrv) instead of serving its embedded one on a listener of its
	// own (--namesrv-listen ""); empty for the usual one-process broker.
	namesrvs []string

	cmd    *exec.Cmd
	exited chan error
	stderr *lockedBuffer
	logs   []string // stderr of earlier runs of this test's broker
}

// startBroker starts a broker for t on free loopback ports with its data in
// a fresh temporary directory. extra flags are appended (e.g. "--flush",
// "sync"). The broker is stopped with SIGTERM when the test ends (and must
// exit 0), and its stderr is logged if the test failed.
func startBroker(t testing.TB, extra ...string) *Broker {
	t.Helper()
	return startBrokerWithNamesrvs(t, nil, extra...)
}

// startBrokerWithNamesrvs starts a broker as startBroker does; with
// namesrvs ("host:port"), it registers with those name servers (--namesrv)
// and has no listener of its own for its embedded name server
// (--namesrv-listen ""), and its NameServer resolver gives those addresses.
func startBrokerWithNamesrvs(t testing.TB, namesrvs []string, extra ...string) *Broker {
	t.Helper()
	b := &Broker{t: t, dataDir: filepath.Join(t.TempDir(), "data"), extra: extra, namesrvs: namesrvs}
	t.Cleanup(func() {
		if b.cmd != nil {
			// Every test ends with a graceful stop that must exit 0.
			b.stopWith(syscall.SIGTERM, true)
		}
		if t.Failed() {
			for i, l := range b.logs {
				t.Logf("broker stderr (run %d):\n%s", i+1, l)
			}
		}
	})
	nsListen := "127.0.0.1:0"
	if len(namesrvs) > 0 {
		nsListen = ""
	}
	b.start("127.0.0.1:0", nsListen)
	return b
}

// NameServer returns the resolver the Go client needs for this broker.
func (b *Broker) NameServer() primitive.NsResolver {
	if len(b.namesrvs) > 0 {
		return primitive.NewPassthroughResolver(b.namesrvs)
	}
	return primitive.NewPassthroughResolver([]string{b.NsAddr})
}

func (b *Broker) start(listen, nsListen string) {
	t := b.t
	t.Helper()
	args := []string{"--listen", listen, "--namesrv-listen", nsListen, "--grpc-listen", "127.0.0.1:0", "--data-dir", b.dataDir}
	if len(b.namesrvs) > 0 {
		args = append(args, "--namesrv", strings.Join(b.namesrvs, ";"))
	}
	args = append(args, b.extra...)
	cmd := exec.Command(brokerBin, args...)
	out := &firstLine{ready: make(chan struct{})}
	cmd.Stdout = out
	b.stderr = &lockedBuffer{}
	cmd.Stderr = b.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start broker: %v", err)
	}
	b.cmd = cmd
	b.logs = append(b.logs, "")
	exited := make(chan error, 1)
	b.exited = exited
	go func() { exited <- cmd.Wait() }()
	select {
	case <-out.ready:
		line := out.line()
		m := startLine.FindStringSubmatch(line)
		if m == nil {
			b.kill()
			t.Fatalf("broker start line %q does not match %v", line, startLine)
		}
		b.Line = line
		b.Addr, b.NsAddr = m[3], m[4]
		if len(b.namesrvs) > 0 {
			b.NsAddr = b.namesrvs[0]
		}
	case err := <-exited:
		b.cmd = nil
		b.logs[len(b.logs)-1] = b.stderr.String()
		t.Fatalf("broker exited at start: %v\n%s", err, b.stderr.String())
	case <-time.After(30 * time.Second):
		b.kill()
		t.Fatal("broker printed no start line in 30 s")
	}
}

// firstLine is a process's stdout that signals its first complete line.
type firstLine struct {
	mu    sync.Mutex
	buf   []byte
	ready chan struct{}
	done  bool
}

func (f *firstLine) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.done {
		f.buf = append(f.buf, p...)
		if i := bytes.IndexByte(f.buf, '\n'); i >= 0 {
			f.buf = f.buf[:i]
			f.done = true
			close(f.ready)
		}
	}
	return len(p), nil
}

func (f *firstLine) line() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return string(f.buf)
}

// Stop sends SIGTERM and waits for a clean exit (status 0).
func (b *Broker) Stop() {
	b.t.Helper()
	b.stopWith(syscall.SIGTERM, true)
}

// Kill sends SIGKILL and waits for the process to go.
func (b *Broker) Kill() {
	b.t.Helper()
	b.kill()
}

func (b *Broker) kill() { b.stopWith(syscall.SIGKILL, false) }

func (b *Broker) stopWith(sig syscall.Signal, wantClean bool) {
	b.t.Helper()
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(sig)
	var err error
	select {
	case err = <-b.exited:
	case <-time.After(45 * time.Second):
		_ = b.cmd.Process.Kill()
		err = <-b.exited
		b.t.Errorf("broker did not exit within 45 s of %v", sig)
	}
	b.cmd = nil
	b.logs[len(b.logs)-1] = b.stderr.String()
	if wantClean && err != nil {
		b.t.Errorf("broker exit after %v: %v", sig, err)
	}
}

// Restart starts the broker again on the same data directory and the same
// ports, so clients holding the old addresses reconnect. (Go listeners set
// SO_REUSEADDR, so the ports can be bound again at once.)
func (b *Broker) Restart() {
	b.t.Helper()
	if b.cmd != nil {
		b.t.Fatal("Restart of a running broker")
	}
	nsListen := b.NsAddr
	if len(b.namesrvs) > 0 {
		nsListen = ""
	}
	b.start(b.Addr, nsListen)
}

// DataDir is the broker's data directory.
func (b *Broker) DataDir() string { return b.dataDir }

// Stderr is what the current (or last) run has written to stderr.
func (b *Broker) Stderr() string { return b.stderr.String() }

// --- names and clients --------------------------------------------------

var nameSeq atomic.Int64

// uniq returns a name unique within the run, usable as a topic or group.
func uniq(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), nameSeq.Add(1))
}

// newProducer starts a producer for b; it is shut down when the test ends.
func newProducer(t testing.TB, b *Broker, opts ...producer.Option) rocketmq.Producer {
	t.Helper()
	all := append([]producer.Option{
		producer.WithNsResolver(b.NameServer()),
		producer.WithGroupName(uniq("PG")),
		producer.WithInstanceName(uniq("p")),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(10 * time.Second),
	}, opts...)
	p, err := rocketmq.NewProducer(all...)
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("producer start: %v", err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

// consumerOpts are the options every push or pull consumer here gets.
func consumerOpts(b *Broker, group string, extra ...consumer.Option) []consumer.Option {
	return append([]consumer.Option{
		consumer.WithNsResolver(b.NameServer()),
		consumer.WithGroupName(group),
		consumer.WithInstance(uniq("c")),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	}, extra...)
}

// createTopic creates topic on b with the admin API and waits until its
// route is served.
func createTopic(t testing.TB, b *Broker, topic string, queues int) {
	t.Helper()
	adm, err := admin.NewAdmin(admin.WithResolver(b.NameServer()))
	if err != nil {
		t.Fatalf("new admin: %v", err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(b.Addr),
		admin.WithReadQueueNums(queues), admin.WithWriteQueueNums(queues)); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	// CreateTopic ignores the response code: check the route. A broker
	// registers a new topic with external name servers asynchronously
	// (its embedded one has it at once): wait for it, boundedly.
	rc := dialRaw(t, b.NsAddr)
	defer rc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := rc.Invoke(t, request(105, map[string]string{"topic": topic}, nil))
		if resp.Code == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("route of %s 10 s after CreateTopic: code %d %q", topic, resp.Code, resp.Remark)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFor polls cond every 50 ms until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// recorder collects what push consumers receive, keyed by body.
type recorder struct {
	mu    sync.Mutex
	count map[string]int
	msgs  []*primitive.MessageExt
	total int
}

func newRecorder() *recorder { return &recorder{count: map[string]int{}} }

func (r *recorder) add(msgs ...*primitive.MessageExt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		r.count[string(m.Body)]++
		r.msgs = append(r.msgs, m)
		r.total++
	}
}

// distinct is the number of distinct bodies received.
func (r *recorder) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.count)
}

func (r *recorder) received() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

func (r *recorder) has(body string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[body] > 0
}

func (r *recorder) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.count))
	for k, v := range r.count {
		out[k] = v
	}
	return out
}

func (r *recorder) handler(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	r.add(msgs...)
	return consumer.ConsumeSuccess, nil
}

// startPush starts a push consumer of topic with the selector; it is shut
// down when the test ends (or earlier by the returned stop).
func startPush(t testing.TB, b *Broker, group, topic string, sel consumer.MessageSelector, rec *recorder, extra ...consumer.Option) (stop func()) {
	t.Helper()
	c, err := consumer.NewPushConsumer(consumerOpts(b, group, extra...)...)
	if err != nil {
		t.Fatalf("new push consumer: %v", err)
	}
	if err := c.Subscribe(topic, sel, rec.handler); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("push consumer start: %v", err)
	}
	started := time.Now()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			// Start triggers rebalances (its own, and another when the
			// broker's NOTIFY_CONSUMER_IDS_CHANGED answers its heartbeat);
			// Shutdown while one runs is a data race inside the client
			// (rmqClient.close, internal/client.go:555 vs :575). They take
			// milliseconds: give them a second.
			time.Sleep(time.Until(started.Add(time.Second)))
			_ = c.Shutdown()
		})
	}
	t.Cleanup(stop)
	return stop
}

// bodies returns n distinct bodies with the prefix.
func bodies(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return out
}

// missing lists the wanted bodies the recorder has not seen (at most 10).
func missing(r *recorder, want []string) string {
	var miss []string
	for _, w := range want {
		if !r.has(w) {
			miss = append(miss, w)
			if len(miss) == 10 {
				miss = append(miss, "...")
				break
			}
		}
	}
	return strings.Join(miss, ", ")
}
