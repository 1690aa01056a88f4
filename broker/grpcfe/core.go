package grpcfe

import (
	"net/netip"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
)

// Core is what the gRPC front end uses of the messaging core: the
// per-message surface of *core.Core (send, pull, POP and its acks and
// invisibility changes, offsets, heartbeats and clients, transactions,
// recalls, routes), declared here so the front end depends on no more than
// it calls. *core.Core implements it.
type Core interface {
	Options() core.Options
	OnArrival(fn core.ArrivalFunc)
	OnRevive(fn core.ReviveFunc)

	Send(r *core.SendRequest, res *core.SendResult) error
	WaitDurable(p core.Pending) error
	Recall(topic, msgID string, commitLogOffset int64) error
	EndTransaction(r *core.EndTransactionRequest) (core.Pending, error)
	ForwardToDeadLetter(r *core.ForwardRequest) (core.Pending, error)

	Pull(r *core.PullRequest, res *core.PullResult) error
	PullAgain(res *core.PullResult, offset int64) error
	Pop(r *core.PopRequest, res *core.PopResult) error
	PopAgain(res *core.PopResult) error
	Ack(group, topic []byte, queueID int32, offset int64, rc core.Receipt) error
	ChangeInvisible(group, topic []byte, queueID int32, offset int64, rc core.Receipt, invisibleMs int64) (int64, error)

	MinOffset(topic string, queueID int32) int64
	MaxOffset(topic string, queueID int32) int64
	SearchOffset(topic string, queueID int32, timestampMs int64) (int64, error)
	CommittedOffset(topic, group string, queueID int32) (int64, bool)
	QueryConsumerOffset(topic, group []byte, queueID int32) (int64, error)
	UpdateConsumerOffset(topic, group []byte, queueID int32, offset int64) error

	Heartbeat(conn core.ClientConn, hb *protocol.HeartbeatData, language string, version int32) error
	ClientClosed(conn core.ClientConn)
	RouteTopic(name string, create bool, src netip.AddrPort) (protocol.TopicConfig, error)
	SubscriptionGroup(name []byte) (protocol.SubscriptionGroupConfig, error)

	LiteCore // lite.go
}

var _ Core = (*core.Core)(nil)
