package broker

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// goVersion is what rocketmq-client-go puts in its requests.
const goVersion = 317

// harness runs a broker on a loopback listener with its data in a temporary
// directory.
type harness struct {
	t    *testing.T
	b    *Broker
	addr string
	opts Options
	done chan struct{}
}

// testOptions are a test broker's options: a small store in dir, the log
// in t's (printed if t fails).
func testOptions(t testing.TB, dir string) Options {
	return loggedOptions(dir, testlog.New(t, "broker"), testlog.New(t, "remoting"))
}

// loggedOptions are testOptions with the broker's and its remoting
// server's loggers given.
func loggedOptions(dir string, log, remotingLog *slog.Logger) Options {
	return Options{Core: core.Options{DataDir: dir, Store: store.Options{
		SegmentSize: 8 << 20, ConsumeQueueEntries: 4096,
		IndexSlots: 1024, IndexMaxEntries: 8192, CleanInterval: -1,
	}, MaxMessageSize: 1 << 20, Logger: log}, Remoting: &remoting.Options{Logger: remotingLog}}
}

func newHarness(t *testing.T, mutate func(*Options)) *harness {
	t.Helper()
	return startHarness(t, testOptions(t, t.TempDir()), mutate)
}

func startHarness(t *testing.T, opts Options, mutate func(*Options)) *harness {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Core.AdvertiseAddr = l.Addr().String()
	if mutate != nil {
		mutate(&opts)
	}
	b, err := New(opts)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	h := &harness{t: t, b: b, addr: l.Addr().String(), opts: opts, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		b.Serve(l)
	}()
	t.Cleanup(h.close)
	return h
}

// close shuts the broker down (once).
func (h *harness) close() {
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	if err := h.b.Shutdown(ctx); err != nil && err != ErrClosed {
		h.t.Errorf("shutdown: %v", err)
	}
	<-h.done
}

// dial connects a client; pushed requests go to handler (nil: not supported).
func (h *harness) dial(handler remoting.Handler) *remoting.Client {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	cl, err := remoting.Dial(ctx, h.addr, &remoting.ClientOptions{Handler: handler, Options: remoting.Options{Logger: testlog.New(h.t, "client")}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { cl.Close() })
	return cl
}

// invoke sends req and waits for the answer (at most internal/wait's
// bound: only a test that would hang ends there).
func invoke(t testing.TB, cl *remoting.Client, req *protocol.Command) *protocol.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	resp, err := cl.Invoke(ctx, req)
	if err != nil {
		t.Fatalf("invoke code %d: %v", req.Code, err)
	}
	return resp
}

// goRequest is a request as rocketmq-client-go shapes it: JSON header,
// language GO, version 317.
func goRequest(code int32) *protocol.Command {
	cmd := new(protocol.Command)
	cmd.InitRequest(code, 0)
	cmd.Language = protocol.LangGo
	cmd.Version = goVersion
	return cmd
}

func props(kv ...string) string {
	var b []byte
	for i := 0; i+1 < len(kv); i += 2 {
		b = message.AppendProperty(b, kv[i], kv[i+1])
	}
	return string(b)
}

// sendRequest is SEND_MESSAGE (10) with the long keys the Go client writes.
func sendRequest(topic string, queueID int32, body []byte, properties string) *protocol.Command {
	cmd := goRequest(protocol.ReqSendMessage)
	e := &cmd.Ext
	e.SetString("producerGroup", "pg")
	e.SetString("topic", topic)
	e.SetString("queueId", strconv.Itoa(int(queueID)))
	e.SetString("sysFlag", "0")
	e.SetString("bornTimestamp", strconv.FormatInt(time.Now().UnixMilli(), 10))
	e.SetString("flag", "0")
	e.SetString("properties", properties)
	e.SetString("reconsumeTimes", "0")
	e.SetString("unitMode", "false")
	e.SetString("maxReconsumeTimes", "0")
	e.SetString("defaultTopic", "TBW102")
	e.SetString("defaultTopicQueueNums", "4")
	e.SetString("batch", "false")
	e.SetString("bname", "broker-a")
	cmd.Body = body
	return cmd
}

// sendV2Request is SEND_MESSAGE_V2 (310) or, with entries, SEND_BATCH_MESSAGE
// (320), with short keys.
func sendV2Request(code int32, topic string, queueID int32, body []byte, properties string) *protocol.Command {
	cmd := goRequest(code)
	h := protocol.SendMessageRequest{
		ProducerGroup: []byte("pg"), Topic: []byte(topic), DefaultTopic: []byte("TBW102"), DefaultTopicQueueNums: 4,
		QueueID: queueID, BornTimestamp: time.Now().UnixMilli(), Properties: []byte(properties),
		Batch: code == protocol.ReqSendBatchMessage, BrokerName: []byte("broker-a"),
	}
	h.EncodeV2(&cmd.Ext)
	cmd.Body = body
	return cmd
}

type batchEntry struct {
	body  string
	props string
}

func batchBody(entries ...batchEntry) []byte {
	var b []byte
	for _, e := range entries {
		b = message.AppendBatchEntry(b, 0, []byte(e.body), []byte(e.props))
	}
	return b
}

