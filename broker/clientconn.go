package broker

import (
	"net"
	"net/netip"
	"strconv"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// clientConn is the remoting front end's core.ClientConn: a client's
// connection, through which the core's pushes go as oneway requests. It is
// a value of two pointers, so every clientConn of one connection is the
// same registry key (no table of wrappers to keep).
type clientConn struct {
	c *remoting.Conn
	b *Broker
}

var _ core.ClientConn = clientConn{}

// clientOf is c's ClientConn, or nil for no connection (a handler driven
// directly, as the tests and benchmarks do).
func clientOf(b *Broker, c *remoting.Conn) core.ClientConn {
	if c == nil {
		return nil
	}
	return clientConn{c: c, b: b}
}

func (cc clientConn) RemoteAddr() string { return cc.c.RemoteAddr().String() }

func (cc clientConn) Close() error { return cc.c.Close() }

// NotifyConsumerIDsChanged sends NOTIFY_CONSUMER_IDS_CHANGED (40).
func (cc clientConn) NotifyConsumerIDsChanged(group string) error {
	var cmd protocol.Command
	cmd.InitRequest(protocol.ReqNotifyConsumerIdsChanged, 0)
	(&protocol.NotifyConsumerIdsChangedRequest{ConsumerGroup: group}).Encode(&cmd.Ext)
	return cc.c.InvokeOneway(&cmd)
}

// ResetOffset sends RESET_CONSUMER_CLIENT_OFFSET (220) with the new offset
// table as its body.
func (cc clientConn) ResetOffset(r *core.OffsetReset) error {
	var cmd protocol.Command
	cmd.InitRequest(protocol.ReqResetConsumerClientOffset, 0)
	(&protocol.ResetOffsetRequest{Topic: r.Topic, Group: r.Group, Timestamp: r.Timestamp, IsForce: r.Force,
		QueueID: -1, Offset: -1}).Encode(&cmd.Ext)
	cmd.Body = resetOffsetBody(cc.b.copts.BrokerName, r.Topic, r.Offsets)
	return cc.c.InvokeOneway(&cmd)
}

// CheckTransaction sends CHECK_TRANSACTION_STATE (39) with the half
// message's record as its body.
func (cc clientConn) CheckTransaction(_ string, c *core.TransactionCheck) error {
	var cmd protocol.Command
	cmd.InitRequest(protocol.ReqCheckTransactionState, 0)
	(&protocol.CheckTransactionStateRequest{
		TranStateTableOffset: c.TranStateTableOffset, CommitLogOffset: c.CommitLogOffset, MsgID: c.MsgID,
		TransactionID: c.TransactionID, OffsetMsgID: c.OffsetMsgID, Topic: c.Topic, BrokerName: cc.b.copts.BrokerName,
	}).Encode(&cmd.Ext)
	cmd.Body = c.Record // encoded before InvokeOneway returns
	return cc.c.InvokeOneway(&cmd)
}

// resetOffsetBody is ResetOffsetBody as the Java broker (fastjson) writes
// it, with MessageQueue objects as keys:
// {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5,...}}. The Go
// client parses exactly this shape. The table is in the core's order (by
// queue id).
func resetOffsetBody(brokerName, topic string, table []core.QueueOffset) []byte {
	out := []byte(`{"offsetTable":{`)
	for i, e := range table {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"brokerName":`...)
		out = strconv.AppendQuote(out, brokerName)
		out = append(out, `,"queueId":`...)
		out = strconv.AppendInt(out, int64(e.QueueID), 10)
		out = append(out, `,"topic":`...)
		out = strconv.AppendQuote(out, topic)
		out = append(out, "}:"...)
		out = strconv.AppendInt(out, e.Offset, 10)
	}
	return append(out, "}}"...)
}

// peerAddr is the client's address (a message's BORNHOST, a refusal's
// remark).
func peerAddr(c *remoting.Conn) netip.AddrPort {
	if c == nil {
		return netip.AddrPort{}
	}
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort()
	}
	return netip.AddrPort{}
}
