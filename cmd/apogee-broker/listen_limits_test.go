package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/rmqpb"
)

// idleConns are connections a test opened and leaves silent; it counts
// those the broker closed (a read ends before its deadline).
type idleConns struct {
	mu     sync.Mutex
	conns  []net.Conn
	closed atomic.Int64
	wg     sync.WaitGroup
}

// open dials addr from src and watches the connection for a close.
func (ic *idleConns) open(t *testing.T, src, addr string) {
	t.Helper()
	c, err := dialFrom(src, addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	ic.mu.Lock()
	ic.conns = append(ic.conns, c)
	ic.mu.Unlock()
	ic.wg.Add(1)
	go func() {
		defer ic.wg.Done()
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil && !errors.Is(err, net.ErrClosed) {
			ic.closed.Add(1) // the broker closed it
		}
	}()
}

// close closes every connection and waits for the watchers.
func (ic *idleConns) close() {
	ic.mu.Lock()
	for _, c := range ic.conns {
		c.Close()
	}
	ic.conns = nil
	ic.mu.Unlock()
	ic.wg.Wait()
}

// limitsClient is a well-behaved client that connected before an attack:
// one remoting connection (sends, pulls, runtime info) and one gRPC
// connection.
type limitsClient struct {
	t    *testing.T
	rc   *remoting.Client
	gc   *grpc.ClientConn
	grpc rmqpb.MessagingServiceClient
	sent int64
}

// newLimitsClient connects; sent is how many messages the topic holds.
func newLimitsClient(t *testing.T, addr, grpcAddr string, sent int64) *limitsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	rc, err := remoting.Dial(ctx, addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	gc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gc.Close() })
	c := &limitsClient{t: t, rc: rc, gc: gc, grpc: rmqpb.NewMessagingServiceClient(gc), sent: sent}
	c.served("connected") // the gRPC connection is made by its first call
	return c
}

// info is the broker's runtime information, on the client's connection.
func (c *limitsClient) info() map[string]string {
	c.t.Helper()
	var req protocol.Command
	req.InitRequest(protocol.ReqGetBrokerRuntimeInfo, 0)
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	resp, err := c.rc.Invoke(ctx, &req)
	if err != nil || resp.Code != protocol.RespSuccess {
		c.t.Fatalf("runtime info: %v %v", err, resp)
	}
	var kv protocol.KVTable
	if err := kv.Decode(resp.Body); err != nil {
		c.t.Fatal(err)
	}
	return kv.Table
}

// served checks that the client is served on both its connections: a
// send and a pull of it over remoting, a send over gRPC.
func (c *limitsClient) served(when string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	body := fmt.Sprintf("served %d", c.sent)
	resp, err := c.rc.Invoke(ctx, sendRequest("good", "Limits", 0, []byte(body)))
	if err != nil || resp.Code != protocol.RespSuccess {
		c.t.Fatalf("%s: a well-behaved remoting send: %v %v", when, err, resp)
	}
	var req protocol.Command
	req.InitRequest(protocol.ReqPullMessage, 0)
	(&protocol.PullMessageRequest{ConsumerGroup: []byte("good"), Topic: []byte("Limits"), QueueID: 0, QueueOffset: c.sent,
		MaxMsgNums: 1, SysFlag: protocol.PullFlagSubscription, Subscription: []byte("*"), ExpressionType: []byte("TAG")}).Encode(&req.Ext)
	wait.For(c.t, when+": a well-behaved pull", func() error {
		resp, err = c.rc.Invoke(ctx, &req)
		if err != nil {
			c.t.Fatalf("%s: a well-behaved pull: %v", when, err)
		}
		switch resp.Code {
		case protocol.RespSuccess:
			return nil
		case protocol.RespPullNotFound, protocol.RespPullRetryImmediately:
			return fmt.Errorf("code %d: not dispatched yet", resp.Code)
		}
		c.t.Fatalf("%s: a well-behaved pull: %v", when, resp)
		return nil
	})
	if !strings.Contains(string(resp.Body), body) {
		c.t.Fatalf("%s: the pull did not return %q", when, body)
	}
	c.sent++
	gctx := metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", "limits-test")
	r, err := c.grpc.SendMessage(gctx, &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{{
		Topic: &rmqpb.Resource{Name: "LimitsGRPC"}, Body: []byte(body), SystemProperties: &rmqpb.SystemProperties{
			MessageId: fmt.Sprintf("limits-%d-%d", c.sent, time.Now().UnixNano()), BornTimestamp: timestamppb.Now(), BornHost: "test",
			BodyEncoding: rmqpb.Encoding_IDENTITY}}}})
	if err != nil || r.GetStatus().GetCode() != rmqpb.Code_OK {
		c.t.Fatalf("%s: a well-behaved gRPC send: %v %v", when, err, r.GetStatus())
	}
}

