package grpcfe

import (
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/rmqpb"
)

// liteProperty checks a sent message's lite topic (RocketMQ 5.5, RIP-83)
// and adds it to the properties: the name by RocketMQ's proxy's rule
// (core.CheckLiteTopic: ILLEGAL_LITE_TOPIC), a LITE message with one, and
// no other type with one (the SDK refuses a lite topic with a message
// group, a delivery time or a transaction; a message declared LITE
// without a lite topic is a type conflict).
func liteProperty(p *[]byte, lite string, ct core.MessageType) error {
	if ct != core.MessageLite {
		return badRequest(rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
			"a "+ct.String()+" message cannot have a lite topic")
	}
	if lite == "" {
		return badRequest(rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a LITE message has no lite topic")
	}
	if err := core.CheckLiteTopic(lite); err != nil {
		return err
	}
	*p = message.AppendProperty(*p, message.PropertyLiteTopic, lite)
	return nil
}
