package grpcfe

import (
	"errors"

	"github.com/apogeemq/apogee/broker/core"
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

// errStatus maps an error of the core (an *core.Error: its Reason, through
// reasonCodes, generated from broker/core/errors.json) or of the front end
// (a *statusError) to a Status. The message is the core's remark.
func errStatus(err error) *rmqpb.Status {
	if err == nil {
		return okStatus
	}
	var se *statusError
	if errors.As(err, &se) {
		return status(se.code, se.msg)
	}
	return status(codeOf(core.ReasonOf(err)), core.Remark(err))
}

// codeOf returns the status code of a reason (INTERNAL_SERVER_ERROR for a
// value outside the table).
func codeOf(r core.Reason) rmqpb.Code {
	if int(r) < len(reasonCodes) {
		if c := reasonCodes[r]; c != rmqpb.Code_CODE_UNSPECIFIED || r == core.ReasonNone {
			return c
		}
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
