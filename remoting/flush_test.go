package remoting

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// Responder.Queue and Conn.Flush: answers queued without waking the
// writer, sent once per connection by Flush (the broker's long-poll holder
// answers a round that way). These tests check that nothing is sent before
// the Flush, that a few answers leave in one non-blocking write on the
// flushing goroutine and many through the writer in a few writes (never
// one by one: TestResponsesCoalesced/deferred's rule), that Flush never
// waits for a peer that does not read, that Release runs exactly once, and
// that Flush races with everything else on the connection (-race).

// queueAnswer answers pr with Queue (body "answer to " + its body).
func queueAnswer(t *testing.T, pr parkedReq, rel Releaser) {
	t.Helper()
	var cmd protocol.Command
	pr.r.InitResponse(&cmd, protocol.RespSuccess)
	cmd.Body = []byte("answer to " + pr.body)
	if err := pr.r.Queue(&Response{Cmd: &cmd, Release: rel}); err != nil {
		t.Error(err)
	}
}

// parkRaw sends n park requests (bodies "0".."n-1") on a raw connection
// and waits until they are parked.
func parkRaw(t *testing.T, p *parker, addr string, n int) (net.Conn, []parkedReq) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	var wire []byte
	for i := range n {
		req := request(codePark, strconv.Itoa(i))
		req.Opaque = int32(i)
		wire = append(wire, frame(t, req)...)
	}
	if _, err := nc.Write(wire); err != nil {
		t.Fatal(err)
	}
	return nc, p.wait(t, n)
}

// waitReaderInRead waits until a connection's read goroutine waits in
// Read (its read's answers kicked): nothing else then sends what a test
// queues.
func waitReaderInRead(t *testing.T) {
	t.Helper()
	wait.Until(t, "the read goroutine waiting in Read", func() bool {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range bytes.Split(buf, []byte("\n\n")) {
			if bytes.Contains(g, []byte("[IO wait")) && bytes.Contains(g, []byte("(*Conn).readFrames")) {
				return true
			}
		}
		return false
	})
}

// waitWriterIdle waits until c's writer goroutine waits for work.
func waitWriterIdle(t *testing.T, c *Conn) {
	t.Helper()
	wait.Until(t, "the writer idle", func() bool {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		return c.writerIdle
	})
}

// A few queued answers are not sent before Flush; Flush writes them all
// with one write, on its caller's goroutine (the writer is idle: they are
// out when Flush returns), and each Release runs once.
func TestQueueFlushFew(t *testing.T) {
	checkGoroutines(t)
	p := newParker()
	s := startServer(t, p, nil)
	nc, parked := parkRaw(t, p, s.addr, directMaxFrames)
	sc := serverConn(t, s)
	waitReaderInRead(t)
	waitWriterIdle(t, sc)
	before := sc.Stats()
	var rel countingReleaser
	for i, pr := range parked {
		queueAnswer(t, pr, rel.of(i))
	}
	if st := sc.Stats(); st.Writes != before.Writes || st.FramesOut != before.FramesOut || st.InFlight != 0 {
		t.Fatalf("queued answers written before Flush: before %+v, after %+v", before, st)
	}
	sc.Flush()
	if st := sc.Stats(); st.Writes != before.Writes+1 || st.FramesOut != before.FramesOut+uint64(len(parked)) || st.PendingBytes != 0 {
		t.Fatalf("after Flush: before %+v, after %+v", before, st)
	}
	if err := rel.exactlyOnce(len(parked)); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for range parked {
		r := readResponse(t, nc)
		got[string(r.Body)] = true
	}
	for _, pr := range parked {
		if !got["answer to "+pr.body] {
			t.Fatalf("answers %v", got)
		}
	}
	sc.Flush() // nothing queued: nothing written
	if st := sc.Stats(); st.Writes != before.Writes+1 {
		t.Fatalf("an empty Flush wrote: %+v", st)
	}
}

// Many answers queued back to back and flushed once go through the writer
// in a few writes, not one each.
func TestQueueFlushMany(t *testing.T) {
	checkGoroutines(t)
	p := newParker()
	s := startServer(t, p, &Options{ReadBufferSize: 64 << 10})
	const n = 500
	nc, parked := parkRaw(t, p, s.addr, n)
	sc := serverConn(t, s)
	before := sc.Stats()
	var rel countingReleaser
	for i, pr := range parked {
		queueAnswer(t, pr, rel.of(i))
	}
	sc.Flush()
	got := 0
	for range n {
		if r := readResponse(t, nc); bytes.HasPrefix(r.Body, []byte("answer to ")) {
			got++
		}
	}
	wait.Until(t, "the writer's counters", func() bool { return sc.Stats().FramesOut == before.FramesOut+n })
	after := sc.Stats()
	writes := after.Writes - before.Writes
	t.Logf("%d queued answers, one Flush: %d writes", n, writes)
	// One write, or a few when more than 64 KiB queued woke the writer
	// early; one per answer is what must not be.
	if got != n || writes > n/10 || after.InFlight != 0 || after.PendingBytes != 0 {
		t.Fatalf("%d answers, %d writes; before %+v after %+v", got, writes, before, after)
	}
	wait.Until(t, "every release", func() bool { return rel.exactlyOnce(n) == nil })
}

