package remoting

import (
	"io"
	"testing"

	"github.com/apogeemq/apogee/protocol"
)

// replayConn serves its wire n times over, at most chunk bytes per Read (what a
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

// BenchmarkReadLargeFrames measures the read path for frames larger than a
// connection's own 64 KiB buffer, delivered 64 KiB per read: the buffer that holds
// such a frame grows as its bytes arrive (and is charged to the receive budget).
func BenchmarkReadLargeFrames(b *testing.B) {
	for _, size := range []int{256 << 10, 4 << 20} {
		b.Run(byteSize(size), func(b *testing.B) {
			req := request(codeEcho, "")
			req.Body = make([]byte, size)
			wire := frame(b, req)
			cfg := (&Options{Logger: quiet}).config()
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			nc := &replayConn{wire: wire, chunk: 64 << 10}
			c := newConn(nc, &cfg, dropHandler, nil)
			nc.n = 2
			_ = c.readFrames() // warm
			b.ResetTimer()
			nc.off, nc.n = 0, b.N-1
			if err := c.readFrames(); err != io.EOF {
				b.Fatal(err)
			}
			if got := c.framesIn.Load(); got != uint64(b.N+3) {
				b.Fatalf("%d frames read, want %d", got, b.N+3)
			}
		})
	}
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return itoa(n>>10) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}
