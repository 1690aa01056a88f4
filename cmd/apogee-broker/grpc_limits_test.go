package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/rmqpb"
)

// h2conn is a raw HTTP/2 connection to the gRPC port, for what a gRPC
// library does not do: a message whose length prefix declares more than
// is sent, and data held back. It keeps HTTP/2's flow control (the server
// would close a connection that overran its windows) and answers the
// server's SETTINGS and PINGs.
type h2conn struct {
	t  *testing.T
	nc net.Conn

	wmu  sync.Mutex // writes: framer, hpack encoder
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change under mu
	connWin int64
	initWin int64
	streams map[uint32]*h2stream
	next    uint32
	err     error // the connection's end
}

type h2stream struct {
	win    int64
	ended  bool   // trailers with END_STREAM, or RST_STREAM
	status string // grpc-status, "" until the trailers came
	msg    string
}

// dialH2 opens a raw HTTP/2 connection to addr (plaintext).
func dialH2(t *testing.T, addr string) *h2conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &h2conn{t: t, nc: nc, connWin: 65535, initWin: 65535, streams: map[uint32]*h2stream{}, next: 1, changed: make(chan struct{})}
	c.fr = http2.NewFramer(nc, nc)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go c.read()
	t.Cleanup(func() { nc.Close() })
	return c
}

// signalLocked wakes whoever waits for a change (c.mu held).
func (c *h2conn) signalLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *h2conn) read() {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.signalLocked()
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					d := int64(v) - c.initWin
					c.initWin = int64(v)
					for _, s := range c.streams {
						s.win += d
					}
				}
				c.wmu.Lock()
				c.fr.WriteSettingsAck()
				c.wmu.Unlock()
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.connWin += int64(f.Increment)
			} else if s := c.streams[f.StreamID]; s != nil {
				s.win += int64(f.Increment)
			}
		case *http2.MetaHeadersFrame:
			if s := c.streams[f.StreamID]; s != nil {
				if v := f.PseudoValue("status"); v != "" && v != "200" {
					s.status = "http " + v
				}
				for _, h := range f.RegularFields() {
					switch h.Name {
					case "grpc-status":
						s.status = h.Value
					case "grpc-message":
						s.msg = h.Value
					}
				}
				if f.StreamEnded() {
					s.ended = true
				}
			}
		case *http2.RSTStreamFrame:
			if s := c.streams[f.StreamID]; s != nil {
				s.ended = true
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.wmu.Lock()
				c.fr.WritePing(true, f.Data)
				c.wmu.Unlock()
			}
		case *http2.GoAwayFrame:
			c.err = fmt.Errorf("GOAWAY %v", f.ErrCode)
		}
		c.signalLocked()
		c.mu.Unlock()
	}
}

// open starts a call of the MessagingService's method with metadata md
// (its headers only); it returns the stream id.
func (c *h2conn) open(method string, md map[string]string) uint32 {
	c.mu.Lock()
	id := c.next
	c.next += 2
	c.streams[id] = &h2stream{win: c.initWin}
	c.mu.Unlock()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.hbuf.Reset()
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/apache.rocketmq.v2.MessagingService/" + method},
		{":authority", c.nc.RemoteAddr().String()}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		c.henc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	for k, v := range md {
		c.henc.WriteField(hpack.HeaderField{Name: k, Value: v})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
	return id
}

// send writes a message prefix declaring `declared` bytes and then n
// bytes of it, as the windows allow, unless the stream ends first (it
// returns how many it sent). It gives up waiting for window at deadline.
func (c *h2conn) send(id uint32, declared uint32, n int, deadline time.Time) int {
	var prefix [5]byte
	binary.BigEndian.PutUint32(prefix[1:], declared)
	chunk := make([]byte, 16384)
	sent := -len(prefix)
	for sent < n {
		want := min(len(chunk), n-sent)
		if sent < 0 {
			want = len(prefix)
		}
		c.mu.Lock()
		for {
			s := c.streams[id]
			if s.ended || c.err != nil {
				c.mu.Unlock()
				return max(sent, 0)
			}
			if c.connWin > 0 && s.win > 0 {
				want = int(min(int64(want), c.connWin, s.win))
				c.connWin -= int64(want)
				s.win -= int64(want)
				break
			}
			ch := c.changed
			c.mu.Unlock()
			select {
			case <-ch:
			case <-time.After(time.Until(deadline)):
				return max(sent, 0)
			}
			c.mu.Lock()
		}
		c.mu.Unlock()
		data := chunk[:want]
		if sent < 0 {
			data = prefix[:want]
		}
		c.wmu.Lock()
		err := c.fr.WriteData(id, false, data)
		c.wmu.Unlock()
		if err != nil {
			return max(sent, 0)
		}
		sent += want
	}
	return max(sent, 0)
}

// ended waits until stream id has ended and returns its grpc-status and
// message.
func (c *h2conn) ended(id uint32) (string, string) {
	c.t.Helper()
	var st, msg string
	wait.For(c.t, fmt.Sprintf("stream %d ended", id), func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		s := c.streams[id]
		if !s.ended && c.err == nil {
			return errors.New("still open")
		}
		st, msg = s.status, s.msg
		return nil
	})
	return st, msg
}

