package benchmark

import (
	"fmt"
	"io"
	"net"
	"testing"
)

// BenchmarkLimitLoopbackTCP is the machine's loopback TCP throughput: one
// connection, writes of the given size, a reader draining the other end.
// Broker results are reported as a ratio to it in docs/benchmarks.md.
func BenchmarkLimitLoopbackTCP(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("write=%d", size), func(b *testing.B) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			done := make(chan int64)
			go func() {
				c, err := l.Accept()
				if err != nil {
					done <- 0
					return
				}
				n, _ := io.Copy(io.Discard, c)
				c.Close()
				done <- n
			}()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
			if n := <-done; n != int64(b.N*size) {
				b.Fatalf("read %d of %d bytes", n, b.N*size)
			}
		})
	}
}
