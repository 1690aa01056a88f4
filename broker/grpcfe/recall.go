package grpcfe

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/apogeemq/apogee/rmqpb"
)

// recallHandle names a scheduled message for RecallMessage: its topic, its
// message id and its commit-log offset, base64url-encoded.
func recallHandle(topic, msgID string, commitLogOffset int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(topic + " " + msgID + " " + strconv.FormatInt(commitLogOffset, 10)))
}

// parseRecallHandle undoes recallHandle.
func parseRecallHandle(h string) (topic, msgID string, commitLogOffset int64, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		return "", "", 0, false
	}
	f := strings.Split(string(b), " ")
	if len(f) != 3 {
		return "", "", 0, false
	}
	off, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || off < 0 {
		return "", "", 0, false
	}
	return f[0], f[1], off, true
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
