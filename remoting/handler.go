package remoting

import (
	"errors"

	"github.com/apogeemq/apogee/protocol"
)

// Sentinel errors.
var (
	// ErrClosed: the connection is closed (by either side, or after an error). Errors
	// that wrap it also wrap the cause when there is one.
	ErrClosed = errors.New("remoting: connection closed")
	// ErrServerClosed: Serve was called on, or returned because of, a closed server.
	ErrServerClosed = errors.New("remoting: server closed")
	// ErrTimeout: an InvokeAsync call got no response within its timeout.
	ErrTimeout = errors.New("remoting: request timed out")
	// ErrPoolClosed: Pool.Get after Pool.Close.
	ErrPoolClosed = errors.New("remoting: pool closed")
	// ErrFrameTimeout: a frame was not received in full within Options.FrameTimeout of
	// its first byte; the connection was closed (Conn.Err wraps it).
	ErrFrameTimeout = errors.New("remoting: frame not received within the frame timeout")
	// ErrSlowSender: a frame arrived below Options.MinReceiveRate once
	// Options.SlowSenderGrace had passed; the connection was closed.
	ErrSlowSender = errors.New("remoting: frame received below the minimum rate")
	// ErrReceiveBudget: a frame larger than the connection's own read buffer found no
	// room in the receive budget before its deadline (or is larger than the whole
	// budget); the connection was closed.
	ErrReceiveBudget = errors.New("remoting: no room in the receive budget")
)

