package remoting

import (
	"io"
	"strconv"
	"testing"

	"github.com/apogeemq/apogee/protocol"
)

// replayConn serves its wire n more times, at most chunk bytes per Read (what a
// socket delivers), then io.EOF.
type replayConn struct {
	discardConn
	wire   []byte
	off, n int
	chunk  int
}

func (c *replayConn) Read(p []byte) (int, error) {
	if c.off == len(c.wire) {
		if c.n == 0 {
			return 0, io.EOF
		}
		c.n--
		c.off = 0
	}
	k := copy(p[:min(len(p), c.chunk)], c.wire[c.off:])
	c.off += k
	return k, nil
}

var dropHandler = HandlerFunc(func(*Conn, *protocol.Command, *Response) Action { return NoReply })

// largeFrameReader returns a server-side connection (charging a receive budget) that
// reads frames with a body of size bytes, 64 KiB per read.
func largeFrameReader(tb testing.TB, size int) (*Conn, *replayConn) {
	req := request(codeEcho, "")
	req.Body = make([]byte, size)
	nc := &replayConn{wire: frame(tb, req), chunk: 64 << 10}
	cfg := (&Options{Logger: quiet, ReceiveBudget: NewReceiveBudget(64<<20, quiet)}).config()
	return newConn(nc, &cfg, dropHandler, nil), nc
}

// readN reads n frames (after the ones already read) and checks the count.
func readN(tb testing.TB, c *Conn, nc *replayConn, n int) {
	before := c.framesIn.Load()
	nc.off, nc.n = 0, n-1
	if err := c.readFrames(); err != io.EOF {
		tb.Fatal(err)
	}
	if got := c.framesIn.Load() - before; got != uint64(n) {
		tb.Fatalf("%d frames read, want %d", got, n)
	}
	if st := c.cfg.budget.Stats(); st.InUse != 0 {
		tb.Fatalf("%d bytes still reserved", st.InUse)
	}
}

// Frames up to 1 MiB reuse pooled buffers: the read path allocates nothing for them
// once warm (a pool emptied by a GC costs one allocation now and then).
func TestReadMediumFramesAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, size := range []int{100 << 10, 900 << 10} {
		c, nc := largeFrameReader(t, size)
		readN(t, c, nc, 3)
		if allocs := testing.AllocsPerRun(100, func() { readN(t, c, nc, 1) }); allocs != 0 {
			t.Errorf("%d-byte frames: %v allocations per frame", size, allocs)
		}
	}
}

// BenchmarkReadLargeFrames measures the read path for frames larger than a
// connection's own 64 KiB buffer, delivered 64 KiB per read: each is reserved in the
// receive budget and its buffer grows (pooled up to 1 MiB) as its bytes arrive.
func BenchmarkReadLargeFrames(b *testing.B) {
	for _, size := range []int{256 << 10, 4 << 20} {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			c, nc := largeFrameReader(b, size)
			readN(b, c, nc, 3)
			b.SetBytes(int64(len(nc.wire)))
			b.ReportAllocs()
			b.ResetTimer()
			readN(b, c, nc, b.N)
		})
	}
}