// TestConnectionLimitsOnEveryListener runs the broker with RLIMIT_NOFILE
// lowered to 512 (prlimit on the child) and a per-source bound of 40, and
// opens idle connections to its gRPC and HA ports (listeners that are not
// remoting's) while a well-behaved remoting and gRPC client keeps being
// served:
//
//   - 60 from one source, spread over the gRPC, HA, embedded name server
//     and operator ports: 40 are kept, 20 closed by the broker at once (the
//     per-source bound counts every port together);
//   - then, 40 a source from more sources, until well past what the file
//     descriptors leave (512 less what the process holds, less 128, a
//     quarter of the limit): every one past the bound is closed, counted
//     and logged once, and the store never runs out of descriptors (no
//     "too many open files" in the log);
//   - the attackers leave: new clients are served again.
func TestConnectionLimitsOnEveryListener(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary; opens hundreds of connections")
	}
	if runtime.GOOS != "linux" {
		t.Skip("prlimit, 127.0.0.x source addresses")
	}
	const (
		nofile    = 512
		perSource = 40
	)
	bin := buildBinary(t)
	pp := proctest.New(t, "apogee-broker", bin)
	if err := pp.Launch(withListeners([]string{"--metrics-listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--max-connections-per-source", strconv.Itoa(perSource)})...); err != nil {
		t.Fatal(err)
	}
	lim := unix.Rlimit{Cur: nofile, Max: nofile}
	if err := unix.Prlimit(pp.PID(), unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		pp.Kill()
		t.Skipf("prlimit on the broker: %v", err)
	}
	pp.AwaitReady()
	good := newLimitsClient(t, pp.Ready.Listen, pp.Ready.GRPC, 0)
	// The limit was lowered once the process ran: it follows it on the
	// next accept at the latest (the client's).
	info := wait.Value(t, "the broker following RLIMIT_NOFILE", good.info, func(m map[string]string) bool {
		return m["remotingConnectionsFDLimit"] == strconv.Itoa(nofile)
	})
	bound := atoi(info["remotingConnectionsBound"])
	t.Logf("connections bound %d: RLIMIT_NOFILE %s, %s held otherwise, headroom %s", bound,
		info["remotingConnectionsFDLimit"], info["remotingConnectionsFDHeld"], info["remotingConnectionsFDHeadroom"])
	if bound <= 2*perSource || bound > nofile-nofile/4 {
		t.Fatalf("bound %d: want less than the limit less its quarter, and room for the test", bound)
	}

	attack := &idleConns{}
	t.Cleanup(attack.close)
	ports := []string{pp.Ready.GRPC, pp.Ready.HA}

	// One source, every port but the broker's remoting one (the per-source bound
	// counts them together): gRPC, HA, the embedded name server, the
	// operator port.
	onePorts := []string{pp.Ready.GRPC, pp.Ready.HA, pp.Ready.Namesrv, pp.Ready.Metrics}
	for i := range 60 {
		attack.open(t, "127.0.0.2", onePorts[i%len(onePorts)])
	}
	wait.Until(t, "20 of one source's connections closed", func() bool { return attack.closed.Load() >= 20 })
	info = good.info()
	if atoi(info["remotingConnectionsRefusedPerSource"]) != 20 {
		t.Fatalf("refused per source: %s, want 20", info["remotingConnectionsRefusedPerSource"])
	}
	good.served("after one source's flood")

	// Many sources, until well past the bound in all.
	target := int(bound) + 100
	opened := 60
	for s := 10; opened < target; s++ {
		for i := 0; i < perSource && opened < target; i++ {
			attack.open(t, fmt.Sprintf("127.0.0.%d", s), ports[i%2])
			opened++
		}
	}
	// (The HA port closes a connection that says nothing for 20 s: one
	// that closes late is counted as closed, not as open.)
	info = wait.Value(t, "the connections past the bound closed", good.info, func(m map[string]string) bool {
		return int(attack.closed.Load())+int(atoi(m["remotingConnections"])) == opened+2
	})
	open, refusedFD := atoi(info["remotingConnections"]), atoi(info["remotingConnectionsRefusedFD"])
	t.Logf("%d attack connections: %d open (with the client's 2), %d refused for the file descriptors, %s per source",
		opened, open, refusedFD, info["remotingConnectionsRefusedPerSource"])
	if refusedFD < 50 || open > atoi(info["remotingConnectionsBound"]) {
		t.Fatalf("%d open and %d refused for the descriptors, bound %s", open, refusedFD, info["remotingConnectionsBound"])
	}
	good.served("at the bound in all")
	// A newcomer is refused while the bound is reached (unless the HA
	// port's housekeeping closed some meanwhile, on a very slow run).
	if info = good.info(); atoi(info["remotingConnections"]) >= atoi(info["remotingConnectionsBound"]) {
		newcomer := &idleConns{}
		newcomer.open(t, "127.0.0.200", pp.Ready.GRPC)
		wait.Until(t, "a newcomer refused at the bound", func() bool { return newcomer.closed.Load() == 1 })
		newcomer.close()
	} else {
		t.Logf("no newcomer check: %s open, bound %s", info["remotingConnections"], info["remotingConnectionsBound"])
	}

	// The attackers leave; new clients are served.
	attack.close()
	wait.Value(t, "the attack's connections gone", good.info, func(m map[string]string) bool {
		return m["remotingConnections"] == "2"
	})
	again := newLimitsClient(t, pp.Ready.Listen, pp.Ready.GRPC, good.sent)
	again.served("after the attack")

	if err := pp.Stop(unix.SIGTERM); err != nil {
		t.Fatalf("stop: %v", err)
	}
	logs := pp.RunLog()
	if n := strings.Count(strings.ToLower(logs), "too many open files"); n != 0 {
		t.Errorf("%d log lines say too many open files", n)
	}
	for _, want := range []string{"too many connections from one source", "too many connections for the file descriptors the process has left"} {
		if n := strings.Count(logs, want); n != 1 {
			t.Errorf("%d log lines with %q, want 1 (further ones within a minute are counted)", n, want)
		}
	}
}
