package remoting

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

// call is one outstanding request this side sent, keyed by opaque in Conn.calls.
// Whoever removes it from the map (the read goroutine with the response, the closing
// goroutine, a timeout, a cancelled context) completes it, exactly once.
type call struct {
	resp  *protocol.Command // Invoke: where the response is copied
	fn    func(*protocol.Command, error)
	timer *time.Timer // InvokeAsync timeout; set under cmu
	err   error
	done  chan struct{} // Invoke: buffered, one send per completion
}

// Pooled calls for Invoke, and for InvokeAsync without a timeout. An
// InvokeAsync call with a timeout is not pooled: its timer may still hold it
// after completion. A pooled async call is referenced only by the calls map
// until takeCall removes it, so whoever took it may recycle it.
var (
	callPool      = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}
	asyncCallPool = sync.Pool{New: func() any { return new(call) }}
)

func putCall(cl *call) {
	cl.resp, cl.err = nil, nil
	callPool.Put(cl)
}

func (cl *call) complete(c *Conn, resp *protocol.Command, err error) {
	if fn := cl.fn; fn != nil {
		if cl.timer != nil {
			cl.timer.Stop()
		} else {
			cl.fn = nil
			asyncCallPool.Put(cl)
		}
		c.callback(fn, resp, err)
		return
	}
	if err == nil {
		copyCommand(cl.resp, resp)
	}
	cl.err = err
	cl.done <- struct{}{}
}

func (c *Conn) callback(fn func(*protocol.Command, error), resp *protocol.Command, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.cfg.log.Error("remoting: InvokeAsync callback panic", "conn", c.id, "remote", c.remote,
				"panic", p, "stack", string(debug.Stack()))
		}
	}()
	fn(resp, err)
}

// copyCommand makes dst an owned copy of src, reusing dst's buffers (Body's array too).
func copyCommand(dst, src *protocol.Command) {
	body := dst.Body[:0]
	dst.Reset()
	dst.Code = src.Code
	dst.Language = src.Language
	dst.Version = src.Version
	dst.Opaque = src.Opaque
	dst.Flag = src.Flag
	dst.SerializeType = src.SerializeType
	if len(src.Remark) > 0 {
		dst.SetRemark(string(src.Remark))
	}
	dst.Ext.CopyFrom(&src.Ext)
	if len(src.Body) > 0 {
		dst.Body = append(body, src.Body...)
	}
}

// register assigns an opaque to cl and records it.
func (c *Conn) register(cl *call, timeout time.Duration) (int32, error) {
	c.cmu.Lock()
	if c.callsClosed {
		c.cmu.Unlock()
		return 0, c.Err()
	}
	if c.calls == nil {
		c.calls = make(map[int32]*call)
	}
	op := c.nextOpaque.Add(1)
	for c.calls[op] != nil { // only after 2^32 requests with one still outstanding
		op = c.nextOpaque.Add(1)
	}
	c.calls[op] = cl
	if timeout > 0 {
		cl.timer = time.AfterFunc(timeout, func() {
			if c.takeCall(op, cl) {
				c.callback(cl.fn, nil, fmt.Errorf("remoting: no response within %v: %w", timeout, ErrTimeout))
			}
		})
	}
	c.cmu.Unlock()
	return op, nil
}

// takeCall removes cl if it is still outstanding and reports whether it did.
func (c *Conn) takeCall(op int32, cl *call) bool {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.calls[op] == cl && cl != nil {
		delete(c.calls, op)
		return true
	}
	return false
}

// deliver completes the call a response answers; a response nobody waits for any
// more (timed out, cancelled) is dropped.
func (c *Conn) deliver(resp *protocol.Command) {
	c.cmu.Lock()
	cl := c.calls[resp.Opaque]
	if cl != nil {
		delete(c.calls, resp.Opaque)
	}
	c.cmu.Unlock()
	if cl != nil {
		cl.complete(c, resp, nil)
	}
}