// grpcScrape returns the value of the first series of the broker's metrics at
// addr whose line starts with name and contains each of labels (0 when
// none). addr may be user:password@host:port (basic authentication, as
// /metrics needs under ACL).
func grpcScrape(t *testing.T, addr, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
next:
	for _, line := range strings.Split(string(text), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		var v float64
		fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
		return v
	}
	return 0
}

// rssSampler records the peak RSS of pid until stopped.
type rssSampler struct {
	peak atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func sampleRSS(t *testing.T, pid int) *rssSampler {
	r := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			if v, err := rssOf(pid); err == nil && v > r.peak.Load() {
				r.peak.Store(v)
			}
			// A measurement's pace, not a wait.
			select {
			case <-r.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(r.halt)
	return r
}

func (r *rssSampler) halt() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
}

// v2Auth is the metadata of a RocketMQ 5 call signed as ak.
func v2Auth(ak, sk string) map[string]string {
	a, dt := auth.NewKey(sk).SignV2(ak, time.Now())
	return map[string]string{auth.HeaderAuthorization: a, auth.HeaderDateTime: dt, "x-mq-client-id": "attacker-" + ak}
}

// grpcClient dials the broker's gRPC port (plaintext).
func grpcClient(t *testing.T, addr string, opts ...grpc.DialOption) rmqpb.MessagingServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rmqpb.NewMessagingServiceClient(cc)
}

// v2Creds signs every call as ak.
type v2Creds struct{ ak, sk string }

func (c v2Creds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	a, dt := auth.NewKey(c.sk).SignV2(c.ak, time.Now())
	return map[string]string{auth.HeaderAuthorization: a, auth.HeaderDateTime: dt}, nil
}
func (v2Creds) RequireTransportSecurity() bool { return false }

func grpcMsg(topic, id string, body []byte) *rmqpb.Message {
	return &rmqpb.Message{Topic: &rmqpb.Resource{Name: topic}, Body: body, SystemProperties: &rmqpb.SystemProperties{
		MessageId: id, BornTimestamp: timestamppb.Now(), BornHost: "test", BodyEncoding: rmqpb.Encoding_IDENTITY}}
}

func callCtx(id string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	return metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", id), cancel
}

