package interop

// Messaging features with the official Go client (the features issue):
// retries with the client's delay level, the dead-letter queue after
// maxReconsumeTimes, delay levels and delivery timestamps, transactions
// (committed, rolled back, unknown then committed by the broker's check),
// orderly consumption per sharding key, SQL92 and tag subscriptions, and a
// SIGKILL of the broker holding delayed messages, timers and unresolved
// transactions. Run with: cd interop && go test -race -run Features ./...

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/apogeemq/apogee/internal/wait"
)

// featAttempt is one delivery of a message to a push consumer.
type featAttempt struct {
	at        time.Time
	reconsume int32
	topic     string
	msgID     string
}

// featAttempts records every delivery by body.
type featAttempts struct {
	mu sync.Mutex
	m  map[string][]featAttempt
}

func newFeatAttempts() *featAttempts { return &featAttempts{m: map[string][]featAttempt{}} }

func (a *featAttempts) add(m *primitive.MessageExt) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := string(m.Body)
	a.m[k] = append(a.m[k], featAttempt{at: time.Now(), reconsume: m.ReconsumeTimes, topic: m.Topic, msgID: m.MsgId})
	return len(a.m[k])
}

func (a *featAttempts) get(body string) []featAttempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]featAttempt(nil), a.m[body]...)
}

func (a *featAttempts) countAtLeast(bodies []string, n int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, b := range bodies {
		if len(a.m[b]) < n {
			return false
		}
	}
	return true
}

// featPush starts a push consumer of topic with a consume function.
func featPush(t *testing.T, b *Broker, group, topic string, sel consumer.MessageSelector,
	fn func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error), extra ...consumer.Option) {
	t.Helper()
	c, err := consumer.NewPushConsumer(consumerOpts(b, group, extra...)...)
	if err != nil {
		t.Fatalf("new push consumer: %v", err)
	}
	if err := c.Subscribe(topic, sel, fn); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("push consumer start: %v", err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
}

// featWaitRoute waits until the embedded name server serves a route of topic
// (the broker creates %RETRY% and %DLQ% topics itself).
func featWaitRoute(t *testing.T, b *Broker, topic string) {
	t.Helper()
	rc := dialRaw(t, b.NsAddr)
	defer rc.Close()
	wait.Until(t, "a route of "+topic, func() bool {
		return rc.Invoke(t, request(105, map[string]string{"topic": topic}, nil)).Code == 0
	})
}

// TestFeaturesRetryWithClientDelayLevel: a consumer fails each message
// twice, asking for delay level 1 (1 s); the broker brings each back through
// %RETRY%<group> after the delay with reconsumeTimes 1, then 2, under its
// original topic and message id.
func TestFeaturesRetryWithClientDelayLevel(t *testing.T) {
	b := startBroker(t)
	p := newProducer(t, b)
	topic, group := uniq("TRetry"), uniq("GRetry")
	createTopic(t, b, topic, 2)
	att := newFeatAttempts()
	featPush(t, b, group, topic, all, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		fail := false
		for _, m := range msgs {
			if att.add(m) <= 2 {
				fail = true
			}
		}
		if fail {
			cc, ok := primitive.GetConcurrentlyCtx(ctx)
			if !ok {
				t.Error("no concurrently context")
				return consumer.ConsumeRetryLater, nil
			}
			cc.DelayLevelWhenNextConsume = 1
			return consumer.ConsumeRetryLater, nil
		}
		return consumer.ConsumeSuccess, nil
	}, consumer.WithConsumeMessageBatchMaxSize(1))
	want := bodies("retry", 10)
	sendAll(t, p, topic, "", want)
	wait.Until(t, "every message consumed 3 times", func() bool { return att.countAtLeast(want, 3) })
	for _, body := range want {
		as := att.get(body)
		for i, a := range as[:3] {
			if a.reconsume != int32(i) || a.topic != topic || a.msgID != as[0].msgID {
				t.Errorf("%s featAttempt %d: reconsumeTimes %d topic %s msgId %s (first %s)", body, i, a.reconsume, a.topic, a.msgID, as[0].msgID)
			}
			if i > 0 {
				if gap := a.at.Sub(as[i-1].at); gap < 900*time.Millisecond {
					t.Errorf("%s featAttempt %d came back after %v, before delay level 1 (1 s)", body, i, gap)
				}
			}
		}
	}
	// Two seconds more (twice delay level 1) for a fourth attempt to show
	// up if there were one: an absence is checked over a span, not waited
	// for.
	time.Sleep(2 * time.Second)
	for _, body := range want {
		if n := len(att.get(body)); n != 3 {
			t.Errorf("%s consumed %d times, want 3", body, n)
		}
	}
}

