//go:build unix

package main

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// reservation is a TCP address that is bound but not listening yet. The
// broker binds its addresses first, so a port in use (or a bad address) is
// reported at once, before a store recovery that may take seconds, and it
// listens only once the store is open: until then a client's connection is
// refused (the kernel answers with a reset), and it retries or moves on,
// instead of being accepted into a backlog nobody serves and waiting there.
//
// Two processes can each reserve the same port (SO_REUSEADDR, which a
// restart needs while connections of the last run are in TIME_WAIT, lets
// unlistened sockets share it); the second one to listen then fails with
// "address already in use".
type reservation struct {
	fd   int
	addr *net.TCPAddr
}

// reserve resolves addr ("host:port") and binds a socket to it. A wildcard
// host (empty, "0.0.0.0" or "::") is every interface, IPv4 and IPv6, as with
// net.Listen.
func reserve(addr string) (*reservation, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	if ta.IP == nil || ta.IP.IsUnspecified() {
		r, err := bindSocket(unix.AF_INET6, &unix.SockaddrInet6{Port: ta.Port}, true)
		if errors.Is(err, unix.EAFNOSUPPORT) { // a kernel without IPv6
			r, err = bindSocket(unix.AF_INET, &unix.SockaddrInet4{Port: ta.Port}, false)
		}
		if err != nil {
			return nil, err
		}
		// Report the wildcard the caller gave ("0.0.0.0:10911").
		ip := ta.IP
		if ip == nil {
			ip = net.IPv6unspecified
		}
		r.addr.IP = ip
		return r, nil
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		return bindSocket(unix.AF_INET, &unix.SockaddrInet4{Port: ta.Port, Addr: [4]byte(ip4)}, false)
	}
	sa := &unix.SockaddrInet6{Port: ta.Port, Addr: [16]byte(ta.IP.To16())}
	if ta.Zone != "" {
		ifc, err := net.InterfaceByName(ta.Zone)
		if err != nil {
			return nil, fmt.Errorf("zone of %s: %w", addr, err)
		}
		sa.ZoneId = uint32(ifc.Index)
	}
	r, err := bindSocket(unix.AF_INET6, sa, false)
	if err == nil {
		r.addr.Zone = ta.Zone
	}
	return r, err
}

// bindSocket creates a socket of family, sets SO_REUSEADDR (and clears
// IPV6_V6ONLY for a dual-stack wildcard) and binds it to sa.
func bindSocket(family int, sa unix.Sockaddr, dualStack bool) (*reservation, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	fail := func(call string, err error) (*reservation, error) {
		unix.Close(fd)
		return nil, os.NewSyscallError(call, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fail("setsockopt", err)
	}
	if dualStack {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return fail("setsockopt", err)
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fail("bind", err)
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	r := &reservation{fd: fd}
	switch b := bound.(type) {
	case *unix.SockaddrInet4:
		r.addr = &net.TCPAddr{IP: net.IP(b.Addr[:]).To16(), Port: b.Port}
	case *unix.SockaddrInet6:
		r.addr = &net.TCPAddr{IP: net.IP(b.Addr[:]), Port: b.Port}
	default:
		return fail("getsockname", unix.EAFNOSUPPORT)
	}
	return r, nil
}

// Addr is the bound address, with the real port when addr asked for 0.
func (r *reservation) Addr() *net.TCPAddr { return r.addr }

// Listen starts accepting connections and hands the socket over to the
// returned listener; the reservation is spent either way.
func (r *reservation) Listen() (net.Listener, error) {
	fd := r.fd
	r.fd = -1
	if err := unix.Listen(fd, listenBacklog); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen %s: %w", r.addr, os.NewSyscallError("listen", err))
	}
	f := os.NewFile(uintptr(fd), "tcp:"+r.addr.String())
	defer f.Close() // FileListener keeps a duplicate
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", r.addr, err)
	}
	return l, nil
}

// Close releases a reservation that was not listened on.
func (r *reservation) Close() error {
	if r.fd < 0 {
		return nil
	}
	fd := r.fd
	r.fd = -1
	return unix.Close(fd)
}

// listenBacklog is what net.Listen asks for on Linux by default; the kernel
// caps it at net.core.somaxconn.
const listenBacklog = 4096
