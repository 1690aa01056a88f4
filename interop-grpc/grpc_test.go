package interopgrpc

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
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
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
)

func all(topic string) map[string]*rmq.FilterExpression {
	return map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}
}

// TestProduceAndSimpleConsume: the 5.x producer's normal messages with a
// tag, keys and properties reach a 5.x simple consumer intact, once each.
func TestProduceAndSimpleConsume(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	p := b.producer(t, rmq.WithTopics("Normal"))
	const n = 20
	ids := map[string]int{}
	for i := 0; i < n; i++ {
		m := &rmq.Message{Topic: "Normal", Body: []byte(fmt.Sprintf("body-%d", i))}
		m.SetTag("TagA")
		m.SetKeys(fmt.Sprintf("key-%d", i), "common")
		m.AddProperty("index", strconv.Itoa(i))
		rs, err := p.Send(context.Background(), m)
		if err != nil || len(rs) != 1 || rs[0].MessageID == "" {
			t.Fatalf("send %d: %v %v", i, rs, err)
		}
		ids[rs[0].MessageID] = i
	}
	c := b.consumer(t, "NormalGroup", 2*time.Second, all("Normal"))
	got := receive(t, c, n, 30*time.Second, true)
	if len(got) != n {
		t.Fatalf("received %d of %d", len(got), n)
	}
	for _, mv := range got {
		i, ok := ids[mv.GetMessageId()]
		if !ok {
			t.Fatalf("unknown message id %s", mv.GetMessageId())
		}
		delete(ids, mv.GetMessageId())
		if string(mv.GetBody()) != fmt.Sprintf("body-%d", i) || mv.GetTag() == nil || *mv.GetTag() != "TagA" ||
			!slices.Contains(mv.GetKeys(), fmt.Sprintf("key-%d", i)) || mv.GetProperties()["index"] != strconv.Itoa(i) ||
			mv.GetDeliveryAttempt() != 1 || mv.GetBornTimestamp() == nil {
			t.Fatalf("message %d: body %q tag %v keys %v props %v attempt %d", i, mv.GetBody(), mv.GetTag(), mv.GetKeys(),
				mv.GetProperties(), mv.GetDeliveryAttempt())
		}
	}
	// All acked: nothing comes back.
	if more := receiveFor(t, c, 1, 30*time.Second, 3*time.Second, true); len(more) != 0 {
		t.Fatalf("%d messages came back after their ack", len(more))
	}
}

