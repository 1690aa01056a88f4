package grpcfe

import (
	"context"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/internal/benchcpu"
	"github.com/apogeemq/apogee/rmqpb"
)

// BenchmarkSendMessage: 1 KiB sends over one loopback connection, from
// parallel callers (b.RunParallel: GOMAXPROCS × -cpu goroutines). The
// allocations are the whole process's: the client's and grpc-go's
// included.
func BenchmarkSendMessage(b *testing.B) { benchSend(b, newEnvB(b)) }

// BenchmarkSendMessageAdmitted is BenchmarkSendMessage with the receive
// budget on (as in the broker binary): the tap reserves each call's
// request cap from its headers and the interceptor gives it back.
func BenchmarkSendMessageAdmitted(b *testing.B) {
	benchSend(b, newEnvWith(b, nil, func(o *Options) { o.Budget = &testBudget{limit: 128 << 20} }, nil))
}

func benchSend(b *testing.B, e *env) {
	body := make([]byte, 1024)
	e.route("Bench")
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	defer benchcpu.Report(b)()
	b.RunParallel(func(pb *testing.PB) {
		ctx := e.ctx("bench", time.Minute)
		m := &rmqpb.Message{Topic: res("Bench"), Body: body, SystemProperties: &rmqpb.SystemProperties{
			BodyEncoding: rmqpb.Encoding_IDENTITY, MessageType: rmqpb.MessageType_NORMAL, BornTimestamp: timestamppb.Now()}}
		req := &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{m}}
		for pb.Next() {
			m.SystemProperties.MessageId = "ID" + strconv.FormatInt(seq.Add(1), 16)
			r, err := e.cli.SendMessage(ctx, req)
			if err != nil || r.Status.Code != rmqpb.Code_OK {
				b.Errorf("send: %v %v", r, err)
				return
			}
		}
	})
}

// floorServer answers SendMessage with a constant response and does
// nothing else: what grpc-go itself costs per call.
type floorServer struct {
	rmqpb.UnimplementedMessagingServiceServer
	resp *rmqpb.SendMessageResponse
}

func (f *floorServer) SendMessage(context.Context, *rmqpb.SendMessageRequest) (*rmqpb.SendMessageResponse, error) {
	return f.resp, nil
}

// BenchmarkSendMessageFloor is BenchmarkSendMessage against floorServer,
// with the same server options: the difference is the front end's and the
// core's share.
func BenchmarkSendMessageFloor(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(serverOptions(Options{MaxRecvMsgSize: 4<<20 + MsgSizeHeadroom, MaxSendMsgSize: 4<<20 + MsgSizeHeadroom, MaxConcurrentStreams: DefaultMaxConcurrentStreams})...)
	rmqpb.RegisterMessagingServiceServer(srv, &floorServer{resp: &rmqpb.SendMessageResponse{Status: okStatus,
		Entries: []*rmqpb.SendResultEntry{{Status: okStatus, MessageId: "ID1", Offset: 1}}}})
	go srv.Serve(l)
	defer srv.Stop()
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	cli := rmqpb.NewMessagingServiceClient(cc)
	body := make([]byte, 1024)
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	defer benchcpu.Report(b)()
	b.RunParallel(func(pb *testing.PB) {
		// As benchSend's (e.ctx): a deadline, as RocketMQ's SDKs set on
		// every call, which costs grpc-go a timer on both sides.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, metaClientID, "bench")
		m := &rmqpb.Message{Topic: res("Bench"), Body: body, SystemProperties: &rmqpb.SystemProperties{
			BodyEncoding: rmqpb.Encoding_IDENTITY, MessageType: rmqpb.MessageType_NORMAL, BornTimestamp: timestamppb.Now()}}
		req := &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{m}}
		for pb.Next() {
			m.SystemProperties.MessageId = "ID" + strconv.FormatInt(seq.Add(1), 16)
			if _, err := cli.SendMessage(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchParallelism is the callers per GOMAXPROCS of the send benchmarks.
var benchParallelism = func() int {
	if n, err := strconv.Atoi(os.Getenv("APOGEE_GRPC_BENCH_PAR")); err == nil && n > 0 {
		return n
	}
	return 16
}()