// TestFeaturesDLQ: with maxReconsumeTimes 2, a message that always fails
// is consumed three times and then lands in %DLQ%<group>, which any
// consumer can read.
func TestFeaturesDLQ(t *testing.T) {
	b := startBroker(t)
	p := newProducer(t, b)
	topic, group := uniq("TDlq"), uniq("GDlq")
	createTopic(t, b, topic, 1)
	att := newFeatAttempts()
	featPush(t, b, group, topic, all, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			att.add(m)
		}
		if cc, ok := primitive.GetConcurrentlyCtx(ctx); ok {
			cc.DelayLevelWhenNextConsume = 1
		}
		return consumer.ConsumeRetryLater, nil
	}, consumer.WithMaxReconsumeTimes(2), consumer.WithConsumeMessageBatchMaxSize(1))
	want := bodies("dead", 5)
	sendAll(t, p, topic, "", want)
	wait.Until(t, "three featAttempts of each", func() bool { return att.countAtLeast(want, 3) })

	dlq := "%DLQ%" + group
	featWaitRoute(t, b, dlq)
	rec := newRecorder()
	startPush(t, b, uniq("GDlqReader"), dlq, all, rec)
	wait.Until(t, "the dead letters", func() bool { return rec.distinct() == len(want) })
	if m := missing(rec, want); m != "" {
		t.Fatalf("not in the DLQ: %s", m)
	}
	rec.mu.Lock()
	for _, m := range rec.msgs {
		if m.ReconsumeTimes != 3 || m.GetProperty(primitive.PropertyRetryTopic) != topic {
			t.Errorf("dead letter %s: reconsumeTimes %d RETRY_TOPIC %q", m.Body, m.ReconsumeTimes, m.GetProperty(primitive.PropertyRetryTopic))
		}
	}
	rec.mu.Unlock()
	for _, body := range want {
		if n := len(att.get(body)); n != 3 {
			t.Errorf("%s consumed %d times before the DLQ, want 3", body, n)
		}
	}
}

// featArrivals records when each body arrived.
type featArrivals struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func newFeatArrivals() *featArrivals { return &featArrivals{at: map[string][]time.Time{}} }

func (a *featArrivals) handler(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range msgs {
		a.at[string(m.Body)] = append(a.at[string(m.Body)], time.Now())
	}
	return consumer.ConsumeSuccess, nil
}

func (a *featArrivals) first(body string) (time.Time, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.at[body]) == 0 {
		return time.Time{}, 0
	}
	return a.at[body][0], len(a.at[body])
}

// TestFeaturesDelayAndTimestamp: delay levels 1 (1 s) and 2 (5 s), and
// delivery timestamps (WithDelayTimestamp), arrive at their time, not before.
func TestFeaturesDelayAndTimestamp(t *testing.T) {
	b := startBroker(t)
	p := newProducer(t, b)
	topic := uniq("TDelay")
	createTopic(t, b, topic, 4)
	arr := newFeatArrivals()
	featPush(t, b, uniq("GDelay"), topic, all, arr.handler)
	due := map[string]time.Time{}
	send := func(body string, dueAt time.Time, opt func(*primitive.Message)) {
		m := primitive.NewMessage(topic, []byte(body))
		opt(m)
		if _, err := p.SendSync(context.Background(), m); err != nil {
			t.Fatalf("send %s: %v", body, err)
		}
		due[body] = dueAt
	}
	now := time.Now()
	send("plain", now, func(*primitive.Message) {})
	send("level1", now.Add(time.Second), func(m *primitive.Message) { m.WithDelayTimeLevel(1) })
	send("level2", now.Add(5*time.Second), func(m *primitive.Message) { m.WithDelayTimeLevel(2) })
	for _, d := range []time.Duration{2 * time.Second, 3500 * time.Millisecond, 6 * time.Second} {
		at := now.Add(d)
		send("at+"+d.String(), at, func(m *primitive.Message) { m.WithDelayTimestamp(at) })
	}
	wait.Until(t, "every delayed message", func() bool {
		for body := range due {
			if _, n := arr.first(body); n == 0 {
				return false
			}
		}
		return true
	})
	// Never early; how late is reported, not bounded (a loaded machine
	// delays delivery; the timer's precision is the benchmarks' to
	// measure).
	var latest time.Duration
	for body, d := range due {
		got, n := arr.first(body)
		if n != 1 {
			t.Errorf("%s delivered %d times", body, n)
		}
		if got.Before(d.Add(-50 * time.Millisecond)) {
			t.Errorf("%s arrived %v before its time", body, d.Sub(got))
		}
		latest = max(latest, got.Sub(d))
	}
	t.Logf("the latest delivery came %v after its time", latest.Round(time.Millisecond))
}

