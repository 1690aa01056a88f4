package client

import (
	"context"
	"fmt"

	"github.com/apogeemq/apogee/protocol"
)

// fieldsHeader is a request header given as its extension fields.
type fieldsHeader map[string]string

func (h fieldsHeader) Encode(e *protocol.ExtFields) {
	for k, v := range h {
		e.SetString(k, v)
	}
}

// AuthRequest sends one of RocketMQ 5.3's user and ACL management codes
// (protocol.ReqAuthCreateUser ... protocol.ReqAuthListACL, 3001-3010) to
// the broker at addr, with fields as its header (username, subject,
// resource, filter, ...) and body (the JSON of a UserInfo or AclInfo),
// and returns the response's body (nil when the broker answered none: a
// user or ACL not found, or a change). What mqadmin's createUser,
// createAcl and friends send; the broker needs the caller to have admin
// rights (sign with Credentials). A refusal is a *BrokerError.
func (a *Admin) AuthRequest(ctx context.Context, addr string, code int32, fields map[string]string, body []byte) ([]byte, error) {
	if code < protocol.ReqAuthCreateUser || code > protocol.ReqAuthListACL {
		return nil, fmt.Errorf("client: request code %d is not a user or ACL code", code)
	}
	resp, err := a.call(ctx, addr, code, fieldsHeader(fields), body)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ControllerRequest sends one of the RocketMQ 5 controller's codes
// (CONTROLLER_ALTER_SYNC_STATE_SET 1001 ... CONTROLLER_APPLY_BROKER_ID
// 1013: metadata, SyncStateSet data, elections, configuration, cleaning;
// GET_BROKER_EPOCH_CACHE 1007 goes to a broker) to addr, with fields as
// its header and body, signed and over TLS as the admin's other requests,
// and returns the answer whatever its code: the caller reads the
// controller's codes (CONTROLLER_NOT_LEADER names the leader).
func (a *Admin) ControllerRequest(ctx context.Context, addr string, code int32, fields map[string]string, body []byte) (*protocol.Command, error) {
	if code < 1001 || code > 1013 {
		return nil, fmt.Errorf("client: request code %d is not a controller code", code)
	}
	if a.closed.Load() {
		return nil, ErrClosed
	}
	req := a.in.newRequest(code)
	fieldsHeader(fields).Encode(&req.Ext)
	req.Body = body
	resp, err := a.in.invoke(ctx, addr, req, a.cfg.requestTimeout)
	if err != nil {
		return nil, fmt.Errorf("client: request %d to %s: %w", code, addr, err)
	}
	return resp, nil
}
