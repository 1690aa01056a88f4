package broker

import (
	"net"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Security is the access control the front end asks before it serves a
// request (package acl's Guard implements it; Options.Security, nil: off).
// Check runs on the connection's read goroutine for every request, before
// the request's handler: it must not block and should not allocate when
// it allows.
type Security interface {
	// Check decides whether req, received from remote, may be served: ok,
	// or the response code (NO_PERMISSION) and remark to answer instead.
	Check(remote net.Addr, req *protocol.Command) (ok bool, code int32, remark string)
	// ServeAdmin answers RocketMQ 5.3's user and ACL management codes
	// (3001-3010) once Check allowed them.
	ServeAdmin(req *protocol.Command) (code int32, remark string, body []byte)
	// AddRuntimeInfo adds its counters to GET_BROKER_RUNTIME_INFO's table.
	AddRuntimeInfo(m map[string]string)
}

// checkAccess answers a request Security refuses; it reports whether it
// did (the request is then not served).
func (b *Broker) checkAccess(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) bool {
	ok, code, remark := b.opts.Security.Check(c.RemoteAddr(), req)
	if ok {
		return false
	}
	resp.Cmd.Code = code
	resp.Cmd.SetRemark(remark)
	return true
}

// registerSecurity serves the user and ACL management codes.
func (b *Broker) registerSecurity(t *handlerTable) {
	t.add(noConn(b.handleAuthAdmin), protocol.ReqAuthCreateUser, protocol.ReqAuthUpdateUser, protocol.ReqAuthDeleteUser,
		protocol.ReqAuthGetUser, protocol.ReqAuthListUser, protocol.ReqAuthCreateACL, protocol.ReqAuthUpdateACL,
		protocol.ReqAuthDeleteACL, protocol.ReqAuthGetACL, protocol.ReqAuthListACL)
}

func (b *Broker) handleAuthAdmin(req *protocol.Command, resp *remoting.Response) remoting.Action {
	if b.opts.Security == nil {
		return fail(resp, &core.Error{Code: protocol.RespSystemError, Remark: "access control is off on this broker (start it with --acl)"})
	}
	code, remark, body := b.opts.Security.ServeAdmin(req)
	resp.Cmd.Code = code
	if remark != "" {
		resp.Cmd.SetRemark(remark)
	}
	resp.Cmd.Body = body
	return remoting.Reply
}

// NamesrvHandler serves the embedded registry (the name-server listener
// of --namesrv-listen) behind the same access control as the broker's
// own address: name-server codes need what docs/security.md lists (a
// route: Pub, Sub or Get on the topic; a change: admin rights). Without
// Security it is the registry itself.
func (b *Broker) NamesrvHandler() remoting.Handler {
	if b.opts.Security == nil {
		return b.registry
	}
	return securedRegistry{b}
}

type securedRegistry struct{ b *Broker }

func (s securedRegistry) ServeRemoting(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	if s.b.checkAccess(c, req, resp) {
		return remoting.Reply
	}
	return s.b.registry.ServeRemoting(c, req, resp)
}
