package benchmark

import (
	"context"
	"fmt"
	"strconv"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/rmqpb"
)

// Lite topics in gRPC mode (Config.Lite): the producers send each message
// to the next of Lite lite topics of Topic ("L0", "L1", ...); consumer id
// takes the lite topics whose index is id modulo the consumers, declares
// itself a lite push consumer on a telemetry stream (the broker serves lite
// receives to lite clients only) and subscribes to its share
// (SyncLiteSubscription), from the start of each lite topic when the run
// consumes a backlog, else from its end.

// messageType is the type of the messages the producers send.
func (t *grpcTarget) messageType() rmqpb.MessageType {
	if t.cfg.Lite > 0 {
		return rmqpb.MessageType_LITE
	}
	return rmqpb.MessageType_NORMAL
}

// liteName is the lite topic of the message with sequence number seq.
func (t *grpcTarget) liteName(seq uint64) *string {
	s := "L" + strconv.FormatUint(seq%uint64(t.cfg.Lite), 10)
	return &s
}

// createLite creates the LITE parent (Topic, Queues queues) and the lite
// group bound to it in the embedded broker.
func (t *grpcTarget) createLite() error {
	c := t.embedded.b.Core()
	if err := c.Admin().CreateTopic(&core.TopicRequest{Topic: t.cfg.Topic, ReadQueueNums: int32(t.cfg.Queues),
		WriteQueueNums: int32(t.cfg.Queues), Perm: protocol.PermRead | protocol.PermWrite, Attributes: "+message.type=LITE"}); err != nil {
		return fmt.Errorf("benchmark: create the lite parent %s: %w", t.cfg.Topic, err)
	}
	g := protocol.DefaultSubscriptionGroupConfig(t.group)
	g.Attributes = map[string]string{"+lite.bind.topic": t.cfg.Topic}
	if err := c.Admin().UpdateSubscriptionGroup(g); err != nil {
		return fmt.Errorf("benchmark: create the lite group %s: %w", t.group, err)
	}
	return nil
}

// startLite makes consumer id a lite client of the group with its share of
// the lite topics; stop ends its telemetry stream.
func (t *grpcTarget) startLite(ctx context.Context, cli rmqpb.MessagingServiceClient, id int, fromStart bool) (stop func(), err error) {
	sctx, cancel := context.WithCancel(ctx)
	stream, err := cli.Telemetry(sctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("benchmark: telemetry: %w", err)
	}
	typ := rmqpb.ClientType_LITE_PUSH_CONSUMER
	group := &rmqpb.Resource{Name: t.group}
	if err := stream.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		ClientType: &typ, PubSub: &rmqpb.Settings_Subscription{Subscription: &rmqpb.Subscription{Group: group,
			Subscriptions: []*rmqpb.SubscriptionEntry{{Topic: &rmqpb.Resource{Name: t.cfg.Topic},
				Expression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"}}}}}}}}); err != nil {
		cancel()
		return nil, fmt.Errorf("benchmark: telemetry settings: %w", err)
	}
	if _, err := stream.Recv(); err != nil { // the server's settings: the client is known
		cancel()
		return nil, fmt.Errorf("benchmark: telemetry settings: %w", err)
	}
	go func() { // drain the stream until it ends
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	var share []string
	for i := id % max(t.cfg.Consumers, 1); i < t.cfg.Lite; i += max(t.cfg.Consumers, 1) {
		share = append(share, "L"+strconv.Itoa(i))
	}
	req := &rmqpb.SyncLiteSubscriptionRequest{Action: rmqpb.LiteSubscriptionAction_PARTIAL_ADD,
		Topic: &rmqpb.Resource{Name: t.cfg.Topic}, Group: group}
	if fromStart {
		req.OffsetOption = &rmqpb.OffsetOption{OffsetType: &rmqpb.OffsetOption_Policy_{Policy: rmqpb.OffsetOption_MIN}}
	}
	for len(share) > 0 { // in sets the proxy's quota check takes (the group's 2000 + 300)
		n := min(len(share), 2000)
		req.LiteTopicSet = share[:n]
		share = share[n:]
		r, err := cli.SyncLiteSubscription(ctx, req)
		if err == nil {
			err = statusErr(r.GetStatus())
		}
		if err != nil {
			cancel()
			return nil, fmt.Errorf("benchmark: subscribe to lite topics: %w", err)
		}
	}
	return cancel, nil
}