// featTxListener decides each local transaction by the message body's prefix;
// the broker's checks are answered commit.
type featTxListener struct {
	mu     sync.Mutex
	checks map[string]int
}

func (l *featTxListener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	switch {
	case strings.HasPrefix(string(m.Body), "commit"):
		return primitive.CommitMessageState
	case strings.HasPrefix(string(m.Body), "rollback"):
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

func (l *featTxListener) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	l.mu.Lock()
	l.checks[string(m.Body)]++
	l.mu.Unlock()
	return primitive.CommitMessageState
}

func (l *featTxListener) checked(body string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checks[body]
}

func newFeatTxProducer(t *testing.T, b *Broker, l *featTxListener) rocketmq.TransactionProducer {
	t.Helper()
	p, err := rocketmq.NewTransactionProducer(l,
		producer.WithNsResolver(b.NameServer()),
		producer.WithGroupName(uniq("PGTx")),
		producer.WithInstanceName(uniq("ptx")),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("new transaction producer: %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("transaction producer start: %v", err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

// TestFeaturesTransactions: one transaction committed, one rolled back and
// one left unknown, which the broker checks back after the transaction
// timeout (6 s) and the producer commits.
func TestFeaturesTransactions(t *testing.T) {
	b := startBroker(t)
	topic := uniq("TTx")
	createTopic(t, b, topic, 2)
	l := &featTxListener{checks: map[string]int{}}
	p := newFeatTxProducer(t, b, l)
	rec := newRecorder()
	startPush(t, b, uniq("GTx"), topic, all, rec)
	for _, body := range []string{"commit-1", "rollback-1", "unknown-1"} {
		res, err := p.SendMessageInTransaction(context.Background(), primitive.NewMessage(topic, []byte(body)))
		if err != nil {
			t.Fatalf("send %s: %v", body, err)
		}
		if res.Status != primitive.SendOK {
			t.Fatalf("send %s: %v", body, res.Status)
		}
	}
	wait.Until(t, "the committed message", func() bool { return rec.has("commit-1") })
	wait.Until(t, "the checked-back message", func() bool { return rec.has("unknown-1") })
	if n := l.checked("unknown-1"); n < 1 {
		t.Errorf("unknown-1 checked %d times", n)
	}
	// A span for the rolled-back message to show up if it were delivered:
	// an absence is checked over a span, not waited for.
	time.Sleep(2 * time.Second)
	if rec.has("rollback-1") {
		t.Error("the rolled-back message was delivered")
	}
	for _, body := range []string{"commit-1", "rollback-1"} {
		if n := l.checked(body); n != 0 {
			t.Errorf("%s checked back %d times", body, n)
		}
	}
	if s := rec.snapshot(); s["commit-1"] != 1 || s["unknown-1"] != 1 {
		t.Errorf("deliveries %v", s)
	}
}

// TestFeaturesOrderly: messages of five sharding keys go to queues by hash;
// an orderly consumer (which locks its queues with LOCK_BATCH_MQ) sees each
// key's messages in send order.
func TestFeaturesOrderly(t *testing.T) {
	if raceEnabled {
		// The client's orderly path checks msgCache.Empty() without the
		// lock putMessage holds (consumer/process_queue.go:313): a data race
		// in the client, reported under -race. See TestOrderlyConsumer.
		t.Skip("the client's orderly consumer races with itself under -race; run without -race")
	}
	b := startBroker(t)
	p := newProducer(t, b, producer.WithQueueSelector(producer.NewHashQueueSelector()))
	topic := uniq("TOrder")
	createTopic(t, b, topic, 4)
	var mu sync.Mutex
	seq := map[string][]int{}
	featPush(t, b, uniq("GOrder"), topic, all, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			key, n, _ := strings.Cut(string(m.Body), ":")
			i, _ := strconv.Atoi(n)
			seq[key] = append(seq[key], i)
		}
		return consumer.ConsumeSuccess, nil
	}, consumer.WithConsumerOrder(true))
	const keys, per = 5, 40
	for i := 0; i < per; i++ {
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("order-%d", k)
			m := primitive.NewMessage(topic, []byte(fmt.Sprintf("%s:%d", key, i)))
			m.WithShardingKey(key)
			if _, err := p.SendSync(context.Background(), m); err != nil {
				t.Fatalf("send: %v", err)
			}
		}
	}
	wait.Until(t, "every ordered message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, s := range seq {
			n += len(s)
		}
		return n >= keys*per
	})
	mu.Lock()
	defer mu.Unlock()
	for key, s := range seq {
		for i, v := range s {
			if v != i {
				t.Fatalf("%s consumed out of order: %v", key, s)
			}
		}
	}
}