// Handler serves the requests that arrive on a connection.
//
// ServeRemoting is called on the connection's read goroutine, once per request, in
// arrival order; while it runs, that connection reads nothing else. A cheap handler
// answers inline: it fills resp (whose Cmd is pre-initialised as a SUCCESS response to
// req) and returns Reply. A handler that must wait (a long-polling pull, a send waiting
// for a sync flush) calls c.Defer(req), keeps the Responder, returns Deferred, and
// answers later from any goroutine with Responder.Reply.
//
// req, everything it references (Body aliases the connection's read buffer; Remark
// and Ext live in a Command the connection reuses) and resp are valid only until
// ServeRemoting returns. A handler that defers copies what it still needs.
//
// A panic is recovered: it is logged and answered with SYSTEM_ERROR (unless the
// handler had called Defer, in which case its Responder still owns the answer).
type Handler interface {
	ServeRemoting(c *Conn, req *protocol.Command, resp *Response) Action
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(c *Conn, req *protocol.Command, resp *Response) Action

// ServeRemoting calls f.
func (f HandlerFunc) ServeRemoting(c *Conn, req *protocol.Command, resp *Response) Action {
	return f(c, req, resp)
}

// Action tells the connection what to do once a handler returns.
type Action uint8

const (
	// Reply queues resp now (nothing is sent for a request carrying the oneway flag).
	Reply Action = iota
	// Deferred: the handler called Conn.Defer and answers through the Responder. resp
	// is ignored (its Release, if set, is run at once). A handler that calls Defer is
	// treated as Deferred whatever it returns; one that returns Deferred without
	// calling Defer is a bug, logged and answered with SYSTEM_ERROR.
	Deferred
	// NoReply sends nothing (what the official Go client does for pushed requests 39
	// and 40); resp's Release, if set, is run at once.
	NoReply
)

// Releaser is told when the zero-copy body slices of a Response are no longer needed.
type Releaser interface {
	Release()
}

// ReleaseFunc adapts a function to Releaser.
type ReleaseFunc func()

// Release calls f.
func (f ReleaseFunc) Release() { f() }

// Response is an answer to a request: a command and its body.
//
// The body on the wire is Cmd.Body followed by every slice of Body. Cmd's header and
// Cmd.Body are copied into the connection's write buffer when the response is queued
// (when the handler returns Reply, or inside Responder.Reply), so Cmd may be reused
// right after. The slices held by Body are written as they are, never copied, in the
// same vectored write as the header: they must stay unchanged until Release runs. The
// [][]byte itself is not retained.
//
// Release, if not nil, runs exactly once: after the write that carried Body returned
// (successfully or not), when the connection closes before that, or at once when the
// response is not sent (oneway request, NoReply, Deferred, an error from Reply). It
// runs on the connection's writer goroutine or on the goroutine that queued the
// response, and must not block. Pass a pooled object to avoid allocating a closure.
type Response struct {
	Cmd     *protocol.Command
	Body    [][]byte
	Release Releaser
}

func (r *Response) release() {
	if r.Release != nil {
		rel := r.Release
		r.Release = nil
		rel.Release()
	}
}

// Responder answers one deferred request, from any goroutine. It is a small value:
// copy it freely, but call Reply or Cancel exactly once in total.
type Responder struct {
	c      *Conn
	seq    uint64 // the request's number on its connection (Conn.seq); 0 if Defer was not called from its handler
	opaque int32
	st     protocol.SerializeType
	oneway bool
}

// Conn returns the connection the request came from.
func (r Responder) Conn() *Conn { return r.c }

// Opaque returns the request's opaque, which the response echoes.
func (r Responder) Opaque() int32 { return r.opaque }

// InitResponse resets cmd as the response to the deferred request with the given code
// (what protocol.Command.InitResponse does with the request at hand).
func (r Responder) InitResponse(cmd *protocol.Command, code int32) {
	req := protocol.Command{Opaque: r.opaque, SerializeType: r.st}
	cmd.InitResponse(&req, code)
}

// Reply queues resp as the answer to the deferred request and returns at once; the
// writer goroutine sends it with whatever else is ready. resp.Cmd gets the request's
// opaque and the response flag whatever it held. resp (and resp.Cmd) may be reused as
// soon as Reply returns; resp.Release runs exactly once (see Response), even when
// Reply fails. Nothing is sent if the request carried the oneway flag.
//
// It fails with an error wrapping ErrClosed if the connection is gone. If resp cannot
// be encoded (too large for MaxFrameSize, a header the binary encoding cannot carry),
// the request is answered with SYSTEM_ERROR instead and the encoding error is returned.
func (r Responder) Reply(resp *Response) error {
	return r.reply(resp, true)
}

// Queue is Reply without waking the connection's writer: resp waits in the
// connection's queue until Conn.Flush of r.Conn() sends it (or anything that
// writes the connection before that, such as a read's answers), so that a
// caller answering many requests in one go (the broker's long-poll holder
// after an arrival) writes each connection once, with one Flush after the
// last Queue. Every Queue must be followed by a Flush of its connection
// (on any goroutine): until then resp may stay unsent. Otherwise it is
// Reply: the same errors, and resp.Release runs exactly once. More than 64
// KiB queued wakes the writer anyway.
func (r Responder) Queue(resp *Response) error {
	return r.reply(resp, false)
}

// reply is Reply (wake) or Queue.
func (r Responder) reply(resp *Response, wake bool) error {
	if r.c == nil {
		resp.release()
		return errors.New("remoting: Reply on a zero Responder")
	}
	if r.oneway {
		resp.release()
		r.c.settle()
		return nil
	}
	resp.Cmd.Opaque = r.opaque
	resp.Cmd.Flag |= protocol.FlagResponse
	// Answered by the request's own handler (on the read goroutine), the
	// answer leaves with the read's others at its end (Conn.kick); from
	// anywhere else it wakes the writer.
	flags := qResponse | qSettle | qServing
	switch {
	case !wake:
		flags = qResponse | qSettle // Flush (or the read's end) sends it
	case r.seq == 0:
		flags = qResponse | qSettle | qWake
	}
	err := r.c.enqueueSeq(resp.Cmd, resp.Body, resp.Release, flags, r.seq)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ErrClosed) {
		var fallback protocol.Command
		r.InitResponse(&fallback, protocol.RespSystemError)
		fallback.SetRemark(err.Error())
		if r.c.enqueue(&fallback, nil, nil, qResponse|qWake|qSettle) == nil {
			return err
		}
	}
	r.c.settle()
	return err
}

// Cancel gives up on the deferred request without answering it (the peer will time
// out). Use it when the answer can no longer be produced, for example because the
// connection closed.
func (r Responder) Cancel() {
	if r.c != nil {
		r.c.settle()
	}
}
