package client_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/pierrec/lz4/v4"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// An LZ4 body as a Java 5.x producer with compressType=LZ4 sends it (sysflag
// compressed | type LZ4, an LZ4 frame) goes through a broker process as stored, and
// Apogee's push consumer hands it over inflated.
func TestLZ4BodyThroughBrokerProcess(t *testing.T) {
	addr, ns := brokerProcess(t)
	const topic = "LZ4"
	createTopicAt(t, addr, topic)
	body := bytes.Repeat([]byte("an LZ4 body from a Java producer; "), 300)
	var frame bytes.Buffer
	w := lz4.NewWriter(&frame)
	if _, err := w.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	req := new(protocol.Command)
	req.InitRequest(protocol.ReqSendMessage, 0)
	(&protocol.SendMessageRequest{ProducerGroup: []byte("PG_LZ4"), Topic: []byte(topic), DefaultTopic: []byte("TBW102"),
		DefaultTopicQueueNums: 4, QueueID: 0, SysFlag: message.FlagCompressed | message.CompressionLZ4,
		BornTimestamp: time.Now().UnixMilli(), Properties: message.AppendProperty(nil, message.PropUniqKey, "LZ4-1")}).Encode(&req.Ext)
	req.Body = frame.Bytes()
	if resp := invokeAt(t, addr, req); resp.Code != protocol.RespSuccess {
		t.Fatalf("send: %d %q", resp.Code, resp.Remark)
	}
	got := make(chan *client.MessageExt, 1)
	c := realPush(t, ns, client.ConsumerGroup("G_LZ4"), client.Subscribe(topic, "*"), client.WithConsumeFrom(client.ConsumeFromFirstOffset),
		client.WithConcurrentListener(func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			for _, m := range msgs {
				select {
				case got <- m:
				default:
				}
			}
			return client.ConsumeSuccess
		}))
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	var m *client.MessageExt
	wait.Until(t, "the LZ4 message consumed", func() bool {
		select {
		case m = <-got:
			return true
		default:
			return false
		}
	})
	if !bytes.Equal(m.Body, body) {
		t.Fatalf("body of %d bytes, want the %d inflated (stored: %d)", len(m.Body), len(body), frame.Len())
	}
	if m.SysFlag&message.CompressionMask != message.CompressionLZ4 {
		t.Fatalf("sysflag %#x: the stored record's LZ4 type lost", m.SysFlag)
	}
}