// TestFeaturesSQL92AndTags: an SQL92 subscription over user properties and
// TAGS, and a tag subscription, each get exactly their messages.
func TestFeaturesSQL92AndTags(t *testing.T) {
	b := startBroker(t)
	p := newProducer(t, b)
	topic := uniq("TSql")
	createTopic(t, b, topic, 4)
	sqlRec, tagRec := newRecorder(), newRecorder()
	startPush(t, b, uniq("GSql"), topic, consumer.MessageSelector{Type: consumer.SQL92,
		Expression: "n BETWEEN 10 AND 19 AND (color = 'red' OR TAGS = 'TagB') AND region IS NOT NULL"}, sqlRec)
	startPush(t, b, uniq("GTagSel"), topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "TagA || TagC"}, tagRec)
	var wantSQL, wantTag []string
	colors := []string{"red", "blue"}
	tags := []string{"TagA", "TagB", "TagC"}
	for i := 0; i < 40; i++ {
		body := fmt.Sprintf("m-%02d", i)
		m := primitive.NewMessage(topic, []byte(body))
		color, tag := colors[i%2], tags[i%3]
		m.WithTag(tag)
		m.WithProperty("n", strconv.Itoa(i))
		m.WithProperty("color", color)
		if i%5 != 0 {
			m.WithProperty("region", "eu")
		}
		if _, err := p.SendSync(context.Background(), m); err != nil {
			t.Fatalf("send: %v", err)
		}
		if i >= 10 && i <= 19 && (color == "red" || tag == "TagB") && i%5 != 0 {
			wantSQL = append(wantSQL, body)
		}
		if tag == "TagA" || tag == "TagC" {
			wantTag = append(wantTag, body)
		}
	}
	wait.Until(t, "the SQL92 matches", func() bool { return sqlRec.distinct() >= len(wantSQL) })
	wait.Until(t, "the tag matches", func() bool { return tagRec.distinct() >= len(wantTag) })
	time.Sleep(time.Second) // a span for an extra match to show up: an absence is checked over a span
	if m := missing(sqlRec, wantSQL); m != "" {
		t.Errorf("SQL92 subscriber missed %s", m)
	}
	if m := missing(tagRec, wantTag); m != "" {
		t.Errorf("tag subscriber missed %s", m)
	}
	if n := sqlRec.distinct(); n != len(wantSQL) {
		t.Errorf("SQL92 subscriber got %d messages, want %d: %v", n, len(wantSQL), sqlRec.snapshot())
	}
	if n := tagRec.distinct(); n != len(wantTag) {
		t.Errorf("tag subscriber got %d messages, want %d", n, len(wantTag))
	}
}

