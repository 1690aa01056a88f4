package grpcfe

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// The buffers of gRPC's messages (the server's, the forwarder's, and the
// benchmark clients' through BufferPool).
//
// grpc-go's default pool has five tiers (256 B, 4 KiB, 16 KiB, 32 KiB,
// 1 MiB) and clears a buffer's whole capacity on every Get: a request of
// 32 messages of 1 KiB (33 KB) takes a 1 MiB buffer and clears it, which
// was a quarter of the process's CPU in `apogee-bench produce --protocol
// grpc --batch 32`; a 1 KiB send's request takes a 4 KiB buffer. This
// pool has a tier for every power of two from 256 B to 8 MiB (above the
// broker's 4 MiB message cap plus its headroom), so a buffer is less than
// twice what it holds, and a Get clears what it hands out (the length
// asked for, as a new slice would be), not the whole capacity: what lies
// beyond the length is never read (grpc-go reads into a buffer of the
// message's length and marshals by appending to an empty one).

const (
	minPoolShift = 8  // the smallest tier: 256 B
	maxPoolShift = 23 // the largest: 8 MiB; larger buffers are not pooled
)

// tieredPool is a mem.BufferPool with a sync.Pool per power of two.
type tieredPool struct {
	tiers [maxPoolShift - minPoolShift + 1]sync.Pool
}

var bufPool = new(tieredPool)

// BufferPool returns the pool the front end's server uses for gRPC message
// buffers, for the clients of the same process (apogee-bench's) to use too
// (grpc's experimental.WithBufferPool).
func BufferPool() mem.BufferPool { return bufPool }

// tierOf is the index of the smallest tier holding n bytes, or -1 when n
// is beyond the largest.
func tierOf(n int) int {
	if n <= 1<<minPoolShift {
		return 0
	}
	if n > 1<<maxPoolShift {
		return -1
	}
	return bits.Len(uint(n-1)) - minPoolShift
}

// Get returns a buffer of length n, zeroed.
func (p *tieredPool) Get(n int) *[]byte {
	t := tierOf(n)
	if t < 0 {
		b := make([]byte, n)
		return &b
	}
	if v, ok := p.tiers[t].Get().(*[]byte); ok {
		b := (*v)[:n]
		clear(b)
		*v = b
		return v
	}
	b := make([]byte, n, 1<<(t+minPoolShift))
	return &b
}

// Put keeps b for a later Get if its capacity is one of the tiers'.
func (p *tieredPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minPoolShift || c > 1<<maxPoolShift || c&(c-1) != 0 {
		return
	}
	*b = (*b)[:0]
	p.tiers[bits.Len(uint(c))-1-minPoolShift].Put(b)
}