// TestGRPCUnauthenticatedMemory is case 1 of issue 29 with ACL on: 24
// unauthenticated streams, each declaring a 128 MiB message and sending
// as much of it as the server lets them (up to 64 MiB), are refused from
// their headers (Unauthenticated, 40100 named), and the broker's RSS stays
// near its idle figure (it rose by 1.5 GB before the tap). Then signed
// streams: 24 declaring 128 MiB are refused from their length prefix
// (ResourceExhausted, the cap being 4 MiB + 256 KiB); 64 declaring 4 MiB
// and sending 3 MiB of it, then holding, are admitted while the receive
// budget (128 MiB) has room and refused after (ResourceExhausted), and the
// admitted ones are ended at the request timeout (10 s): RSS stays within
// the budget's bound, and a well-behaved client is served after.
func TestGRPCUnauthenticatedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/PID/status")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(file, []byte(secACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, buildBinary(t), "--namesrv-listen", "", "--data-dir", filepath.Join(dir, "data"), "--acl-file", file,
		"--metrics-listen", "127.0.0.1:0")
	defer p.stop(t, syscall.SIGTERM)
	gaddr := p.Ready.GRPC
	good := grpcClient(t, gaddr, grpc.WithPerRPCCredentials(v2Creds{"app", "app-secret"}))
	sendGood := func(what string) {
		t.Helper()
		ctx, cancel := callCtx("good-producer")
		defer cancel()
		r, err := good.SendMessage(ctx, &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{grpcMsg("SecG", "good", []byte("hello"))}})
		if err != nil || r.GetStatus().GetCode() != rmqpb.Code_OK {
			t.Fatalf("%s: the well-behaved producer: %v %v", what, r.GetStatus(), err)
		}
	}
	sendGood("before")
	rest, err := rssOf(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	rs := sampleRSS(t, p.PID())
	rs.peak.Store(rest)

	// 24 unauthenticated streams on 4 connections, each declaring 128 MiB.
	var wg sync.WaitGroup
	var refused, sentTotal atomic.Int64
	for cn := 0; cn < 4; cn++ {
		c := dialH2(t, gaddr)
		for i := 0; i < 6; i++ {
			id := c.open("SendMessage", map[string]string{"x-mq-client-id": "intruder"})
			wg.Add(1)
			go func() {
				defer wg.Done()
				sentTotal.Add(int64(c.send(id, 128<<20, 64<<20, time.Now().Add(5*time.Second))))
				st, msg := c.ended(id)
				if st == fmt.Sprint(int(codes.Unauthenticated)) && strings.Contains(msg, "40100") {
					refused.Add(1)
				} else {
					t.Errorf("stream %d: grpc-status %q %q, want Unauthenticated naming 40100", id, st, msg)
				}
			}()
		}
	}
	wg.Wait()
	afterUnauth := rs.peak.Load()
	t.Logf("24 unauthenticated streams declaring 128 MiB: %d refused, %d bytes sent in all; RSS %d MiB at rest, peak %d MiB",
		refused.Load(), sentTotal.Load(), rest>>20, afterUnauth>>20)
	if refused.Load() != 24 {
		t.Fatalf("%d of 24 refused", refused.Load())
	}
	if afterUnauth > rest+64<<20 {
		t.Errorf("RSS rose from %d to %d MiB for unauthenticated streams (want at most 64 MiB more)", rest>>20, afterUnauth>>20)
	}
	sendGood("after the unauthenticated streams")

	// Signed, declaring 128 MiB: refused from the length prefix.
	c := dialH2(t, gaddr)
	for i := 0; i < 24; i++ {
		id := c.open("SendMessage", v2Auth("app", "app-secret"))
		c.send(id, 128<<20, 64<<20, time.Now().Add(5*time.Second))
		if st, msg := c.ended(id); st != fmt.Sprint(int(codes.ResourceExhausted)) {
			t.Fatalf("a signed 128 MiB message: grpc-status %q %q, want ResourceExhausted", st, msg)
		}
	}

	// Signed, 64 streams declaring 4 MiB, sending 3 MiB, holding.
	var admitted, budgetRefused atomic.Int64
	start := time.Now()
	for cn := 0; cn < 4; cn++ {
		c := dialH2(t, gaddr)
		for i := 0; i < 16; i++ {
			id := c.open("SendMessage", v2Auth("app", "app-secret"))
			wg.Add(1)
			go func() {
				defer wg.Done()
				if c.send(id, 4<<20, 3<<20, time.Now().Add(5*time.Second)) == 3<<20 {
					admitted.Add(1)
				}
				st, msg := c.ended(id)
				switch st {
				case fmt.Sprint(int(codes.ResourceExhausted)):
					budgetRefused.Add(1)
				case fmt.Sprint(int(codes.Canceled)), fmt.Sprint(int(codes.DeadlineExceeded)), fmt.Sprint(int(codes.Unavailable)), "":
					// Ended at the request timeout.
				default:
					t.Errorf("a held half-sent request: grpc-status %q %q", st, msg)
				}
			}()
		}
	}
	wg.Wait()
	took := time.Since(start)
	peak := rs.peak.Load()
	t.Logf("64 signed streams holding 3 of 4 MiB: %d sent it all, %d refused for the budget, ended after %v; RSS peak %d MiB",
		admitted.Load(), budgetRefused.Load(), took.Round(time.Millisecond), peak>>20)
	if budgetRefused.Load() == 0 || admitted.Load() > 31 {
		t.Errorf("%d admitted, %d refused: want the 128 MiB budget to admit at most 31 requests of 4.25 MiB", admitted.Load(), budgetRefused.Load())
	}
	// The budget (128 MiB) bounds what is held, plus what the garbage
	// collector has not returned yet: well within 512 MiB of idle.
	if peak > rest+320<<20 {
		t.Errorf("RSS peak %d MiB from %d MiB at rest: want at most 320 MiB more", peak>>20, rest>>20)
	}
	sendGood("after the held streams")

	// The counters, in the metrics (as the super user: /metrics needs an
	// ACL user under ACL).
	m := "root:root-secret@" + p.Ready.Metrics
	authN, size := grpcScrape(t, m, "apogee_grpc_refused_total", `reason="authentication"`), grpcScrape(t, m, "apogee_grpc_refused_total", `reason="message_size"`)
	budget, timeouts := grpcScrape(t, m, "apogee_grpc_refused_total", `reason="budget"`), grpcScrape(t, m, "apogee_grpc_refused_total", `reason="request_timeout"`)
	if authN != 24 || size < 24 || budget != float64(budgetRefused.Load()) || timeouts != float64(admitted.Load()) {
		t.Errorf("metrics: authentication %v, message_size %v, budget %v, request_timeout %v; want 24, 24, %d, %d",
			authN, size, budget, timeouts, budgetRefused.Load(), admitted.Load())
	}
	logs := p.RunLog()
	if n := strings.Count(logs, "grpc: receive budget full"); n != 1 {
		t.Errorf("%d budget lines, want 1 (throttled)", n)
	}
}

