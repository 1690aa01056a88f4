//go:build !unix

package main

import "net"

// reservation, where the system calls to bind without listening are not
// available, is a listener opened at once: connections made while the store
// opens wait in the backlog instead of being refused.
type reservation struct {
	l net.Listener
}

func reserve(addr string) (*reservation, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &reservation{l: l}, nil
}

func (r *reservation) Addr() *net.TCPAddr { return r.l.Addr().(*net.TCPAddr) }

func (r *reservation) Listen() (net.Listener, error) { return r.l, nil }

func (r *reservation) Close() error { return r.l.Close() }
