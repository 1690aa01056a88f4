package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/readyfile"
	"github.com/apogeemq/apogee/internal/wait"
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

// Broker is one apogee-broker process (and its restarts) owned by one test.
// Every listener it has takes a port from :0 on its first run, read from
// its ready file (package proctest): no port is guessed or derived from
// another. A restart keeps the addresses the first run bound, as a broker
// restarted in production keeps its identity: clients, slaves and name
// servers reconnect to the addresses they know.
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

	p     *proctest.Proc
	bound readyfile.File // the first run's addresses, which restarts reuse
}

// startBroker starts a broker for t on loopback ports from :0 with its data
// in a fresh temporary directory. extra flags are appended (e.g. "--flush",
// "sync"). The broker is stopped with SIGTERM when the test ends (and must
// exit 0), and its log is printed if the test failed.
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
	b := &Broker{t: t, dataDir: filepath.Join(t.TempDir(), "data"), extra: extra, namesrvs: namesrvs,
		p: proctest.New(t, "apogee-broker", brokerBin)}
	t.Cleanup(func() {
		if b.p.Running() {
			// Every test ends with a graceful stop that must exit 0.
			b.p.StopClean()
		}
	})
	b.start()
	return b
}

// NameServer returns the resolver the Go client needs for this broker.
func (b *Broker) NameServer() primitive.NsResolver {
	if len(b.namesrvs) > 0 {
		return primitive.NewPassthroughResolver(b.namesrvs)
	}
	return primitive.NewPassthroughResolver([]string{b.NsAddr})
}

// listenerArgs are the broker's listener flags: 127.0.0.1:0 on the first
// run, the first run's addresses afterwards (see Broker). A flag extra
// gives itself is left to it.
func (b *Broker) listenerArgs() []string {
	nsListen := "127.0.0.1:0"
	if len(b.namesrvs) > 0 {
		nsListen = ""
	}
	want := [][2]string{{"--listen", "127.0.0.1:0"}, {"--ha-listen", "127.0.0.1:0"}, {"--namesrv-listen", nsListen},
		{"--grpc-listen", "127.0.0.1:0"}}
	if b.bound.Listen != "" {
		want = [][2]string{{"--listen", b.bound.Listen}, {"--ha-listen", b.bound.HA}, {"--namesrv-listen", b.bound.Namesrv},
			{"--grpc-listen", b.bound.GRPC}}
	}
	var args []string
	for _, kv := range want {
		if slices.Contains(b.extra, kv[0]) || kv[0] == "--ha-listen" && kv[1] == "" {
			continue // extra's own, or a slave's (no HA listener)
		}
		args = append(args, kv[0], kv[1])
	}
	return args
}

func (b *Broker) start() {
	t := b.t
	t.Helper()
	args := append(b.listenerArgs(), "--data-dir", b.dataDir)
	if len(b.namesrvs) > 0 {
		args = append(args, "--namesrv", strings.Join(b.namesrvs, ";"))
	}
	b.p.Run(append(args, b.extra...)...)
	if b.bound.Listen == "" {
		b.bound = b.p.Ready
	}
	line := b.p.Line()
	m := startLine.FindStringSubmatch(line)
	if m == nil {
		b.p.Kill()
		t.Fatalf("broker start line %q does not match %v", line, startLine)
	}
	b.Line = line
	b.Addr, b.NsAddr = b.p.Ready.Advertise, b.p.Ready.Namesrv
	if m[3] != b.Addr {
		t.Fatalf("start line %q: advertised %s, the ready file %s", line, m[3], b.Addr)
	}
	if len(b.namesrvs) > 0 {
		b.NsAddr = b.namesrvs[0]
	}
}

// Stop sends SIGTERM and waits for a clean exit (status 0).
func (b *Broker) Stop() {
	b.t.Helper()
	b.p.StopClean()
}

// Kill sends SIGKILL and waits for the process to go.
func (b *Broker) Kill() {
	b.t.Helper()
	b.p.Kill()
}

// Restart starts the broker again on the same data directory and the
// addresses its first run bound, so clients holding them reconnect. (The
// broker binds with SO_REUSEADDR, so a port whose connections of the last
// run linger in TIME_WAIT can be bound again at once.)
func (b *Broker) Restart() {
	b.t.Helper()
	if b.p.Running() {
		b.t.Fatal("Restart of a running broker")
	}
	b.start()
}

// DataDir is the broker's data directory.
func (b *Broker) DataDir() string { return b.dataDir }

// Stderr is what the current (or last) run has written to stderr.
func (b *Broker) Stderr() string { return b.p.RunLog() }

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
	// (its embedded one has it at once): wait for it.
	rc := dialRaw(t, b.NsAddr)
	defer rc.Close()
	wait.For(t, "the route of "+topic+" after CreateTopic", func() error {
		if resp := rc.Invoke(t, request(105, map[string]string{"topic": topic}, nil)); resp.Code != 0 {
			return fmt.Errorf("code %d %q", resp.Code, resp.Remark)
		}
		return nil
	})
}

// waitConsumers waits until n clients of group are online at the broker
// (GET_CONSUMER_CONNECTION_LIST, 203: their heartbeats arrived).
func waitConsumers(t testing.TB, b *Broker, group string, n int) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%d consumers of %s online", n, group), func() error {
		rc := dialRaw(t, b.Addr)
		defer rc.Close()
		resp := rc.Invoke(t, request(203, map[string]string{"consumerGroup": group}, nil))
		var cc struct {
			ConnectionSet []json.RawMessage `json:"connectionSet"`
		}
		if resp.Code != 0 || json.Unmarshal(resp.Body, &cc) != nil {
			return fmt.Errorf("code %d %q", resp.Code, resp.Remark)
		}
		if len(cc.ConnectionSet) < n {
			return fmt.Errorf("%d online", len(cc.ConnectionSet))
		}
		return nil
	})
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
