package remoting

import (
	"bytes"
	"net"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// The read goroutine writes the answers of a read itself when the writer is
// idle (Conn.kick, writeDirect). These tests cover what that must keep: no
// read goroutine waits for its peer to read, what one write could not take
// is written whole and in order by the writer, and answers given by a
// request's own handler through a Responder leave at the read's end.

// TestDirectWritePartial: answers to a peer that does not read yet fill
// the socket; the read goroutine's direct write that finds too little room
// writes part of its batch and the writer the rest, while the read
// goroutine goes on serving the peer's requests: all of them are served
// before the peer reads a byte, and every answer arrives whole and in
// order.
func TestDirectWritePartial(t *testing.T) {
	checkGoroutines(t)
	var served atomic.Int32
	h := HandlerFunc(func(_ *Conn, req *protocol.Command, resp *Response) Action {
		served.Add(1)
		return echo(req, resp)
	})
	s := startServer(t, h, nil)
	nc, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sc := serverConn(t, s)
	// 512 answers of 32 KiB, 16 MiB: more than the sockets hold.
	const n = 512
	body := bytes.Repeat([]byte("0123456789abcdef"), 2<<10)
	var wire []byte
	for i := range n {
		req := request(codeEcho, string(body))
		req.Opaque = int32(i)
		wire = append(wire, frame(t, req)...)
	}
	werr := make(chan error, 1)
	go func() { // blocks until the server has read it all
		_, err := nc.Write(wire)
		werr <- err
	}()
	wait.Until(t, "every request served before the peer reads", func() bool { return served.Load() == n })
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if st := sc.Stats(); st.FramesOut == n {
		t.Fatalf("every answer written before the peer read anything: %+v", st)
	}
	for i := range n {
		r := readResponse(t, nc)
		if r.Opaque != int32(i) || !bytes.Equal(r.Body, body) {
			t.Fatalf("answer %d: opaque %d, %d body bytes", i, r.Opaque, len(r.Body))
		}
	}
	wait.Until(t, "the writer's counters", func() bool { return sc.Stats().FramesOut == n })
	if st := sc.Stats(); st.PendingBytes != 0 {
		t.Fatalf("stats after the answers: %+v", st)
	}
}

// TestDirectDeferredByOwnHandler: a handler that defers its request and
// answers it through the Responder before it returns (the broker's send
// handler with asynchronous flushing) has its answers leave with the
// read's others, as inline answers do: 200 pipelined requests take a
// handful of writes, not 200.
func TestDirectDeferredByOwnHandler(t *testing.T) {
	checkGoroutines(t)
	h := HandlerFunc(func(c *Conn, req *protocol.Command, _ *Response) Action {
		r := c.Defer(req)
		var cmd protocol.Command
		r.InitResponse(&cmd, protocol.RespSuccess)
		cmd.Body = req.Body
		if err := r.Reply(&Response{Cmd: &cmd}); err != nil {
			t.Error(err)
		}
		return Deferred
	})
	s := startServer(t, h, &Options{ReadBufferSize: 64 << 10})
	nc, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const n = 200
	var wire []byte
	for i := range n {
		req := request(codeEcho, "hello "+strconv.Itoa(i))
		req.Opaque = int32(i)
		wire = append(wire, frame(t, req)...)
	}
	if _, err := nc.Write(wire); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		resp := readResponse(t, nc)
		if resp.Opaque != int32(i) || string(resp.Body) != "hello "+strconv.Itoa(i) {
			t.Fatalf("response %d: %v %q", i, resp, resp.Body)
		}
	}
	sc := serverConn(t, s)
	wait.Until(t, "the writer's counters", func() bool { return sc.Stats().FramesOut == n })
	st := sc.Stats()
	t.Logf("%d answers given through their Responders by their handlers: %+v", n, st)
	// As TestResponsesCoalesced/inline: how many reads the 200 take
	// depends on scheduling; one write per answer is what must not be.
	if st.Writes > n/4 || st.InFlight != 0 {
		t.Fatalf("%d answers took %d writes (%+v)", n, st.Writes, st)
	}
}

// TestDirectReplyWhileHandlerRuns: a Responder handed to another goroutine
// that answers before the handler returns (the answer is queued without
// waking the writer, as the handler's own would be) is still sent without
// any further request: the read's end sends it.
func TestDirectReplyWhileHandlerRuns(t *testing.T) {
	checkGoroutines(t)
	h := HandlerFunc(func(c *Conn, req *protocol.Command, _ *Response) Action {
		r := c.Defer(req)
		body := bytes.Clone(req.Body)
		done := make(chan struct{})
		go func() {
			defer close(done)
			var cmd protocol.Command
			r.InitResponse(&cmd, protocol.RespSuccess)
			cmd.Body = body
			_ = r.Reply(&Response{Cmd: &cmd})
		}()
		<-done
		runtime.Gosched()
		return Deferred
	})
	s := startServer(t, h, nil)
	cl := dial(t, s.addr, nil)
	for i := range 50 {
		resp, err := cl.Invoke(testCtx(t), request(codeEcho, "x"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		if string(resp.Body) != "x"+strconv.Itoa(i) {
			t.Fatalf("answer %d: %q", i, resp.Body)
		}
	}
}
