package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// Request-reply with Apogee's client on both sides, through an apogee-broker process:
// Producer.Request waits for the reply a push consumer's listener sends with
// Producer.Reply (SEND_REPLY_MESSAGE_V2, pushed back as PUSH_REPLY_MESSAGE_TO_CLIENT).

var (
	brokerBinOnce sync.Once
	brokerBinDir  string // removed by TestMain
	brokerBinPath string
	brokerBinErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if brokerBinDir != "" {
		os.RemoveAll(brokerBinDir)
	}
	os.Exit(code)
}

// brokerProcess builds apogee-broker once per test binary and starts it on
// 127.0.0.1:0 (its embedded name server too), with its data in t.TempDir().
func brokerProcess(t *testing.T, extra ...string) (addr, namesrv string) {
	t.Helper()
	brokerBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "apogee-client-test-")
		if err != nil {
			brokerBinErr = err
			return
		}
		brokerBinDir = dir
		brokerBinPath = filepath.Join(dir, "apogee-broker")
		out, err := exec.Command("go", "build", "-o", brokerBinPath, "../cmd/apogee-broker").CombinedOutput()
		if err != nil {
			brokerBinErr = fmt.Errorf("go build ../cmd/apogee-broker: %v\n%s", err, out)
		}
	})
	if brokerBinErr != nil {
		t.Fatal(brokerBinErr)
	}
	args := append([]string{"--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0", "--ha-listen", "", "--grpc-listen", "",
		"--data-dir", t.TempDir()}, extra...)
	p := proctest.Start(t, "apogee-broker", brokerBinPath, args...)
	return p.Ready.Advertise, p.Ready.Namesrv
}

