package broker

import (
	"fmt"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/namesrv"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// handler serves one request: it runs on the connection's read goroutine and
// must not block it (see "Request flow" in the package doc).
type handler func(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action

// handlerTable maps request codes to handlers. It is built once by New from
// each unit's registration (registerSend, registerPull, ...) and read
// without a lock afterwards. Codes below len(low), every code a client
// sends on the hot path, index an array; the rest (POP's 200050 and such) a
// map.
type handlerTable struct {
	low  [512]handler
	high map[int32]handler
}

// add registers h for codes. Registering a code twice is a programming
// error, reported at once.
func (t *handlerTable) add(h handler, codes ...int32) {
	for _, code := range codes {
		if t.get(code) != nil {
			panic(fmt.Sprintf("broker: request code %d registered twice", code))
		}
		if code >= 0 && int(code) < len(t.low) {
			t.low[code] = h
			continue
		}
		if t.high == nil {
			t.high = map[int32]handler{}
		}
		t.high[code] = h
	}
}

func (t *handlerTable) get(code int32) handler {
	if code >= 0 && int(code) < len(t.low) {
		return t.low[code]
	}
	return t.high[code]
}

// codes lists the registered codes, for docs and tests.
func (t *handlerTable) codes() []int32 {
	var out []int32
	for c, h := range t.low {
		if h != nil {
			out = append(out, int32(c))
		}
	}
	for c := range t.high {
		out = append(out, c)
	}
	return out
}

// buildHandlers collects every unit's request codes.
func (b *Broker) buildHandlers() {
	for _, register := range []func(*handlerTable){
		b.registerSend, b.registerReply, b.registerPull, b.registerClients, b.registerOffsets, b.registerMessages,
		b.registerTopicsAndGroups, b.registerLocks, b.registerRetry, b.registerTransactions,
		b.registerDelay, b.registerPop, b.registerRuntimeInfo,
		b.registerAdminOps,
		b.registerSecurity,
		b.registerReplication,
		b.registerController,
	} {
		register(&b.handlers)
	}
}

// ServeRemoting implements remoting.Handler: it dispatches by request code to
// the registered handler; name-server codes go to the embedded registry.
func (b *Broker) ServeRemoting(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	if b.opts.Security != nil && b.checkAccess(c, req, resp) {
		return remoting.Reply
	}
	if h := b.handlers.get(req.Code); h != nil {
		if b.opts.SlowRequest <= 0 && b.opts.ObserveRequest == nil {
			return h(c, req, resp)
		}
		start := time.Now()
		act := h(c, req, resp)
		d := time.Since(start)
		if b.opts.SlowRequest > 0 && d > b.opts.SlowRequest {
			b.logSlow(c, req, resp, d)
		}
		if b.opts.ObserveRequest != nil && resp.Cmd != nil { // nil: the handler's mistake, which remoting reports
			b.opts.ObserveRequest(req.Code, resp.Cmd.Code, d)
		}
		return act
	}
	if namesrv.IsNamesrvCode(req.Code) {
		return b.registry.ServeRemoting(c, req, resp)
	}
	return fail(resp, &core.Error{Code: protocol.RespRequestCodeNotSupported, Remark: fmt.Sprintf(" request type %d not supported", req.Code)})
}

// logSlow writes the slow-request line: the code, the time, the client and
// the request's topic or group when its header names one.
func (b *Broker) logSlow(c *remoting.Conn, req *protocol.Command, resp *remoting.Response, d time.Duration) {
	attrs := []any{"code", req.Code, "took", d.Round(time.Microsecond), "responseCode", resp.Cmd.Code}
	if c != nil {
		attrs = append(attrs, "remote", c.RemoteAddr().String())
	}
	for _, k := range []string{"topic", "b", "consumerGroup", "group", "producerGroup"} {
		if v, ok := req.Ext.GetString(k); ok && v != "" {
			attrs = append(attrs, k, v)
		}
	}
	b.copts.Logger.Warn("broker: slow request", attrs...)
}

// fail answers a request with an error: the one place where the core's
// *core.Error becomes a response (its code and remark). Any other error (a
// header or body that does not decode) is SYSTEM_ERROR with its text, as
// the Java broker answers.
func fail(resp *remoting.Response, err error) remoting.Action {
	resp.Cmd.Code = core.Code(err)
	resp.Cmd.SetRemark(core.Remark(err))
	return remoting.Reply
}

// noConn adapts a handler that needs no connection.
func noConn(h func(req *protocol.Command, resp *remoting.Response) remoting.Action) handler {
	return func(_ *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
		return h(req, resp)
	}
}

// respOnly adapts a handler that reads nothing of the request.
func respOnly(h func(resp *remoting.Response) remoting.Action) handler {
	return func(_ *remoting.Conn, _ *protocol.Command, resp *remoting.Response) remoting.Action { return h(resp) }
}

// replyBody answers with an encoded body, or with the encoding's error.
func replyBody(resp *remoting.Response, body []byte, err error) remoting.Action {
	if err != nil {
		return fail(resp, err)
	}
	resp.Cmd.Body = body
	return remoting.Reply
}