type pullArgs struct {
	group, topic string
	queueID      int32
	offset       int64
	max          int32
	sysFlag      int32
	suspendMs    int64
	sub, expr    string
	commitOffset int64
	subVersion   int64
}

// pullRequest is PULL_MESSAGE (11) as the Go client writes it.
func pullRequest(a pullArgs) *protocol.Command {
	cmd := goRequest(protocol.ReqPullMessage)
	if a.max == 0 {
		a.max = 32
	}
	if a.expr == "" {
		a.expr = "TAG"
	}
	h := protocol.PullMessageRequest{
		ConsumerGroup: []byte(a.group), Topic: []byte(a.topic), QueueID: a.queueID, QueueOffset: a.offset,
		MaxMsgNums: a.max, SysFlag: a.sysFlag, CommitOffset: a.commitOffset, SuspendTimeoutMillis: a.suspendMs,
		Subscription: []byte(a.sub), SubVersion: a.subVersion, ExpressionType: []byte(a.expr), BrokerName: []byte("broker-a"),
	}
	h.Encode(&cmd.Ext)
	return cmd
}

// heartbeatRequest is HEART_BEAT (34) for one consumer group subscribing to
// topics (topic -> subString) and one producer group.
func heartbeatRequest(t testing.TB, clientID, group string, subs map[string]string) *protocol.Command {
	t.Helper()
	hb := protocol.HeartbeatData{ClientID: clientID, ProducerDataSet: []protocol.ProducerData{{GroupName: "pg"}}}
	if group != "" {
		cd := protocol.ConsumerData{GroupName: group, ConsumeType: "CONSUME_PASSIVELY", MessageModel: "CLUSTERING",
			ConsumeFromWhere: "CONSUME_FROM_LAST_OFFSET"}
		for topic, sub := range subs {
			cd.SubscriptionDataSet = append(cd.SubscriptionDataSet, protocol.SubscriptionData{
				Topic: topic, SubString: sub, SubVersion: time.Now().UnixNano(), ExpressionType: "TAG"})
		}
		cd.SubscriptionDataSet = append(cd.SubscriptionDataSet, protocol.SubscriptionData{
			Topic: "%RETRY%" + group, SubString: "*", SubVersion: 1, ExpressionType: "TAG"})
		hb.ConsumerDataSet = []protocol.ConsumerData{cd}
	}
	body, err := hb.Encode()
	if err != nil {
		t.Fatal(err)
	}
	cmd := goRequest(protocol.ReqHeartBeat)
	cmd.Body = body
	return cmd
}

// pullHeaders decodes the four headers and fails if one is missing.
func pullHeaders(t testing.TB, resp *protocol.Command) protocol.PullMessageResponse {
	t.Helper()
	var h protocol.PullMessageResponse
	if err := h.Decode(&resp.Ext); err != nil {
		t.Fatalf("pull response code %d (%s): %v", resp.Code, resp.Remark, err)
	}
	if v, _ := resp.Ext.GetString("suggestWhichBrokerId"); v != "0" {
		t.Fatalf("suggestWhichBrokerId = %q", v)
	}
	return h
}

// decodeBody splits a pull body into records, as the Go client walks it.
func decodeBody(t testing.TB, body []byte) []message.View {
	t.Helper()
	var out []message.View
	if err := message.ForEachRecord(body, true, func(v message.View) error {
		out = append(out, v)
		return nil
	}); err != nil {
		t.Fatalf("decode pull body: %v", err)
	}
	return out
}

func ext(resp *protocol.Command, key string) string {
	v, _ := resp.Ext.GetString(key)
	return v
}

// recorder is a client-side handler that records pushed requests.
type recorder struct {
	mu  sync.Mutex
	got []string // consumerGroup of each NOTIFY_CONSUMER_IDS_CHANGED
	ch  chan string
}

func newRecorder() *recorder { return &recorder{ch: make(chan string, 64)} }

func (r *recorder) ServeRemoting(_ *remoting.Conn, req *protocol.Command, _ *remoting.Response) remoting.Action {
	if req.Code == protocol.ReqNotifyConsumerIdsChanged {
		g, _ := req.Ext.GetString("consumerGroup")
		r.mu.Lock()
		r.got = append(r.got, g)
		r.mu.Unlock()
		select {
		case r.ch <- g:
		default:
		}
	}
	return remoting.NoReply
}

// waitNotify waits for a notification for group.
func (r *recorder) waitNotify(t testing.TB, group string) {
	t.Helper()
	timeout := time.After(wait.DefaultTimeout)
	for {
		select {
		case g := <-r.ch:
			if g == group {
				return
			}
		case <-timeout:
			t.Fatalf("no NOTIFY_CONSUMER_IDS_CHANGED for %s", group)
		}
	}
}

// drain empties the notification channel.
func (r *recorder) drain() {
	for {
		select {
		case <-r.ch:
		default:
			return
		}
	}
}

// waitHeld waits until the broker holds n pulls (parked, or woken and not
// yet answered).
func (h *harness) waitHeld(n int) {
	h.t.Helper()
	wait.Equal(h.t, "pulls held", n, func() int { return h.b.holds.Stats().Held })
}

// timeoutCtx is a context of internal/wait's bound, cancelled when the test
// ends.
func timeoutCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	tb.Cleanup(cancel)
	return ctx
}
