package grpcfe

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/internal/benchcpu"
	"github.com/apogeemq/apogee/rmqpb"
)

// batchPerCall is the messages per SendMessage of the batch benchmarks:
// apogee-bench's --batch 32.
const batchPerCall = 32

// batchRequest returns a request of batchPerCall NORMAL 1 KiB messages to
// topic and the function that gives them fresh ids.
func batchRequest(topic string, seq *atomic.Int64) (*rmqpb.SendMessageRequest, func()) {
	body := make([]byte, 1024)
	req := &rmqpb.SendMessageRequest{}
	for range batchPerCall {
		req.Messages = append(req.Messages, &rmqpb.Message{Topic: res(topic), Body: body, SystemProperties: &rmqpb.SystemProperties{
			BodyEncoding: rmqpb.Encoding_IDENTITY, MessageType: rmqpb.MessageType_NORMAL, BornTimestamp: timestamppb.Now()}})
	}
	return req, func() {
		for _, m := range req.Messages {
			m.SystemProperties.MessageId = "ID" + strconv.FormatInt(seq.Add(1), 16)
		}
	}
}

// BenchmarkSendMessageBatch32 is BenchmarkSendMessage with 32 messages of
// 1 KiB per call (an op is a call: per message, divide by 32).
func BenchmarkSendMessageBatch32(b *testing.B) {
	e := newEnvB(b)
	e.route("Bench")
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetBytes(batchPerCall * 1024)
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	defer benchcpu.Report(b)()
	b.RunParallel(func(pb *testing.PB) {
		ctx := e.ctx("bench", time.Minute)
		req, renew := batchRequest("Bench", &seq)
		for pb.Next() {
			renew()
			r, err := e.cli.SendMessage(ctx, req)
			if err != nil || r.Status.Code != rmqpb.Code_OK {
				b.Errorf("send: %v %v", r, err)
				return
			}
		}
	})
}

// BenchmarkSendMessageBatch32Direct calls the server's SendMessage with a
// request of 32 messages of 1 KiB (the same ids each call: the store
// does not mind), without gRPC: the front end's, the core's and the
// store's share (the dispatcher's CPU included in cpu-ns/op).
func BenchmarkSendMessageBatch32Direct(b *testing.B) {
	e := newEnvB(b)
	e.route("Bench")
	var seq atomic.Int64
	req, renew := batchRequest("Bench", &seq)
	renew()
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(batchPerCall * 1024)
	b.ResetTimer()
	defer benchcpu.Report(b)()
	for range b.N {
		if r, err := e.srv.SendMessage(ctx, req); err != nil || r.Status.Code != rmqpb.Code_OK {
			b.Fatalf("send: %v %v", r, err)
		}
	}
}
