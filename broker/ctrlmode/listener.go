package ctrlmode

import (
	"net"
	"sync"
)

// handoff shares one listener among the broker instances a node runs one
// after the other: the node keeps its addresses while it reopens the broker
// in another role. One goroutine accepts; each instance serves a sub
// listener, whose Close (the broker's Shutdown) leaves the real listener
// open. A connection accepted between two instances waits for the next.
type handoff struct {
	ln    net.Listener
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newHandoff(ln net.Listener) *handoff {
	h := &handoff{ln: ln, conns: make(chan net.Conn), done: make(chan struct{})}
	go h.accept()
	return h
}

func (h *handoff) accept() {
	for {
		c, err := h.ln.Accept()
		if err != nil {
			h.close()
			return
		}
		select {
		case h.conns <- c:
		case <-h.done:
			c.Close()
			return
		}
	}
}

// close closes the real listener; every sub listener's Accept fails.
func (h *handoff) close() {
	h.once.Do(func() {
		close(h.done)
		h.ln.Close()
	})
}

// sub returns a listener for one broker instance.
func (h *handoff) sub() net.Listener {
	return &subListener{h: h, closed: make(chan struct{})}
}

type subListener struct {
	h      *handoff
	closed chan struct{}
	once   sync.Once
}

func (s *subListener) Accept() (net.Conn, error) {
	select {
	case c := <-s.h.conns:
		return c, nil
	case <-s.closed:
		return nil, net.ErrClosed
	case <-s.h.done:
		return nil, net.ErrClosed
	}
}

func (s *subListener) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

func (s *subListener) Addr() net.Addr { return s.h.ln.Addr() }