// Flush never waits for the peer: answers larger than the sockets hold,
// queued for a peer that does not read, are flushed at once; the writer
// sends them whole and in order once the peer reads.
func TestFlushDoesNotWaitForPeer(t *testing.T) {
	checkGoroutines(t)
	p := newParker()
	s := startServer(t, p, nil)
	const n = 4
	nc, parked := parkRaw(t, p, s.addr, n)
	sc := serverConn(t, s)
	big := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB
	byBody := map[string]int{}
	for i, pr := range parked {
		var cmd protocol.Command
		pr.r.InitResponse(&cmd, protocol.RespSuccess)
		cmd.Body = []byte(pr.body)
		// Zero-copy views, written as they are.
		if err := pr.r.Queue(&Response{Cmd: &cmd, Body: [][]byte{big}}); err != nil {
			t.Fatal(err)
		}
		byBody[pr.body] = i
	}
	sc.Flush() // 16 MiB for a peer that reads nothing yet: must return
	for range n {
		r := readResponse(t, nc)
		if len(r.Body) != 1+len(big) || !bytes.Equal(r.Body[1:], big) {
			t.Fatalf("answer of %d bytes", len(r.Body))
		}
		if _, ok := byBody[string(r.Body[:1])]; !ok {
			t.Fatalf("answer %q", r.Body[:1])
		}
		delete(byBody, string(r.Body[:1]))
	}
	wait.Until(t, "the writer's counters", func() bool { return sc.Stats().PendingBytes == 0 })
}

// Queue on a closed connection fails with ErrClosed and runs Release once;
// Flush there does nothing.
func TestQueueClosed(t *testing.T) {
	checkGoroutines(t)
	p := newParker()
	s := startServer(t, p, nil)
	nc, parked := parkRaw(t, p, s.addr, 1)
	sc := serverConn(t, s)
	nc.Close()
	<-sc.Done()
	var rel countingReleaser
	var cmd protocol.Command
	parked[0].r.InitResponse(&cmd, protocol.RespSuccess)
	if err := parked[0].r.Queue(&Response{Cmd: &cmd, Release: rel.of(0)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Queue on a closed connection: %v", err)
	}
	sc.Flush()
	if err := rel.exactlyOnce(1); err != nil {
		t.Fatal(err)
	}
}

// Answers queued and flushed from two goroutines while the peer keeps
// echo requests coming (answered by the read goroutine, which kicks the
// same queue) all arrive, each once, and nothing stays owed.
func TestFlushConcurrent(t *testing.T) {
	checkGoroutines(t)
	p := newParker()
	s := startServer(t, p, nil)
	cl := dial(t, s.addr, nil)
	const parks, echoes = 400, 400
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range parks {
		wg.Add(1)
		if err := cl.InvokeAsync(request(codePark, strconv.Itoa(i)), 10*time.Second, func(resp *protocol.Command, err error) {
			if err != nil || string(resp.Body) != "answer to "+strconv.Itoa(i) {
				failed.Add(1)
			}
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	parked := p.wait(t, parks)
	sc := serverConn(t, s)
	var rel countingReleaser
	rels := make([]Releaser, parks)
	for i := range parked {
		rels[i] = rel.of(i)
	}
	var answerers sync.WaitGroup
	for a := range 2 {
		answerers.Add(1)
		go func() {
			defer answerers.Done()
			for i := a; i < parks; i += 2 {
				queueAnswer(t, parked[i], rels[i])
				if i%3 != 2 {
					continue
				}
				sc.Flush()
			}
			sc.Flush()
		}()
	}
	for i := range echoes {
		wg.Add(1)
		body := "echo " + strconv.Itoa(i)
		if err := cl.InvokeAsync(request(codeEcho, body), 10*time.Second, func(resp *protocol.Command, err error) {
			if err != nil || string(resp.Body) != body {
				failed.Add(1)
			}
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	answerers.Wait()
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d calls failed", failed.Load())
	}
	wait.For(t, "nothing owed", func() error {
		if st := sc.Stats(); st.InFlight != 0 || st.PendingBytes != 0 {
			return fmt.Errorf("%+v", st)
		}
		return rel.exactlyOnce(parks)
	})
}
