package remoting

import (
	"context"
	"io"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

// discardConn is a net.Conn that swallows writes; the server path is driven by hand.
type discardConn struct {
	written int64
	writes  int
}

func (c *discardConn) Read([]byte) (int, error) { return 0, io.EOF }
func (c *discardConn) Write(p []byte) (int, error) {
	c.written += int64(len(p))
	c.writes++
	return len(p), nil
}
func (c *discardConn) Close() error                     { return nil }
func (c *discardConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *discardConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *discardConn) SetDeadline(time.Time) error      { return nil }
func (c *discardConn) SetReadDeadline(time.Time) error  { return nil }
func (c *discardConn) SetWriteDeadline(time.Time) error { return nil }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// driver runs a server-side Conn without goroutines: frames are copied into its read
// buffer, handled, and the queued batch is written to a discardConn.
type driver struct {
	c   *Conn
	nc  *discardConn
	cfg config
}

func newDriver(h Handler) *driver {
	d := &driver{nc: &discardConn{}}
	d.cfg = (&Options{Logger: quiet, ReadBufferSize: 256 << 10}).config()
	d.c = newConn(d.nc, &d.cfg, h, nil)
	return d
}

// round handles every frame in wire and writes the answers in one batch.
func (d *driver) round(tb testing.TB, wire []byte) {
	c := d.c
	c.r, c.w = 0, copy(c.rbuf, wire)
	for {
		ok, err := c.handleNext()
		if err != nil {
			tb.Fatal(err)
		}
		if !ok {
			break
		}
	}
	c.queued.Store(false)
	b := c.pend
	if err := c.writeBatch(b, 0); err != nil {
		tb.Fatal(err)
	}
	c.owed.Add(-int64(b.owed))
	b.reset()
}

// nopRelease is a pooled-object stand-in: a pointer Releaser costs no allocation.
type nopRelease struct{ n int }

func (r *nopRelease) Release() { r.n++ }

// viewsHandler answers with a header, a small owned body and two zero-copy views.
type viewsHandler struct {
	views [][]byte
	rel   nopRelease
	resp  protocol.PullMessageResponse
}

func (h *viewsHandler) ServeRemoting(_ *Conn, req *protocol.Command, resp *Response) Action {
	h.resp.Encode(&resp.Cmd.Ext)
	resp.Body = h.views
	resp.Release = &h.rel
	return Reply
}

func echoWire(tb testing.TB, n, bodyLen int) []byte {
	var wire []byte
	for i := range n {
		req := request(codeEcho, string(make([]byte, bodyLen)))
		req.Opaque = int32(i)
		req.Ext.SetString("topic", "TopicTest")
		req.Ext.SetInt("queueId", 3)
		wire = append(wire, frame(tb, req)...)
	}
	return wire
}

// The server side of a request (decode, handler, encode the response, vectored write)
// allocates nothing once the connection is warm.
func TestServerPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	cases := []struct {
		name string
		h    Handler
		wire []byte
	}{
		{"echo 1 KiB", echoHandler, echoWire(t, 1, 1024)},
		{"echo 64 pipelined", echoHandler, echoWire(t, 64, 1024)},
		{"views", &viewsHandler{views: [][]byte{make([]byte, 4096), make([]byte, 300)},
			resp: protocol.PullMessageResponse{NextBeginOffset: 1266, MaxOffset: 1300}}, echoWire(t, 16, 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(tc.h)
			for range 10 {
				d.round(t, tc.wire)
			}
			allocs := testing.AllocsPerRun(500, func() { d.round(t, tc.wire) })
			if allocs != 0 {
				t.Fatalf("%v allocations per round", allocs)
			}
			if d.nc.written == 0 {
				t.Fatal("nothing written")
			}
		})
	}
	t.Run("deferred reply", func(t *testing.T) {
		var r Responder
		d := newDriver(HandlerFunc(func(c *Conn, req *protocol.Command, _ *Response) Action {
			r = c.Defer(req)
			return Deferred
		}))
		wire := echoWire(t, 1, 64)
		var cmd protocol.Command
		resp := Response{Cmd: &cmd}
		round := func() {
			d.round(t, wire) // parks the request; nothing written
			r.InitResponse(&cmd, protocol.RespSuccess)
			if err := r.Reply(&resp); err != nil {
				t.Fatal(err)
			}
			d.round(t, nil) // writes the reply
		}
		for range 10 {
			round()
		}
		if allocs := testing.AllocsPerRun(500, round); allocs != 0 {
			t.Fatalf("%v allocations per deferred round", allocs)
		}
		if st := d.c.Stats(); st.InFlight != 0 {
			t.Fatalf("in flight %d", st.InFlight)
		}
	})
}

// BenchmarkServerHandle measures the server side alone: 64 pipelined 1 KiB echo
// requests decoded, answered and written per round, as one read and one writev.
func BenchmarkServerHandle(b *testing.B) {
	const batch = 64
	wire := echoWire(b, batch, 1024)
	d := newDriver(echoHandler)
	d.round(b, wire)
	b.ReportAllocs()
	b.SetBytes(int64(len(wire) / batch))
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		d.round(b, wire)
	}
}

// BenchmarkInvokeSerial: one 1 KiB request in flight at a time (round-trip latency).
func BenchmarkInvokeSerial(b *testing.B) {
	s := NewServer(echoHandler, &Options{Logger: quiet})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(l)
	defer s.Close()
	cl, err := Dial(context.Background(), l.Addr().String(), &ClientOptions{Options: Options{Logger: quiet}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { cl.Close(); <-cl.Done() }()
	var req, resp protocol.Command
	body := make([]byte, 1024)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req.InitRequest(codeEcho, 0)
		req.Body = body
		if err := cl.InvokeInto(ctx, &req, &resp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInvoke: 1 KiB request and response over loopback with 64 requests in flight
// on one connection (both ends in this process, so allocs/op counts both sides).
func BenchmarkInvoke(b *testing.B) {
	s := NewServer(echoHandler, &Options{Logger: quiet})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(l)
	defer s.Close()
	cl, err := Dial(context.Background(), l.Addr().String(), &ClientOptions{Options: Options{Logger: quiet}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { cl.Close(); <-cl.Done() }()
	const inFlight = 64
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((inFlight + procs - 1) / procs)
	body := make([]byte, 1024)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(2 * 1024)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var req, resp protocol.Command
		for pb.Next() {
			req.InitRequest(codeEcho, 0)
			req.Body = body
			if err := cl.InvokeInto(ctx, &req, &resp); err != nil {
				b.Error(err)
				return
			}
			if len(resp.Body) != len(body) {
				b.Errorf("body of %d bytes", len(resp.Body))
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
	st := cl.Stats()
	b.ReportMetric(float64(st.FramesOut)/float64(max(st.Writes, 1)), "client-frames/write")
	s.Range(func(c *Conn) bool {
		st := c.Stats()
		b.ReportMetric(float64(st.FramesOut)/float64(max(st.Writes, 1)), "server-frames/write")
		return false
	})
}
