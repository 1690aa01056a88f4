package grpcfe

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/longpoll"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/rmqpb"
)

// Offset-based consumption, for RocketMQ 5's pull ("lite") consumers: read
// a queue from an offset and keep the group's offsets on the broker.

var pullPool = sync.Pool{New: func() any { return new(core.PullResult) }}

// PullMessage reads up to batch_size messages of one queue from an offset
// (the request's filter applies). Without a message it is held
// (longpoll.go) until an arrival in the queue past its offset, up to
// long_polling_timeout (within the deadline). The stream carries the
// status first (OK with messages; MESSAGE_NOT_FOUND without;
// ILLEGAL_OFFSET when the offset is outside the queue), then the messages,
// then the next offset to read. The messages' bodies are encoded straight
// from the commit log's mapping.
func (s *Server) PullMessage(r *rmqpb.PullMessageRequest, stream rmqpb.MessagingService_PullMessageServer) error {
	if fwd, err := s.forwardPull(r, stream); fwd {
		return err
	}
	s.stats.pulls.Add(1)
	ctx := stream.Context()
	sendStatus := func(st *rmqpb.Status) error {
		return stream.Send(&rmqpb.PullMessageResponse{Content: &rmqpb.PullMessageResponse_Status{Status: st}})
	}
	group, topic := r.GetGroup().GetName(), r.GetMessageQueue().GetTopic().GetName()
	if err := core.CheckClientGroup(group); err != nil {
		return sendStatus(errStatus(err))
	}
	if err := core.CheckClientTopic(topic); err != nil {
		return sendStatus(errStatus(err))
	}
	qid := r.GetMessageQueue().GetId()
	batch := r.GetBatchSize()
	if batch <= 0 || batch > core.MaxPullMessages {
		return sendStatus(status(rmqpb.Code_BAD_REQUEST, fmt.Sprintf("batch size %d is not in 1..%d", batch, core.MaxPullMessages)))
	}
	if qid < 0 {
		return sendStatus(status(rmqpb.Code_BAD_REQUEST, fmt.Sprintf("queue id %d is not a queue", qid)))
	}
	typ, expr := filterOf(r.GetFilterExpression())
	req := core.PullRequest{Group: []byte(group), Topic: []byte(topic), QueueID: qid, Offset: r.GetOffset(), MaxMsgs: batch,
		OwnSubscription: true, ExpressionType: []byte(typ), Expression: []byte(expr), Consumer: peerAddr(ctx)}
	res := pullPool.Get().(*core.PullResult)
	defer pullPool.Put(res)
	if err := s.core.Pull(&req, res); err != nil {
		res.Release()
		return sendStatus(errStatus(err))
	}
	wait := min(s.core.Options().LongPollMax, r.GetLongPollingTimeout().AsDuration())
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)-longPollReserve)
	}
	if res.Status == core.PullNoNewMessage && wait > 0 {
		err := s.hold(ctx, longpoll.Wait{Topic: res.Topic, Queue: qid, Offset: res.NextOffset},
			wait, &heldCall{pull: res})
		if errors.Is(err, errHeldFull) {
			res.Release()
			return sendStatus(status(rmqpb.Code_TOO_MANY_REQUESTS, "too many pulls are waiting for messages"))
		}
		if err != nil {
			res.Release()
			return sendStatus(errStatus(err))
		}
	}
	defer res.Release()
	switch res.Status {
	case core.PullFound:
		if err := sendStatus(okStatus); err != nil {
			return err
		}
		for _, rec := range res.Records {
			v, err := message.Decode(rec, false)
			if err != nil {
				continue
			}
			d := delivery{attempt: v.ReconsumeTimes() + 1}
			m := toMessage(v, res.Topic, s.brokerName, &d)
			if err := stream.Send(&rmqpb.PullMessageResponse{Content: &rmqpb.PullMessageResponse_Message{Message: m}}); err != nil {
				return err
			}
		}
	case core.PullOffsetMoved:
		if err := sendStatus(status(rmqpb.Code_ILLEGAL_OFFSET, fmt.Sprintf("offset %d is outside the queue [%d, %d]",
			r.GetOffset(), res.MinOffset, res.MaxOffset))); err != nil {
			return err
		}
	default:
		if err := sendStatus(status(rmqpb.Code_MESSAGE_NOT_FOUND, "no new message")); err != nil {
			return err
		}
	}
	return stream.Send(&rmqpb.PullMessageResponse{Content: &rmqpb.PullMessageResponse_NextOffset{NextOffset: res.NextOffset}})
}

