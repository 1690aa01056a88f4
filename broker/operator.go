package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// The front end's part of what an operator's tool in the same process (the
// metrics exporter, the dashboard) needs besides the core's operations:
// the remoting server's counters, the cluster as the embedded name server
// sees it, and a message pushed to one consumer.

// RemotingStats returns the remoting server's counters (connections,
// receive limits).
func (b *Broker) RemotingStats() remoting.ServerStats { return b.srv.Stats() }

// ClusterInfo is the cluster as the embedded name server's registry holds
// it (GET_BROKER_CLUSTER_INFO's answer): this broker, and every broker
// that registers with this one's name server.
func (b *Broker) ClusterInfo() protocol.ClusterInfo { return b.registry.ClusterInfo() }

// ConsumeMessageDirectly asks a consumer (a member of group, by client id)
// to consume the stored message an offset message id names
// (CONSUME_MESSAGE_DIRECTLY, 309, sent to the client as the Java broker
// forwards an admin tool's request), and returns the client's result. It
// waits until ctx ends.
func (b *Broker) ConsumeMessageDirectly(ctx context.Context, group, clientID, msgID string) (protocol.ConsumeMessageDirectlyResult, error) {
	var res protocol.ConsumeMessageDirectlyResult
	cc, err := b.core.ConsumerConn(group, clientID)
	if err != nil {
		return res, err
	}
	target, ok := cc.(clientConn)
	if !ok {
		return res, &core.Error{Code: protocol.RespSystemError, Remark: fmt.Sprintf("The Consumer <%s> <%s> is not on this front end", group, clientID)}
	}
	v, err := b.core.ViewMessageByOffsetID(msgID)
	if err != nil {
		return res, err
	}
	body := bytes.Clone(v.Bytes())
	v.Release()
	var req protocol.Command
	req.InitRequest(protocol.ReqConsumeMessageDirectly, 0)
	h := protocol.ConsumeMessageDirectlyRequest{ConsumerGroup: group, ClientID: clientID, MsgID: msgID, BrokerName: b.copts.BrokerName}
	h.Encode(&req.Ext)
	if f, ok := b.core.GroupSysFlag(group); ok {
		req.Ext.SetInt("groupSysFlag", int64(f))
	}
	req.Body = body
	resp, err := target.c.Invoke(ctx, &req)
	if err != nil {
		return res, fmt.Errorf("broker: consume message %s directly on <%s> <%s>: %w", msgID, group, clientID, err)
	}
	if resp.Code != protocol.RespSuccess {
		return res, &core.Error{Code: resp.Code, Remark: string(resp.Remark)}
	}
	if err := json.Unmarshal(resp.Body, &res); err != nil {
		return res, fmt.Errorf("broker: consume message %s directly: the client's answer: %w", msgID, err)
	}
	return res, nil
}