// TestFIFOPerGroup: messages of one message group reach an orderly group's
// simple consumer in order (consecutive ones may come in one receive), the
// next receive's not before the previous are acked, while another message
// group proceeds.
func TestFIFOPerGroup(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	b.createTopic(t, "Fifo", 4, "FIFO")
	b.updateGroup(t, "FifoGroup", true, 16)
	p := b.producer(t, rmq.WithTopics("Fifo"))
	groups := []string{"alpha", "beta", "gamma"}
	const per = 10
	for i := 0; i < per; i++ {
		for _, g := range groups {
			m := &rmq.Message{Topic: "Fifo", Body: []byte(fmt.Sprintf("%s-%d", g, i))}
			m.SetMessageGroup(g)
			if _, err := p.Send(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := b.consumer(t, "FifoGroup", 2*time.Second, all("Fifo"))
	next := map[string]int{}
	total := 0
	wait.For(t, "every group's messages in order", func() error {
		if total >= per*len(groups) {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		mvs, err := c.Receive(ctx, 32, 30*time.Second)
		cancel()
		if err != nil && codeOf(err) != codeMessageNotFound {
			t.Fatal(err)
		}
		for _, mv := range mvs {
			// A group's consecutive messages may come together (a batch,
			// as RocketMQ's FIFO receive), in order; none of a group comes
			// while an earlier receive's is in flight (all are acked below).
			g := *mv.GetMessageGroup()
			if want := fmt.Sprintf("%s-%d", g, next[g]); string(mv.GetBody()) != want {
				t.Fatalf("group %s: got %s, want %s", g, mv.GetBody(), want)
			}
			next[g]++
		}
		for _, mv := range mvs {
			if err := c.Ack(context.Background(), mv); err != nil {
				t.Fatal(err)
			}
		}
		total += len(mvs)
		if total < per*len(groups) {
			return fmt.Errorf("%d of %d received", total, per*len(groups))
		}
		return nil
	})
	for _, g := range groups {
		if next[g] != per {
			t.Fatalf("group %s: %d of %d", g, next[g], per)
		}
	}
}

// TestDelayMessage: a message with a delivery timestamp is not received
// before it.
func TestDelayMessage(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	b.createTopic(t, "Delay", 4, "DELAY") // an untyped topic is NORMAL (message_types_test.go)
	p := b.producer(t, rmq.WithTopics("Delay"))
	at := time.Now().Add(2 * time.Second)
	m := &rmq.Message{Topic: "Delay", Body: []byte("later")}
	m.SetDelayTimestamp(at)
	if _, err := p.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	c := b.consumer(t, "DelayGroup", time.Second, all("Delay"))
	got := receive(t, c, 1, 30*time.Second, true)
	if len(got) != 1 || string(got[0].GetBody()) != "later" {
		t.Fatalf("received %d", len(got))
	}
	if now := time.Now(); now.Before(at) {
		t.Fatalf("received %v before its delivery time", at.Sub(now))
	}
	if dt := got[0].GetDeliveryTimestamp(); dt == nil || dt.UnixMilli() != at.UnixMilli() {
		t.Fatalf("delivery timestamp %v, want %v", dt, at)
	}
}

// TestTransactions: commit delivers, rollback does not, and an unended
// transaction is checked back through the producer's checker.
func TestTransactions(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "transactionTimeOut=1000", "transactionCheckInterval=1000")
	b.createTopic(t, "Tx", 4, "TRANSACTION") // an untyped topic is NORMAL (message_types_test.go)
	var mu sync.Mutex
	checked := map[string]bool{}
	p := b.producer(t, rmq.WithTopics("Tx"), rmq.WithTransactionChecker(&rmq.TransactionChecker{
		Check: func(mv *rmq.MessageView) rmq.TransactionResolution {
			mu.Lock()
			defer mu.Unlock()
			checked[string(mv.GetBody())] = true
			return rmq.COMMIT
		}}))
	send := func(body string) rmq.Transaction {
		tx := p.BeginTransaction()
		if _, err := p.SendWithTransaction(context.Background(), &rmq.Message{Topic: "Tx", Body: []byte(body)}, tx); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	if err := send("committed").Commit(); err != nil {
		t.Fatal(err)
	}
	if err := send("rolled-back").RollBack(); err != nil {
		t.Fatal(err)
	}
	send("checked") // left unended: the broker asks the checker
	c := b.consumer(t, "TxGroup", time.Second, all("Tx"))
	got := receive(t, c, 2, 30*time.Second, true)
	var bodies []string
	for _, mv := range got {
		bodies = append(bodies, string(mv.GetBody()))
	}
	sort.Strings(bodies)
	if strings.Join(bodies, ",") != "checked,committed" {
		t.Fatalf("received %v", bodies)
	}
	mu.Lock()
	defer mu.Unlock()
	if !checked["checked"] || checked["committed"] || checked["rolled-back"] {
		t.Fatalf("checked: %v", checked)
	}
	if more := receiveFor(t, c, 1, 30*time.Second, 2*time.Second, true); len(more) != 0 {
		t.Fatalf("the rolled-back message came: %s", more[0].GetBody())
	}
}

// TestInvisibilityRetryAndDeadLetter: a message not acked comes back after
// its invisible duration (sooner after ChangeInvisibleDuration), with the
// delivery attempt raised, and after the group's retries goes to its
// dead-letter topic, which a consumer reads.
func TestInvisibilityRetryAndDeadLetter(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	b.updateGroup(t, "RetryGroup", false, 1) // two deliveries, then the DLQ
	p := b.producer(t, rmq.WithTopics("Retry"))
	if _, err := p.Send(context.Background(), &rmq.Message{Topic: "Retry", Body: []byte("poison")}); err != nil {
		t.Fatal(err)
	}
	c := b.consumer(t, "RetryGroup", time.Second, all("Retry"))
	first := receive(t, c, 1, time.Minute, false)
	if len(first) != 1 || first[0].GetDeliveryAttempt() != 1 {
		t.Fatalf("first delivery: %v", first)
	}
	// Hidden for a minute; made visible again in 100 ms.
	if err := c.ChangeInvisibleDuration(first[0], 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	second := receive(t, c, 1, 500*time.Millisecond, false)
	if len(second) != 1 || second[0].GetDeliveryAttempt() != 2 {
		t.Fatalf("second delivery: %v", second)
	}
	// Not acked again: after 500 ms it is past its retries.
	if third := receiveFor(t, c, 1, time.Minute, 3*time.Second, false); len(third) != 0 {
		t.Fatalf("delivered a third time (attempt %d)", third[0].GetDeliveryAttempt())
	}
	dlq := b.consumer(t, "DlqReader", time.Second, all("%DLQ%RetryGroup"))
	got := receive(t, dlq, 1, 30*time.Second, true)
	if len(got) != 1 || string(got[0].GetBody()) != "poison" {
		t.Fatalf("dead letter: %v", got)
	}
}

// TestFilters: tag and SQL92 subscriptions.
func TestFilters(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	p := b.producer(t, rmq.WithTopics("Filtered"))
	for i := 0; i < 10; i++ {
		m := &rmq.Message{Topic: "Filtered", Body: []byte(strconv.Itoa(i))}
		if i%2 == 0 {
			m.SetTag("even")
		} else {
			m.SetTag("odd")
		}
		m.AddProperty("n", strconv.Itoa(i))
		if _, err := p.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	tags := b.consumer(t, "TagGroup", time.Second, map[string]*rmq.FilterExpression{"Filtered": rmq.NewFilterExpression("even")})
	got := receive(t, tags, 5, 30*time.Second, true)
	for _, mv := range got {
		if *mv.GetTag() != "even" {
			t.Fatalf("tag filter passed %s", *mv.GetTag())
		}
	}
	if len(got) != 5 {
		t.Fatalf("tag filter: %d of 5", len(got))
	}
	sql := b.consumer(t, "SqlGroup", time.Second, map[string]*rmq.FilterExpression{
		"Filtered": rmq.NewFilterExpressionWithType("n BETWEEN 3 AND 5", rmq.SQL92)})
	got = receive(t, sql, 3, 30*time.Second, true)
	var ns []string
	for _, mv := range got {
		ns = append(ns, mv.GetProperties()["n"])
	}
	sort.Strings(ns)
	if strings.Join(ns, ",") != "3,4,5" {
		t.Fatalf("SQL92 filter: %v", ns)
	}
}

// TestCrossProtocol: a 4.x producer's messages reach a 5.x simple consumer,
// a 5.x producer's reach a 4.x push consumer.
func TestCrossProtocol(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	b.createTopic(t, "Cross", 4, "")
	ns := primitive.NewPassthroughResolver([]string{b.NsAddr})

	// 4.x → 5.x.
	// Instances of their own: the 4.x client library keys its instances by
	// name, and other tests' 4.x clients, in parallel, have other name
	// servers (GetOrNewRocketMQClient fails on a shared one).
	old, err := rocketmq.NewProducer(producer.WithNsResolver(ns), producer.WithGroupName("OldProducer"), producer.WithRetry(2),
		producer.WithInstanceName("CrossProducer4x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	defer old.Shutdown()
	for i := 0; i < 5; i++ {
		m := primitive.NewMessage("Cross", []byte(fmt.Sprintf("from-4x-%d", i)))
		m.WithTag("x").WithKeys([]string{"k4"})
		m.WithProperty("origin", "4x")
		if r, err := old.SendSync(context.Background(), m); err != nil || r.Status != primitive.SendOK {
			t.Fatalf("4.x send: %v %v", r, err)
		}
	}
	c := b.consumer(t, "New5xGroup", time.Second, all("Cross"))
	got := receive(t, c, 5, 30*time.Second, true)
	if len(got) != 5 {
		t.Fatalf("the 5.x consumer received %d of 5", len(got))
	}
	for _, mv := range got {
		if !strings.HasPrefix(string(mv.GetBody()), "from-4x-") || *mv.GetTag() != "x" || mv.GetProperties()["origin"] != "4x" ||
			!slices.Contains(mv.GetKeys(), "k4") || mv.GetMessageId() == "" {
			t.Fatalf("4.x message seen by 5.x: body %q tag %v props %v keys %v", mv.GetBody(), mv.GetTag(), mv.GetProperties(), mv.GetKeys())
		}
	}

	// 5.x → 4.x.
	p := b.producer(t, rmq.WithTopics("Cross2"))
	for i := 0; i < 5; i++ {
		m := &rmq.Message{Topic: "Cross2", Body: []byte(fmt.Sprintf("from-5x-%d", i))}
		m.SetTag("y")
		m.AddProperty("origin", "5x")
		if _, err := p.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	recv := make(chan *primitive.MessageExt, 16)
	pc, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(ns), consumer.WithGroupName("Old4xGroup"),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset), consumer.WithInstance("CrossConsumer4x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Subscribe("Cross2", consumer.MessageSelector{Type: consumer.TAG, Expression: "y"},
		func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			for _, m := range ms {
				recv <- m
			}
			return consumer.ConsumeSuccess, nil
		}); err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer pc.Shutdown()
	seen := map[string]bool{}
	timeout := time.After(wait.DefaultTimeout) // a bound on a hung test only
	for len(seen) < 5 {
		select {
		case m := <-recv:
			if m.GetTags() != "y" || m.GetProperty("origin") != "5x" {
				t.Fatalf("5.x message seen by 4.x: %v", m)
			}
			seen[string(m.Body)] = true
		case <-timeout:
			t.Fatalf("the 4.x consumer received %d of 5", len(seen))
		}
	}
}

// childEnv runs the test binary as a 5.x consumer that receives and is
// killed before it acks (TestKilledConsumer).
const childEnv = "APOGEE_INTEROP_GRPC_CHILD"

func runChild() int {
	c, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: os.Getenv(childEnv), ConsumerGroup: "KillGroup",
		Credentials: &credentials.SessionCredentials{}}, rmq.WithSimpleAwaitDuration(time.Second),
		rmq.WithSimpleSubscriptionExpressions(all("Kill")))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if err := c.Start(); err != nil {
		fmt.Println("error", err)
		return 1
	}
	n := 0
	var failed error
	_ = wait.Poll(wait.DefaultTimeout, func() error {
		mvs, err := c.Receive(context.Background(), 3, 3*time.Second)
		if err != nil && codeOf(err) != codeMessageNotFound {
			failed = err
			return nil
		}
		if n += len(mvs); n < 3 {
			return fmt.Errorf("%d received", n)
		}
		return nil
	})
	if failed != nil {
		fmt.Println("error", failed)
		return 1
	}
	fmt.Println("received", n)
	select {} // killed here, without acking
}

// TestKilledConsumer: a consumer killed (SIGKILL) without acking does not
// lose its messages: they come back after their invisible duration.
func TestKilledConsumer(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	p := b.producer(t, rmq.WithTopics("Kill"))
	for i := 0; i < 3; i++ {
		if _, err := p.Send(context.Background(), &rmq.Message{Topic: "Kill", Body: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+b.GrpcAddr)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// The child's log goes to a file of the test, printed if it fails.
	logPath := filepath.Join(t.TempDir(), "consumer-child.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	child.Stderr = logFile
	t.Cleanup(func() {
		if t.Failed() {
			testlog.Print(t, logPath)
		}
	})
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n') // its one line, once it received (or failed)
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()
	if strings.TrimSpace(line) != "received 3" {
		t.Fatalf("child: %q", line)
	}
	killedAt := time.Now()
	c := b.consumer(t, "KillGroup", time.Second, all("Kill"))
	got := receive(t, c, 3, 30*time.Second, true)
	if len(got) != 3 {
		t.Fatalf("%d of 3 came back", len(got))
	}
	for _, mv := range got {
		if mv.GetDeliveryAttempt() != 2 {
			t.Fatalf("delivery attempt %d, want 2", mv.GetDeliveryAttempt())
		}
	}
	// How soon is reported, not bounded: their invisible duration (3 s)
	// is a lower bound only, and a loaded machine adds to it.
	t.Logf("they came back %v after the consumer was killed", time.Since(killedAt).Round(time.Millisecond))
}

// rawClient is a gRPC connection with the official generated stubs, for
// the requests the 5.x client has no API for or checks itself first.
func rawClient(t *testing.T, b *broker) (v2.MessagingServiceClient, *grpc.ClientConn, context.Context) {
	t.Helper()
	cc, err := grpc.Dial(b.GrpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	ctx = metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", "raw-"+t.Name())
	return v2.NewMessagingServiceClient(cc), cc, ctx
}

// TestBadRequests: an unknown topic, an oversized body and a malformed
// filter are answered with their codes, and the broker keeps serving.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "autoCreateTopicEnable=false")
	b.createTopic(t, "Known", 2, "")

	// Unknown topic: the producer cannot start.
	np, err := rmq.NewProducer(b.config(""), rmq.WithTopics("Unknown"))
	if err != nil {
		t.Fatal(err)
	}
	if err := np.Start(); err == nil || !strings.Contains(err.Error(), "TOPIC_NOT_FOUND") {
		t.Fatalf("start with an unknown topic: %v", err)
	}

	// Oversized body (the client checks sizes itself: a raw request).
	cli, _, ctx := rawClient(t, b)
	big := make([]byte, 4<<20+1)
	r, err := cli.SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{{Topic: &v2.Resource{Name: "Known"}, Body: big,
		SystemProperties: &v2.SystemProperties{MessageId: "big", BodyEncoding: v2.Encoding_IDENTITY, MessageType: v2.MessageType_NORMAL,
			BornTimestamp: timestamppb.Now()}}}})
	if err != nil || r.GetStatus().GetCode() != v2.Code_MESSAGE_BODY_TOO_LARGE {
		t.Fatalf("oversized body: %v %v", r.GetStatus(), err)
	}

	// Malformed SQL92 filter.
	bad := b.consumer(t, "BadFilterGroup", time.Second, map[string]*rmq.FilterExpression{
		"Known": rmq.NewFilterExpressionWithType("a >", rmq.SQL92)})
	_, err = bad.Receive(context.Background(), 1, 10*time.Second)
	if codeOf(err) != int32(v2.Code_ILLEGAL_FILTER_EXPRESSION) {
		t.Fatalf("malformed filter: %v", err)
	}

	// Still serving.
	p := b.producer(t, rmq.WithTopics("Known"))
	if _, err := p.Send(context.Background(), &rmq.Message{Topic: "Known", Body: []byte("fine")}); err != nil {
		t.Fatal(err)
	}
	c := b.consumer(t, "GoodGroup", time.Second, all("Known"))
	if got := receive(t, c, 1, 30*time.Second, true); len(got) != 1 {
		t.Fatal("the broker stopped serving after the bad requests")
	}
}

// TestRecall: a delayed message recalled before its time is never
// delivered; another one is. The SDK's own Recall (v5.1.4) with the handle
// of its send receipt.
func TestRecall(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	b.createTopic(t, "Recall", 4, "DELAY")
	p := b.producer(t, rmq.WithTopics("Recall"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	at := time.Now().Add(2 * time.Second)
	send := func(body string) string {
		m := &rmq.Message{Topic: "Recall", Body: []byte(body)}
		m.SetDelayTimestamp(at)
		r, err := p.Send(ctx, m)
		if err != nil {
			t.Fatalf("send %s: %v", body, err)
		}
		if len(r) != 1 || r[0].RecallHandle == "" {
			t.Fatalf("send %s: receipts %+v, want one with a recall handle", body, r)
		}
		return r[0].RecallHandle
	}
	send("kept")
	handle := send("recalled")
	if _, err := p.Recall(ctx, "Recall", handle); err != nil {
		t.Fatalf("recall: %v", err)
	}
	c := b.consumer(t, "RecallGroup", time.Second, all("Recall"))
	got := receiveFor(t, c, 2, 30*time.Second, 8*time.Second, true)
	if len(got) != 1 || string(got[0].GetBody()) != "kept" {
		var bodies []string
		for _, mv := range got {
			bodies = append(bodies, string(mv.GetBody()))
		}
		t.Fatalf("received %v, want only the kept one", bodies)
	}
}

// TestPushConsumer: the SDK's PushConsumer (v5.1.4) receives every message
// of a topic through its assignments and acks them by returning SUCCESS;
// a message its listener fails comes back and is consumed again.
func TestPushConsumer(t *testing.T) {
	t.Parallel()
	b := startBroker(t)
	b.createTopic(t, "Push", 4, "")
	p := b.producer(t, rmq.WithTopics("Push"))
	const n = 40
	var mu sync.Mutex
	seen := map[string]int{} // body → deliveries
	failed := false
	c, err := rmq.NewPushConsumer(b.config("PushGroup"), rmq.WithPushSubscriptionExpressions(all("Push")),
		rmq.WithPushAwaitDuration(time.Second), rmq.WithPushConsumptionThreadCount(4),
		rmq.WithPushMessageListener(&rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
			mu.Lock()
			defer mu.Unlock()
			body := string(mv.GetBody())
			seen[body]++
			if body == "push-7" && !failed {
				failed = true // once: it must come back
				return rmq.FAILURE
			}
			return rmq.SUCCESS
		}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("push consumer start: %v", err)
	}
	t.Cleanup(func() { c.GracefulStop() })
	for i := 0; i < n; i++ {
		if _, err := p.Send(context.Background(), &rmq.Message{Topic: "Push", Body: []byte(fmt.Sprintf("push-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, "every message consumed, the failed one twice", func() error {
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i < n; i++ {
			want := 1
			if i == 7 {
				want = 2
			}
			if got := seen[fmt.Sprintf("push-%d", i)]; got < want {
				return fmt.Errorf("push-%d delivered %d times (want %d); %d bodies seen", i, got, want, len(seen))
			}
		}
		return nil
	})
}