// UpdateOffset commits a group's offset of a queue.
func (s *Server) UpdateOffset(ctx context.Context, r *rmqpb.UpdateOffsetRequest) (*rmqpb.UpdateOffsetResponse, error) {
	if resp, fwd, err := s.forwardUpdateOffset(ctx, r); fwd {
		return resp, err
	}
	group, topic, qid, err := s.groupQueue(r.GetGroup(), r.GetMessageQueue())
	if err == nil && r.GetOffset() < 0 {
		err = badRequest(rmqpb.Code_ILLEGAL_OFFSET, fmt.Sprintf("offset %d is negative", r.GetOffset()))
	}
	if err == nil {
		err = s.core.UpdateConsumerOffset([]byte(topic), []byte(group), qid, r.GetOffset())
	}
	return &rmqpb.UpdateOffsetResponse{Status: errStatus(err)}, nil
}

// GetOffset answers a group's committed offset of a queue (OFFSET_NOT_FOUND
// without one, with the Java broker's exception for young queues: see
// core.QueryConsumerOffset).
func (s *Server) GetOffset(ctx context.Context, r *rmqpb.GetOffsetRequest) (*rmqpb.GetOffsetResponse, error) {
	if resp, fwd, err := s.forwardGetOffset(ctx, r); fwd {
		return resp, err
	}
	group, topic, qid, err := s.groupQueue(r.GetGroup(), r.GetMessageQueue())
	if err != nil {
		return &rmqpb.GetOffsetResponse{Status: errStatus(err)}, nil
	}
	off, err := s.core.QueryConsumerOffset([]byte(topic), []byte(group), qid)
	if err != nil {
		return &rmqpb.GetOffsetResponse{Status: errStatus(err)}, nil
	}
	return &rmqpb.GetOffsetResponse{Status: okStatus, Offset: off}, nil
}

// QueryOffset answers a queue's first offset (BEGINNING), its end (END) or
// the first offset stored at or after a time (TIMESTAMP).
func (s *Server) QueryOffset(ctx context.Context, r *rmqpb.QueryOffsetRequest) (*rmqpb.QueryOffsetResponse, error) {
	if resp, fwd, err := s.forwardQueryOffset(ctx, r); fwd {
		return resp, err
	}
	mq := r.GetMessageQueue()
	topic, qid := mq.GetTopic().GetName(), mq.GetId()
	fail := func(err error) (*rmqpb.QueryOffsetResponse, error) {
		return &rmqpb.QueryOffsetResponse{Status: errStatus(err)}, nil
	}
	if err := core.CheckClientTopic(topic); err != nil {
		return fail(err)
	}
	cfg, err := s.core.RouteTopic(topic, false, netip.AddrPort{})
	if err != nil {
		return fail(err)
	}
	if qid < 0 || qid >= cfg.ReadQueueNums {
		return fail(badRequest(rmqpb.Code_BAD_REQUEST, fmt.Sprintf("queue %d is not a read queue of %s (%d)", qid, topic, cfg.ReadQueueNums)))
	}
	var off int64
	switch r.GetQueryOffsetPolicy() {
	case rmqpb.QueryOffsetPolicy_BEGINNING:
		off = s.core.MinOffset(topic, qid)
	case rmqpb.QueryOffsetPolicy_END:
		off = s.core.MaxOffset(topic, qid)
	case rmqpb.QueryOffsetPolicy_TIMESTAMP:
		ts := r.GetTimestamp()
		if ts == nil || !ts.IsValid() {
			return fail(badRequest(rmqpb.Code_BAD_REQUEST, "a TIMESTAMP query needs a timestamp"))
		}
		if off, err = s.core.SearchOffset(topic, qid, ts.AsTime().UnixMilli()); err != nil {
			return fail(err)
		}
	default:
		return fail(badRequest(rmqpb.Code_BAD_REQUEST, "unknown query offset policy "+r.GetQueryOffsetPolicy().String()))
	}
	return &rmqpb.QueryOffsetResponse{Status: okStatus, Offset: off}, nil
}

// groupQueue checks the group and queue of an offset request.
func (s *Server) groupQueue(g *rmqpb.Resource, mq *rmqpb.MessageQueue) (group, topic string, qid int32, err error) {
	group, topic, qid = g.GetName(), mq.GetTopic().GetName(), mq.GetId()
	if err = core.CheckClientGroup(group); err != nil {
		return
	}
	if err = core.CheckClientTopic(topic); err != nil {
		return
	}
	cfg, e := s.core.RouteTopic(topic, false, netip.AddrPort{})
	if e != nil {
		err = e
		return
	}
	if qid < 0 || qid >= cfg.ReadQueueNums {
		err = badRequest(rmqpb.Code_BAD_REQUEST, fmt.Sprintf("queue %d is not a read queue of %s (%d)", qid, topic, cfg.ReadQueueNums))
	}
	return
}
