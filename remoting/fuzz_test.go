package remoting

import (
	"errors"
	"io"
	"testing"

	"github.com/apogeemq/apogee/protocol"
)

// chunkConn serves data in chunks of a fixed size, then io.EOF. check, if set, runs
// before each Read.
type chunkConn struct {
	discardConn
	data  []byte
	chunk int
	check func()
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if c.check != nil {
		c.check()
	}
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.data[:min(len(c.data), c.chunk)])
	c.data = c.data[n:]
	return n, nil
}

// fuzzHandler echoes, panics on codePanic, and defers-then-replies on codePark.
var fuzzHandler = HandlerFunc(func(c *Conn, req *protocol.Command, resp *Response) Action {
	switch req.Code {
	case codePanic:
		panic("fuzz")
	case codePark:
		r := c.Defer(req)
		var cmd protocol.Command
		r.InitResponse(&cmd, protocol.RespSuccess)
		cmd.Body = req.Body
		_ = r.Reply(&Response{Cmd: &cmd})
		return Deferred
	}
	return echo(req, resp)
})

// FuzzConnInput feeds arbitrary bytes, in arbitrary read sizes, through a connection's
// read path: it must never panic, never grow its buffer past the class of the largest
// frame, never hold more than max(the largest pooled class, twice what it received),
// never more than it reserved, give back all it reserved in the
// receive budget, and end with a protocol error, EOF, or a clean stop.
func FuzzConnInput(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed, uint8(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		const maxFrame = 200 << 10 // three big classes
		nc := &chunkConn{data: data, chunk: int(chunk)*16 + 1}
		budget := NewReceiveBudget(1<<20, quiet)
		cfg := (&Options{Logger: quiet, MaxFrameSize: maxFrame, ReadBufferSize: 64, ReceiveBudget: budget}).config()
		c := newConn(nc, &cfg, fuzzHandler, nil)
		nc.check = func() {
			if held := len(c.rbuf); held > bigClassSize(pooledClasses-1) && held > 2*(c.w-c.r) {
				t.Fatalf("%d-byte buffer for %d bytes received", held, c.w-c.r)
			}
			if held := len(c.rbuf); held > bigClassSize(bigClass(maxFrame+4)) {
				t.Fatalf("read buffer grew to %d", held)
			}
			if c.big != nil && (budget.Stats().InUse != int64(bigClassSize(c.bigFinal)) || c.bigClass > c.bigFinal) {
				t.Fatalf("reserved %d for a class-%d frame, holding class %d", budget.Stats().InUse, c.bigFinal, c.bigClass)
			}
		}
		err := c.readFrames()
		var pe *protocolError
		if err != io.EOF && !errors.As(err, &pe) {
			t.Fatalf("readFrames: %v", err)
		}
		c.releaseRead()
		if st := budget.Stats(); st.InUse != 0 || st.Waiting != 0 {
			t.Fatalf("budget after the connection: %+v", st)
		}
		if c.inflight.Load() != 0 {
			t.Fatalf("in flight %d", c.inflight.Load())
		}
		b := c.pend
		if err := c.writeBatch(b, 0); err != nil {
			t.Fatal(err)
		}
		if int64(b.owed) != c.owed.Load() || b.frames > int(c.framesIn.Load()) {
			t.Fatalf("accounting: batch %d frames %d owed, conn %d in %d owed", b.frames, b.owed, c.framesIn.Load(), c.owed.Load())
		}
	})
}

func fuzzSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	seeds = append(seeds, echoWire(tb, 3, 10))
	park := request(codePark, "p")
	panicReq := request(codePanic, "")
	oneway := request(codeEcho, "o")
	oneway.Flag = protocol.FlagOneway
	resp := request(codeEcho, "r")
	resp.Flag = protocol.FlagResponse
	bin := request(codeEcho, "b")
	bin.SerializeType = protocol.SerializeRocketMQ
	bin.Ext.SetString("k", "v")
	var mixed []byte
	for _, c := range []*protocol.Command{park, panicReq, oneway, resp, bin} {
		mixed = append(mixed, frame(tb, c)...)
	}
	// A frame larger than the own buffer (through the receive budget) followed by a
	// small one, and one cut off half way.
	bigThenSmall := append(echoWire(tb, 1, 150<<10), echoWire(tb, 1, 10)...)
	seeds = append(seeds, bigThenSmall, bigThenSmall[:100<<10])
	seeds = append(seeds, mixed,
		[]byte{0x80, 0, 0, 0, 0, 0, 0, 0},
		[]byte{0, 0, 0, 3, 1, 2, 3},
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		[]byte{0, 0, 0, 100, 0, 0, 0, 90, '{'},
		[]byte{0, 0, 1, 0, 0, 0, 0, 2, '{', '}'},
		nil)
	return seeds
}
