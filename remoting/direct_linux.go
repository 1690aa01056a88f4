package remoting

import (
	"net"
	"syscall"
	"unsafe"
)

// directWriter writes a batch with one non-blocking writev on the socket,
// for the read goroutine (Conn.kick): it never waits for room in the
// socket's send buffer, so a read goroutine never blocks on its peer (two
// peers whose read goroutines both waited to write, each with a full
// buffer, would never read again). What the call does not take, the
// writer goroutine writes.
type directWriter struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool // do, bound once: no allocation per write
	iov []syscall.Iovec
	pcs [][]byte
	n   int
}

// maxDirectPieces bounds a direct write's pieces (IOV_MAX is 1024); a
// batch of more goes to the writer.
const maxDirectPieces = 1024

func newDirectWriter(nc net.Conn) *directWriter {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	d := &directWriter{rc: rc}
	d.fn = d.do
	return d
}

// write writes what it can of b now and returns how many bytes that was
// (0 when the socket has no room, when the connection failed, or when b has
// too many pieces).
func (d *directWriter) write(b *batch) int {
	pcs := b.pieces(d.pcs[:0])
	d.pcs = pcs
	defer clear(pcs) // drop references to views
	if len(pcs) == 0 || len(pcs) > maxDirectPieces {
		return 0
	}
	iov := d.iov[:0]
	for _, p := range pcs {
		v := syscall.Iovec{Base: &p[0]}
		v.SetLen(len(p))
		iov = append(iov, v)
	}
	d.iov = iov
	defer clear(iov)
	d.n = 0
	// An error (a closed connection, or the deadline of the writer's last
	// write, set a write timeout before it, expired) comes before the call
	// is tried: n stays 0 and the writer's own write sets a new deadline.
	_ = d.rc.Write(d.fn)
	return d.n
}

// do is the RawConn callback: one writev, never waiting (it reports done
// whatever the call returned; EAGAIN and errors leave d.n at 0, and the
// writer's own write meets the error again).
func (d *directWriter) do(fd uintptr) bool {
	for {
		n, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&d.iov[0])), uintptr(len(d.iov)))
		if e == syscall.EINTR {
			continue
		}
		if e == 0 {
			d.n = int(n)
		}
		return true
	}
}
