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
	cc, err := b.core.Admin().ConsumerConn(group, clientID)
	if err != nil {
		return res, err
	}
	target, ok := cc.(clientConn)
	if !ok {
		return res, notHere(group, clientID)
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
	if f, ok := b.core.Admin().GroupSysFlag(group); ok {
		req.Ext.SetInt("groupSysFlag", int64(f))
	}
	req.Body = body
	resp, err := invokeClient(ctx, target, &req)
	if err != nil {
		return res, fmt.Errorf("broker: consume message %s directly on <%s> <%s>: %w", msgID, group, clientID, err)
	}
	if err := json.Unmarshal(resp.Body, &res); err != nil {
		return res, fmt.Errorf("broker: consume message %s directly: the client's answer: %w", msgID, err)
	}
	return res, nil
}

// ConsumerRunningInfo asks a member of a consumer group for its running
// information (GET_CONSUMER_RUNNING_INFO, 307, as the broker forwards an
// admin tool's): its subscriptions and the queues it holds now, which is
// how a tool sees the clients' rebalance. It waits until ctx ends.
func (b *Broker) ConsumerRunningInfo(ctx context.Context, group, clientID string) (protocol.ConsumerRunningInfo, error) {
	var ri protocol.ConsumerRunningInfo
	cc, err := b.core.Admin().ConsumerConn(group, clientID)
	if err != nil {
		return ri, err
	}
	target, ok := cc.(clientConn)
	if !ok {
		return ri, notHere(group, clientID)
	}
	var req protocol.Command
	req.InitRequest(protocol.ReqGetConsumerRunningInfo, 0)
	(&protocol.GetConsumerRunningInfoRequest{ConsumerGroup: group, ClientID: clientID}).Encode(&req.Ext)
	resp, err := invokeClient(ctx, target, &req)
	if err != nil {
		return ri, fmt.Errorf("broker: running info of <%s> <%s>: %w", group, clientID, err)
	}
	if err := ri.Decode(resp.Body); err != nil {
		return ri, fmt.Errorf("broker: running info of <%s> <%s>: %w", group, clientID, err)
	}
	return ri, nil
}

// invokeClient sends a request to a client's connection and returns its
// successful answer; an answer with another code is a *core.Error.
func invokeClient(ctx context.Context, target clientConn, req *protocol.Command) (*protocol.Command, error) {
	resp, err := target.c.Invoke(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.Code != protocol.RespSuccess {
		return nil, &core.Error{Code: resp.Code, Remark: string(resp.Remark)}
	}
	return resp, nil
}

func notHere(group, clientID string) error {
	return &core.Error{Code: protocol.RespSystemError, Remark: fmt.Sprintf("The Consumer <%s> <%s> is not on this front end", group, clientID)}
}
