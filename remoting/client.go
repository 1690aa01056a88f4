package remoting

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

// Client is a connection this process dialled. It has every method of Conn: Invoke,
// InvokeInto, InvokeAsync and InvokeOneway send requests (opaques come from the
// connection's atomic counter, so any number can be in flight), and requests the
// server pushes are served by ClientOptions.Handler.
type Client struct {
	*Conn
	addr string
}

// Dial connects to addr ("host:port") and starts the connection's goroutines. opts
// may be nil.
func Dial(ctx context.Context, addr string, opts *ClientOptions) (*Client, error) {
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	cfg := o.Options.config()
	timeout := o.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("remoting: dial %s: %w", addr, err)
	}
	if o.TLS != nil {
		if nc, err = clientHandshake(ctx, nc, addr, o.TLS, timeout); err != nil {
			return nil, err
		}
	}
	cfg.signer = o.Signer
	h := o.Handler
	if h == nil {
		h = notSupported{}
	}
	c := newConn(nc, &cfg, h, nil)
	c.start()
	return &Client{Conn: c, addr: addr}, nil
}

// clientHandshake runs a TLS client handshake on nc within timeout (or
// ctx's deadline); nc is closed if it fails.
func clientHandshake(ctx context.Context, nc net.Conn, addr string, base *tls.Config, timeout time.Duration) (net.Conn, error) {
	cfg := base
	if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
		cfg = base.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(hctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("remoting: TLS handshake with %s: %w", addr, err)
	}
	return tc, nil
}

// Addr returns the address the client dialled.
func (cl *Client) Addr() string { return cl.addr }

// notSupported answers every pushed request with REQUEST_CODE_NOT_SUPPORTED.
type notSupported struct{}

func (notSupported) ServeRemoting(_ *Conn, req *protocol.Command, resp *Response) Action {
	resp.Cmd.Code = protocol.RespRequestCodeNotSupported
	resp.Cmd.SetRemark("request code not supported by this client")
	return Reply
}

// Pool holds one Client per address, dialled on first use and dialled again when the
// previous connection has closed. Concurrent Gets for one address share one dial.
type Pool struct {
	opts ClientOptions

	mu      sync.Mutex
	entries map[string]*poolEntry
	closed  bool
}

type poolEntry struct {
	ready chan struct{} // closed when the dial finished
	cl    *Client       // nil if the dial failed
	err   error
}

// NewPool returns an empty pool whose connections use opts (which may be nil).
func NewPool(opts *ClientOptions) *Pool {
	p := &Pool{entries: make(map[string]*poolEntry)}
	if opts != nil {
		p.opts = *opts
	}
	return p
}

// Get returns the pool's live connection to addr, dialling one if there is none (or
// the last one closed). A failed dial is not cached: the next Get dials again.
func (p *Pool) Get(ctx context.Context, addr string) (*Client, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrPoolClosed
		}
		e := p.entries[addr]
		if e == nil {
			e = &poolEntry{ready: make(chan struct{})}
			p.entries[addr] = e
			p.mu.Unlock()
			e.cl, e.err = Dial(ctx, addr, &p.opts)
			close(e.ready)
			p.mu.Lock()
			if e.err != nil || p.closed {
				if p.entries[addr] == e {
					delete(p.entries, addr)
				}
				closed := p.closed
				p.mu.Unlock()
				if e.err != nil {
					return nil, e.err
				}
				if closed {
					e.cl.Close()
					return nil, ErrPoolClosed
				}
			} else {
				p.mu.Unlock()
			}
			return e.cl, nil
		}
		p.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("remoting: dial %s: %w", addr, ctx.Err())
		}
		if e.err != nil {
			return nil, e.err
		}
		select {
		case <-e.cl.Done():
		default:
			if !e.cl.closing.Load() {
				return e.cl, nil
			}
		}
		// The connection closed: forget it and dial again.
		p.mu.Lock()
		if p.entries[addr] == e {
			delete(p.entries, addr)
		}
		p.mu.Unlock()
	}
}

// Invoke sends req on the pool's connection to addr (see Conn.Invoke).
func (p *Pool) Invoke(ctx context.Context, addr string, req *protocol.Command) (*protocol.Command, error) {
	cl, err := p.Get(ctx, addr)
	if err != nil {
		return nil, err
	}
	return cl.Invoke(ctx, req)
}

// Close closes every connection of the pool and waits for their goroutines; later
// Gets fail with ErrPoolClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	entries := p.entries
	p.entries = make(map[string]*poolEntry)
	p.mu.Unlock()
	var wait []*Client
	for _, e := range entries {
		<-e.ready
		if e.cl != nil {
			e.cl.Close()
			wait = append(wait, e.cl)
		}
	}
	for _, cl := range wait {
		<-cl.Done()
	}
	return nil
}