// TestGRPCLimits runs a broker without ACL and checks the limits every
// peer meets: four 100 MB sends are refused from their length prefix and
// the RSS does not move (it stayed at 1.2 GB 200 s later before the caps);
// one client holding 300 unread receives keeps 256 of them and cannot
// starve another group's consumer; route queries of 30 new topics from one
// address stop at --max-auto-create-per-source (topics and groups
// together); the counters are in the
// runtime info and the Prometheus metrics.
func TestGRPCLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/PID/status")
	}
	dir := t.TempDir()
	// The receive budget is raised above 300 calls × 4.25 MiB: each call
	// reserves the message cap until its request is read, and on a loaded
	// machine 300 receives started at once would otherwise meet the 128
	// MiB budget (a refusal TestGRPCUnauthenticatedMemory checks) before the long-poll
	// bound this test is about.
	p := start(t, buildBinary(t), "--namesrv-listen", "", "--data-dir", filepath.Join(dir, "data"),
		"--max-auto-create-per-source", "20", "--metrics-listen", "127.0.0.1:0", "--receive-budget", strconv.Itoa(2<<30))
	defer p.stop(t, syscall.SIGTERM)
	gaddr := p.Ready.GRPC
	cli := grpcClient(t, gaddr, grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(200<<20)))

	// (b) Four 100 MB sends.
	rest, err := rssOf(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	rs := sampleRSS(t, p.PID())
	rs.peak.Store(rest)
	body := make([]byte, 100<<20)
	for i := 0; i < 4; i++ {
		ctx, cancel := callCtx("big-producer")
		_, err := cli.SendMessage(ctx, &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{grpcMsg("Big", fmt.Sprint("big-", i), body)}})
		cancel()
		if grpcstatus.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a 100 MB send: %v, want ResourceExhausted", err)
		}
	}
	body = nil
	rs.halt()
	after, err := rssOf(p.PID())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("four 100 MB sends: RSS %d MiB at rest, peak %d MiB, %d MiB after", rest>>20, rs.peak.Load()>>20, after>>20)
	if rs.peak.Load() > rest+64<<20 || after > rest+64<<20 {
		t.Errorf("RSS rose from %d MiB (peak %d, after %d MiB): want at most 64 MiB more", rest>>20, rs.peak.Load()>>20, after>>20)
	}

	// (c) One client with 300 unread receives; another group's consumer.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answers := make(chan rmqpb.Code, 512)
	// receive starts a receive on cl; the fair consumer has a connection
	// of its own (the greedy one holds its connection's bound too).
	receive := func(cl rmqpb.MessagingServiceClient, id, group, topic string) {
		rctx := metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", id)
		go func() {
			s, err := cl.ReceiveMessage(rctx, &rmqpb.ReceiveMessageRequest{Group: &rmqpb.Resource{Name: group},
				MessageQueue:     &rmqpb.MessageQueue{Topic: &rmqpb.Resource{Name: topic}, Id: -1},
				FilterExpression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"}, BatchSize: 1,
				InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(20 * time.Second)})
			if err != nil {
				answers <- rmqpb.Code_CODE_UNSPECIFIED
				return
			}
			for {
				r, err := s.Recv()
				switch {
				case err != nil:
					answers <- rmqpb.Code_CODE_UNSPECIFIED
					return
				case r.GetMessage() != nil:
					answers <- rmqpb.Code_OK
					return
				case r.GetStatus() != nil:
					answers <- r.GetStatus().GetCode()
					return
				}
			}
		}()
	}
	for _, topic := range []string{"Quiet", "Orders"} {
		rctx, rcancel := callCtx("setup")
		r, err := cli.QueryRoute(rctx, &rmqpb.QueryRouteRequest{Topic: &rmqpb.Resource{Name: topic}})
		rcancel()
		if err != nil || r.GetStatus().GetCode() != rmqpb.Code_OK {
			t.Fatalf("route %s: %v %v", topic, r.GetStatus(), err)
		}
	}
	for i := 0; i < 300; i++ {
		receive(cli, "greedy", "GGreedy", "Quiet")
	}
	tooMany := 0
	for tooMany < 300-256 {
		select {
		case c := <-answers:
			if c != rmqpb.Code_TOO_MANY_REQUESTS {
				t.Fatalf("a greedy receive answered %v, want TOO_MANY_REQUESTS beyond 256", c)
			}
			tooMany++
		case <-time.After(wait.DefaultTimeout):
			t.Fatalf("%d greedy receives refused, want %d", tooMany, 300-256)
		}
	}
	receive(grpcClient(t, gaddr), "fair", "GFair", "Orders")
	wait.For(t, "the fair consumer's receive held", func() error {
		if n := grpcScrape(t, p.Ready.Metrics, "apogee_grpc_long_polls"); n != 257 {
			return fmt.Errorf("%v held", n)
		}
		return nil
	})
	sctx, scancel := callCtx("fair-producer")
	r, err := cli.SendMessage(sctx, &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{grpcMsg("Orders", "o1", []byte("hello"))}})
	scancel()
	if err != nil || r.GetStatus().GetCode() != rmqpb.Code_OK {
		t.Fatalf("send: %v %v", r.GetStatus(), err)
	}
	select {
	case c := <-answers:
		if c != rmqpb.Code_OK {
			t.Fatalf("the fair consumer: %v", c)
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("the fair consumer was not served")
	}
	cancel()

	// (d) Route queries of 30 new topics from one address.
	created, notFound := 0, 0
	for i := 0; i < 30; i++ {
		rctx, rcancel := callCtx("router")
		r, err := cli.QueryRoute(rctx, &rmqpb.QueryRouteRequest{Topic: &rmqpb.Resource{Name: fmt.Sprint("Flood", i)}})
		rcancel()
		if err != nil {
			t.Fatal(err)
		}
		switch r.GetStatus().GetCode() {
		case rmqpb.Code_OK:
			created++
		case rmqpb.Code_TOPIC_NOT_FOUND:
			notFound++
		default:
			t.Fatalf("route: %v", r.GetStatus())
		}
	}
	// Two topics (Quiet, Orders) and two groups (GGreedy, GFair) came
	// from this address before, and the cap counts both: at most 16 of the
	// 30 create their topic; fewer when more came from it before the
	// flood (seen once: 6 spent, likely the two groups' retry topics,
	// which the consumers' calls create on their own schedule).
	if created > 16 || created+notFound != 30 || notFound < 14 {
		t.Errorf("%d routes created their topic, %d refused: want at most 16 created (a cap of 20 from one address, at least 4 spent)", created, notFound)
	}

	m := p.Ready.Metrics
	if v := grpcScrape(t, m, "apogee_grpc_refused_total", `reason="message_size"`); v != 4 {
		t.Errorf("metrics: %v message size refusals, want 4", v)
	}
	if v := grpcScrape(t, m, "apogee_grpc_long_polls_refused_total", `bound="connection"`); v != 44 {
		t.Errorf("metrics: %v long polls refused by the connection's bound, want 44", v)
	}
	info := runtimeInfo(t, p.addr)
	if v := atoi(info["autoCreateRefusedPerSource"]); v != int64(notFound) {
		t.Errorf("runtime info: %d auto-creations refused per source, want %d (the refused routes)", v, notFound)
	}
	// The gRPC front end's figures are in the broker's runtime info too.
	if info["grpcHeldRefusedConn"] != "44" || info["grpcSizeRefused"] != "4" || info["grpcMaxHeldPerClient"] != "256" {
		t.Errorf("runtime info: grpcHeldRefusedConn %q grpcSizeRefused %q grpcMaxHeldPerClient %q; want 44, 4, 256",
			info["grpcHeldRefusedConn"], info["grpcSizeRefused"], info["grpcMaxHeldPerClient"])
	}
	logs := p.RunLog()
	if n := strings.Count(logs, "grpc: a call was refused for a message larger than the maximum"); n != 1 {
		t.Errorf("%d size refusal lines, want 1 (throttled)", n)
	}
	if n := strings.Count(logs, "grpc: a receive or pull was refused"); n != 1 {
		t.Errorf("%d long-poll refusal lines, want 1 (throttled):\n%s", n, logs)
	}
}