// Invoke sends req and waits for its response, or for ctx to end, or for the
// connection to close. Any number of Invokes may be in flight on one connection, from
// any goroutines; responses are matched by opaque.
//
// Invoke sets req.Opaque (from the connection's counter) and clears the response and
// oneway flags; req is encoded before Invoke starts waiting and is not retained. The
// returned Command is the caller's. Never call Invoke from a Handler on the same
// connection: the response would be read by the goroutine that is waiting for it.
// Use InvokeAsync there.
func (c *Conn) Invoke(ctx context.Context, req *protocol.Command) (*protocol.Command, error) {
	resp := new(protocol.Command)
	if err := c.InvokeInto(ctx, req, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// InvokeInto is Invoke with a caller-owned response: resp is overwritten, and its
// buffers, including the array behind resp.Body, are reused. In the steady state it
// does not allocate. resp must not be used by anyone else until InvokeInto returns.
func (c *Conn) InvokeInto(ctx context.Context, req, resp *protocol.Command) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("remoting: invoke code %d: %w", req.Code, err)
	}
	cl := callPool.Get().(*call)
	cl.resp = resp
	op, err := c.register(cl, 0)
	if err != nil {
		putCall(cl)
		return err
	}
	req.Opaque = op
	req.Flag &^= protocol.FlagResponse | protocol.FlagOneway
	if s := c.cfg.signer; s != nil {
		s.Sign(req)
	}
	if err := c.enqueue(req, nil, nil, qWake); err != nil {
		if !c.takeCall(op, cl) {
			<-cl.done // completed by the closing goroutine meanwhile
		}
		putCall(cl)
		return err
	}
	select {
	case <-cl.done:
	case <-ctx.Done():
		if c.takeCall(op, cl) {
			putCall(cl)
			return fmt.Errorf("remoting: invoke code %d: %w", req.Code, ctx.Err())
		}
		<-cl.done
	}
	err = cl.err
	putCall(cl)
	return err
}

// InvokeAsync sends req and returns; fn receives the response, or an error wrapping
// ErrTimeout after timeout (none if timeout <= 0), or one wrapping ErrClosed if the
// connection closes first. fn runs exactly once if InvokeAsync returns nil, never
// otherwise.
//
// With a response, fn runs on the connection's read goroutine: it must not block,
// and resp (which aliases the read buffer) is valid only until fn returns. With an
// error, fn runs on a timer goroutine or on the goroutine closing the connection, with
// resp nil. req is handled as by Invoke.
func (c *Conn) InvokeAsync(req *protocol.Command, timeout time.Duration, fn func(resp *protocol.Command, err error)) error {
	var cl *call
	if timeout > 0 {
		cl = &call{fn: fn}
	} else {
		cl = asyncCallPool.Get().(*call)
		cl.fn = fn
	}
	op, err := c.register(cl, timeout)
	if err != nil {
		if timeout <= 0 {
			cl.fn = nil
			asyncCallPool.Put(cl)
		}
		return err
	}
	req.Opaque = op
	req.Flag &^= protocol.FlagResponse | protocol.FlagOneway
	if s := c.cfg.signer; s != nil {
		s.Sign(req)
	}
	if err := c.enqueue(req, nil, nil, qWake); err != nil {
		if c.takeCall(op, cl) {
			if cl.timer != nil {
				cl.timer.Stop()
			} else {
				cl.fn = nil
				asyncCallPool.Put(cl)
			}
			return err
		}
		// The closing goroutine (or the timer) took the call and runs fn.
	}
	return nil
}

// InvokeOneway sends req with the oneway flag set and does not wait: the peer sends no
// response (an Apogee or Java peer honours the flag; the official Go client answers
// nothing to requests 39 and 40 anyway, and its unmatched responses would be dropped).
// req.Opaque is set from the connection's counter. It returns once req is queued.
func (c *Conn) InvokeOneway(req *protocol.Command) error {
	req.Opaque = c.nextOpaque.Add(1)
	req.Flag = (req.Flag | protocol.FlagOneway) &^ protocol.FlagResponse
	if s := c.cfg.signer; s != nil {
		s.Sign(req)
	}
	return c.enqueue(req, nil, nil, qWake)
}
