package grpcfe

import (
	"context"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/rmqpb"
)

// recallHandle names a scheduled message for RecallMessage: the core's
// handle, which the remoting front end's RECALL_MESSAGE accepts too.
func recallHandle(topic, msgID string, commitLogOffset int64) string {
	return string(core.AppendRecallHandle(nil, topic, []byte(msgID), commitLogOffset))
}

// parseRecallHandle undoes recallHandle.
func parseRecallHandle(h string) (topic, msgID string, commitLogOffset int64, ok bool) {
	return core.ParseRecallHandle([]byte(h))
}

// RecallMessage cancels a scheduled message before its delivery time.
func (s *Server) RecallMessage(ctx context.Context, r *rmqpb.RecallMessageRequest) (*rmqpb.RecallMessageResponse, error) {
	if resp, fwd, err := s.forwardRecall(ctx, r); fwd {
		return resp, err
	}
	topic, id, off, ok := parseRecallHandle(r.GetRecallHandle())
	if !ok || topic != r.GetTopic().GetName() {
		return &rmqpb.RecallMessageResponse{Status: status(rmqpb.Code_BAD_REQUEST, "the recall handle is not one this broker gave for this topic")}, nil
	}
	if err := s.core.Recall(topic, id, off); err != nil {
		return &rmqpb.RecallMessageResponse{Status: errStatus(err), MessageId: id}, nil
	}
	return &rmqpb.RecallMessageResponse{Status: okStatus, MessageId: id}, nil
}
