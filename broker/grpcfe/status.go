package grpcfe

import (
	"errors"
	"strings"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/rmqpb"
)

// The one place where refusals become statuses. Every method answers its
// outcome in the response's Status (the gRPC status stays OK unless the
// call itself failed), as RocketMQ's proxy does.

var okStatus = &rmqpb.Status{Code: rmqpb.Code_OK, Message: "OK"}

// status returns a Status of code with message.
func status(code rmqpb.Code, msg string) *rmqpb.Status {
	return &rmqpb.Status{Code: code, Message: msg}
}

// errStatus maps an error of the core (an *core.Error with RocketMQ's
// response code) or of the front end (a *statusError) to a Status.
func errStatus(err error) *rmqpb.Status {
	if err == nil {
		return okStatus
	}
	var se *statusError
	if errors.As(err, &se) {
		return status(se.code, se.msg)
	}
	return status(codeOf(err), core.Remark(err))
}

// codeOf maps the core's response codes to the protocol's status codes.
func codeOf(err error) rmqpb.Code {
	remark := core.Remark(err)
	switch core.Code(err) {
	case protocol.RespSuccess:
		return rmqpb.Code_OK
	case protocol.RespTopicNotExist:
		return rmqpb.Code_TOPIC_NOT_FOUND
	case protocol.RespNoPermission:
		return rmqpb.Code_FORBIDDEN
	case protocol.RespSystemBusy:
		return rmqpb.Code_TOO_MANY_REQUESTS
	case protocol.RespMessageIllegal:
		switch {
		case strings.Contains(remark, "body size"), strings.Contains(remark, "too large"):
			return rmqpb.Code_MESSAGE_BODY_TOO_LARGE
		case strings.Contains(remark, "properties"):
			return rmqpb.Code_MESSAGE_PROPERTIES_TOO_LARGE
		case strings.Contains(remark, "message type"):
			return rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
		case strings.Contains(remark, "queueId"):
			return rmqpb.Code_BAD_REQUEST
		case strings.Contains(remark, "delay") || strings.Contains(remark, "timer") || strings.Contains(remark, "TIMER"):
			return rmqpb.Code_ILLEGAL_DELIVERY_TIME
		}
		return rmqpb.Code_BAD_REQUEST
	case protocol.RespSubscriptionParseFailed:
		return rmqpb.Code_ILLEGAL_FILTER_EXPRESSION
	case protocol.RespSubscriptionGroupNotExist:
		return rmqpb.Code_CONSUMER_GROUP_NOT_FOUND
	case protocol.RespSubscriptionNotExist, protocol.RespSubscriptionNotLatest:
		return rmqpb.Code_PRECONDITION_FAILED
	case protocol.RespInvalidParameter:
		return rmqpb.Code_BAD_REQUEST
	case protocol.RespNoMessage:
		return rmqpb.Code_INVALID_RECEIPT_HANDLE
	case protocol.RespQueryNotFound:
		return rmqpb.Code_OFFSET_NOT_FOUND
	case protocol.RespFlushDiskTimeout:
		return rmqpb.Code_MASTER_PERSISTENCE_TIMEOUT
	case protocol.RespServiceNotAvailable:
		return rmqpb.Code_INTERNAL_SERVER_ERROR
	case protocol.RespConsumerNotOnline:
		return rmqpb.Code_NOT_FOUND
	}
	return rmqpb.Code_INTERNAL_SERVER_ERROR
}

// statusError is a refusal of the front end itself (a request the
// protocol says is malformed), with its status code.
type statusError struct {
	code rmqpb.Code
	msg  string
}

func (e *statusError) Error() string { return e.code.String() + ": " + e.msg }

func badRequest(code rmqpb.Code, msg string) error { return &statusError{code: code, msg: msg} }
