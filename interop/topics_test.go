package interop

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// TestConsumerNeedsRoute: the Go client's consumer Start fails for a topic
// without a route; a first send (auto-create from TBW102) or the admin API's
// CreateTopic gives it one.
func TestConsumerNeedsRoute(t *testing.T) {
	b := startBroker(t)
	start := func(topic string) error {
		c, err := consumer.NewPushConsumer(consumerOpts(b, uniq("GRoute"))...)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Subscribe(topic, all, newRecorder().handler); err != nil {
			t.Fatal(err)
		}
		err = c.Start()
		if err == nil {
			// Let the start-up rebalance finish: Shutdown during it is a
			// data race inside the client (see stopApart).
			time.Sleep(time.Second)
		}
		_ = c.Shutdown()
		return err
	}
	if err := start(uniq("TNoRoute")); err == nil {
		t.Fatal("a consumer started on a topic without a route")
	}
	viaSend := uniq("TViaSend")
	sendAll(t, newProducer(t, b), viaSend, "", []string{"first"})
	if err := start(viaSend); err != nil {
		t.Fatalf("consumer on an auto-created topic: %v", err)
	}
	viaAdmin := uniq("TViaAdmin")
	createTopic(t, b, viaAdmin, 3)
	if err := start(viaAdmin); err != nil {
		t.Fatalf("consumer on an admin-created topic: %v", err)
	}
}

// TestBrokerConf: a broker.conf with auto-create off and its own names. A
// send to an unknown topic fails (TOPIC_NOT_EXIST), the admin API creates
// it, and routes carry the configured broker name.
func TestBrokerConf(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "broker.conf")
	err := os.WriteFile(conf, []byte(strings.Join([]string{
		"# a RocketMQ-style broker.conf",
		"brokerClusterName=InteropCluster",
		"brokerName=broker-conf",
		"flushDiskType=SYNC_FLUSH",
		"autoCreateTopicEnable=false",
		"defaultTopicQueueNums=4",
		"",
	}, "\n")), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, "--config", conf)
	if !strings.HasPrefix(b.Line, "apogee-broker broker-conf ") || !strings.Contains(b.Line, ", flush sync, version ") {
		t.Fatalf("start line %q does not reflect the config file", b.Line)
	}
	p := newProducer(t, b)
	topic := uniq("TConf")
	if res, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte("x"))); err == nil {
		t.Fatalf("send to an unknown topic with auto-create off: %v", res)
	}
	createTopic(t, b, topic, 2)
	rec := drainAfterSend(t, b, topic, "configured")
	for _, m := range rec.msgs {
		if m.Queue.BrokerName != "broker-conf" {
			t.Fatalf("message from broker %q, want broker-conf", m.Queue.BrokerName)
		}
	}
}

// drainAfterSend sends one body with a fresh producer and drains it.
func drainAfterSend(t *testing.T, b *Broker, topic, body string) *recorder {
	t.Helper()
	sendAll(t, newProducer(t, b), topic, "", []string{body})
	return drain(t, b, topic, []string{body}, all)
}