// TestFeaturesCrashSIGKILL kills the broker (SIGKILL) while it holds
// delayed messages, timers and an unresolved transaction, and starts it
// again on the same data: each delayed message and timer is delivered once
// it is due (never before), and the transaction is checked back and
// committed.
func TestFeaturesCrashSIGKILL(t *testing.T) {
	b := startBroker(t)
	p := newProducer(t, b)
	topic := uniq("TCrash")
	createTopic(t, b, topic, 2)
	l := &featTxListener{checks: map[string]int{}}
	tp := newFeatTxProducer(t, b, l)

	start := time.Now()
	due := map[string]time.Time{}
	for i := 0; i < 10; i++ {
		body := fmt.Sprintf("delay-%d", i)
		m := primitive.NewMessage(topic, []byte(body)).WithDelayTimeLevel(2) // 5 s
		sent := time.Now()
		if _, err := p.SendSync(context.Background(), m); err != nil {
			t.Fatalf("send: %v", err)
		}
		due[body] = sent.Add(5 * time.Second)
	}
	for i := 0; i < 10; i++ {
		body := fmt.Sprintf("timer-%d", i)
		at := start.Add(time.Duration(3000+400*i) * time.Millisecond)
		m := primitive.NewMessage(topic, []byte(body))
		m.WithDelayTimestamp(at)
		if _, err := p.SendSync(context.Background(), m); err != nil {
			t.Fatalf("send: %v", err)
		}
		due[body] = at
	}
	for _, body := range []string{"unknown-crash-1", "unknown-crash-2"} {
		if _, err := tp.SendMessageInTransaction(context.Background(), primitive.NewMessage(topic, []byte(body))); err != nil {
			t.Fatalf("transactional send: %v", err)
		}
	}
	// Everything sent is dispatched (the delay queues, the timer wheel and
	// the half queue hold it) when the broker is killed.
	wait.Equal(t, "the broker's dispatch caught up", "0", func() string { return runtimeInfo(t, b.Addr)["dispatchBehindBytes"] })
	b.Kill()
	b.Restart()

	arr := newFeatArrivals()
	featPush(t, b, uniq("GCrash"), topic, all, arr.handler)
	wait.Within(t, 90*time.Second, "every delayed message, timer and checked transaction", func() error {
		for body := range due {
			if _, n := arr.first(body); n == 0 {
				return fmt.Errorf("%s not delivered", body)
			}
		}
		for _, body := range []string{"unknown-crash-1", "unknown-crash-2"} {
			if _, n := arr.first(body); n == 0 {
				return fmt.Errorf("%s not delivered", body)
			}
		}
		return nil
	})
	for body, d := range due {
		got, n := arr.first(body)
		if got.Before(d.Add(-50 * time.Millisecond)) {
			t.Errorf("%s delivered %v before its time", body, d.Sub(got))
		}
		if n != 1 {
			t.Errorf("%s delivered %d times", body, n)
		}
	}
	if l.checked("unknown-crash-1") == 0 || l.checked("unknown-crash-2") == 0 {
		t.Errorf("transactions not checked back: %v", l.checks)
	}
}

// TestFeaturesResetOffset: the admin reset-offset request (222) moves a
// group back to a timestamp; the broker pushes RESET_CONSUMER_CLIENT_OFFSET
// (220) and the Go client consumes everything again.
func TestFeaturesResetOffset(t *testing.T) {
	if raceEnabled {
		// The client's RESET_CONSUMER_CLIENT_OFFSET handler clears its
		// process queues (processQueue.clear, consumer/process_queue.go:387,
		// under the queue's lock) while its pull loop reads the same field
		// without it (pushConsumer.pullMessage, consumer/push_consumer.go:871):
		// a data race inside the client, reported under -race in about one
		// run in four once the reset follows the committed offsets (a fixed
		// 6 s sleep before the reset happened to avoid it, 12 runs of 12).
		// See TestOrderlyConsumer.
		t.Skip("the client's ResetOffset races with its own pull loop under -race; run without -race")
	}
	b := startBroker(t)
	p := newProducer(t, b)
	topic, group := uniq("TReset"), uniq("GReset")
	createTopic(t, b, topic, 2)
	before := time.Now().Add(-time.Second).UnixMilli()
	want := bodies("reset", 20)
	sendAll(t, p, topic, "", want)
	rec := newRecorder()
	startPush(t, b, group, topic, all, rec)
	wait.Until(t, "the first pass", func() bool { return rec.distinct() == len(want) })
	// The client commits its offsets every 5 s: wait until the broker has
	// them, so that the reset moves the group back from the end.
	waitCommitted(t, b, topic, group, 2, int64(len(want)))
	rc := dialRaw(t, b.Addr)
	defer rc.Close()
	resp := rc.Invoke(t, request(222, map[string]string{"topic": topic, "group": group,
		"timestamp": strconv.FormatInt(before, 10), "isForce": "true"}, nil))
	if resp.Code != 0 || !strings.Contains(string(resp.Body), `"queueId":1,"topic":"`+topic+`"}:0`) {
		t.Fatalf("reset offset: %d %s %s", resp.Code, resp.Remark, resp.Body)
	}
	wait.Until(t, "the second pass", func() bool {
		for _, n := range rec.snapshot() {
			if n < 2 {
				return false
			}
		}
		return true
	})
}