// replier starts a push consumer of topic whose listener answers every request with
// answer(body), through a producer of the same instance.
func replier(t *testing.T, ns, topic string, answer func([]byte) []byte) {
	t.Helper()
	p := realProducer(t, ns, client.CompressOver(1024))
	c := realPush(t, ns, client.ConsumerGroup("G-"+topic), client.Subscribe(topic, "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset),
		client.WithConcurrentListener(func(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			for _, m := range msgs {
				if _, err := p.Reply(ctx, m, answer(m.Body)); err != nil {
					t.Logf("Reply: %v", err)
					return client.ConsumeRetryLater
				}
			}
			return client.ConsumeSuccess
		}))
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestRequestReplyProcess(t *testing.T) {
	addr, ns := brokerProcess(t)
	const topic = "RR"
	createTopicAt(t, addr, topic)
	big := bytes.Repeat([]byte("a compressible body "), 500) // zlib both ways
	replier(t, ns, topic, func(b []byte) []byte { return append([]byte("re:"), b...) })
	requester := realProducer(t, ns, client.InstanceName("requester"), client.CompressOver(1024))

	// Concurrent requests: each gets its own reply (the correlation ids).
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Appendf(nil, "q-%d", i)
			if i%5 == 0 {
				body = append(body, big...)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			reply, err := requester.Request(ctx, &client.Message{Topic: topic, Body: body})
			if err != nil {
				errs <- fmt.Errorf("request %d: %w", i, err)
				return
			}
			if want := append([]byte("re:"), body...); !bytes.Equal(reply.Body, want) {
				errs <- fmt.Errorf("request %d: reply of %d bytes %.20q, want %d bytes %.20q", i, len(reply.Body), reply.Body, len(want), want)
				return
			}
			if reply.Topic != "DefaultCluster_REPLY_TOPIC" || reply.Property(message.PropMsgType) != "reply" ||
				reply.Property(message.PropPushReplyTime) == "" || !reply.StoreHost.IsValid() {
				errs <- fmt.Errorf("request %d: reply %v properties %v", i, reply, reply.Properties)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A request nobody answers ends at its context's deadline, or after ReplyTimeout
// without one, with ErrReplyTimeout; the request itself was sent.
func TestRequestTimeoutProcess(t *testing.T) {
	addr, ns := brokerProcess(t)
	createTopicAt(t, addr, "RRT")
	p := realProducer(t, ns, client.ReplyTimeout(500*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := p.Request(ctx, &client.Message{Topic: "RRT", Body: []byte("nobody")})
	if !errors.Is(err, client.ErrReplyTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Request: %v, want ErrReplyTimeout", err)
	}
	if time.Since(start) < time.Second-50*time.Millisecond {
		t.Fatalf("gave up after %v, before the context's deadline", time.Since(start))
	}
	if _, err := p.Request(context.Background(), &client.Message{Topic: "RRT", Body: []byte("nobody")}); !errors.Is(err, client.ErrReplyTimeout) {
		t.Fatalf("Request without a deadline: %v, want ErrReplyTimeout after ReplyTimeout", err)
	}
}

// A reply to a requester that is gone: the broker answers SYSTEM_ERROR naming it
// (after the producer's retries, the send fails), and keeps the reply stored.
func TestReplyRequesterGoneProcess(t *testing.T) {
	addr, ns := brokerProcess(t)
	p := realProducer(t, ns, client.SendRetries(0))
	req := &client.MessageExt{Message: client.Message{Topic: "RRG", Properties: map[string]string{
		message.PropCluster: "DefaultCluster", message.PropReplyToClient: "127.0.0.1@gone", message.PropCorrelationID: "c-1",
	}}}
	_, err := p.Reply(ctxT(t), req, []byte("late"))
	var be *client.BrokerError
	if !errors.As(err, &be) || be.Code != protocol.RespSystemError {
		t.Fatalf("Reply to a gone requester: %v, want SYSTEM_ERROR", err)
	}
	wait.For(t, "the reply stored", func() error {
		if n := brokerMaxOffset(t, addr, "DefaultCluster_REPLY_TOPIC", 0); n != 1 {
			return fmt.Errorf("the reply topic holds %d, want 1", n)
		}
		return nil
	})
	if _, err := client.NewReply(&client.MessageExt{}, nil); !errors.Is(err, client.ErrNotRequest) {
		t.Fatalf("NewReply of a plain message: %v, want ErrNotRequest", err)
	}
}

func createTopicAt(t *testing.T, addr, topic string) {
	t.Helper()
	req := new(protocol.Command)
	req.InitRequest(protocol.ReqUpdateAndCreateTopic, 0)
	(&protocol.CreateTopicRequest{Topic: topic, DefaultTopic: "TBW102", ReadQueueNums: 2, WriteQueueNums: 2,
		Perm: protocol.PermRead | protocol.PermWrite, TopicFilterType: "SINGLE_TAG"}).Encode(&req.Ext)
	if resp := invokeAt(t, addr, req); resp.Code != protocol.RespSuccess {
		t.Fatalf("create %s: code %d %q", topic, resp.Code, resp.Remark)
	}
}

func brokerMaxOffset(t *testing.T, addr, topic string, queue int32) int64 {
	t.Helper()
	req := new(protocol.Command)
	req.InitRequest(protocol.ReqGetMaxOffset, 0)
	(&protocol.GetMaxOffsetRequest{Topic: []byte(topic), QueueID: queue}).Encode(&req.Ext)
	resp := invokeAt(t, addr, req)
	if resp.Code != protocol.RespSuccess {
		t.Fatalf("GET_MAX_OFFSET %s: %d %q", topic, resp.Code, resp.Remark)
	}
	var o protocol.OffsetResponse
	if err := o.Decode(&resp.Ext); err != nil {
		t.Fatal(err)
	}
	return o.Offset
}

// One instance both requests and replies: the reply is sent and pushed back on the
// same connection (the broker pushes from that connection's own request).
func TestRequestReplySameInstanceProcess(t *testing.T) {
	addr, ns := brokerProcess(t)
	const topic = "RRS"
	createTopicAt(t, addr, topic)
	inst := client.InstanceName("both")
	p, err := client.NewProducer(client.NameServer(ns), inst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	c, err := client.NewPushConsumer(client.NameServer(ns), inst, client.ConsumerGroup("G-"+topic), client.Subscribe(topic, "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset),
		client.WithConcurrentListener(func(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			for _, m := range msgs {
				if _, err := p.Reply(ctx, m, append([]byte("self:"), m.Body...)); err != nil {
					return client.ConsumeRetryLater
				}
			}
			return client.ConsumeSuccess
		}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	reply, err := p.Request(ctxT(t), &client.Message{Topic: topic, Body: []byte("ping")})
	if err != nil {
		t.Fatal(err)
	}
	if string(reply.Body) != "self:ping" {
		t.Fatalf("reply %q", reply.Body)
	}
}
