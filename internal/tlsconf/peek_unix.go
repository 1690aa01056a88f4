//go:build unix

package tlsconf

import (
	"io"
	"net"
	"syscall"
)

// peekTCP reads nc's first byte without consuming it (recv with MSG_PEEK,
// waiting in the runtime's poller, so nc's read deadline applies). ok is
// false when nc is not a TCP connection, nor one that passes a TCP
// connection's bytes through and says so with a TCPConn method
// (remoting.LimitListener's).
func peekTCP(nc net.Conn) (b byte, ok bool, err error) {
	tc, isTCP := nc.(*net.TCPConn)
	if w, wraps := nc.(interface{ TCPConn() *net.TCPConn }); !isTCP && wraps {
		tc = w.TCPConn()
		isTCP = tc != nil
	}
	if !isTCP {
		return 0, false, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0, true, err
	}
	var buf [1]byte
	var n int
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, perr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK)
		return perr != syscall.EAGAIN && perr != syscall.EWOULDBLOCK
	})
	switch {
	case err != nil:
		return 0, true, err
	case perr != nil:
		return 0, true, perr
	case n == 0:
		return 0, true, io.EOF
	}
	return buf[0], true, nil
}
