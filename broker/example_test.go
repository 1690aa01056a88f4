package broker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// A broker on a loopback port: a producer's first send auto-creates its topic.
func Example() {
	dir, _ := os.MkdirTemp("", "apogee-example-")
	defer os.RemoveAll(dir)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	b, err := broker.New(broker.Options{Core: core.Options{DataDir: dir, AdvertiseAddr: l.Addr().String(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err != nil {
		panic(err)
	}
	go b.Serve(l)
	defer b.Shutdown(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, l.Addr().String(), nil)
	if err != nil {
		panic(err)
	}
	defer cl.Close()

	var req protocol.Command
	req.InitRequest(protocol.ReqSendMessage, 0)
	(&protocol.SendMessageRequest{
		ProducerGroup: []byte("pg"), Topic: []byte("Hello"), DefaultTopic: []byte("TBW102"),
		DefaultTopicQueueNums: 4, QueueID: 0, BornTimestamp: time.Now().UnixMilli(),
	}).Encode(&req.Ext)
	req.Body = []byte("hello, world")
	resp, err := cl.Invoke(ctx, &req)
	if err != nil {
		panic(err)
	}
	off, _ := resp.Ext.GetString("queueOffset")
	id, _ := resp.Ext.GetString("msgId")
	fmt.Println("code", resp.Code, "queueOffset", off, "msgId length", len(id))
	// Output: code 0 queueOffset 0 msgId length 32
}
