package core

import (
	"errors"
	"strconv"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// Error is the one error type the core's operations return for a refusal a
// client is told about: RocketMQ's response code (protocol.Resp*) and the
// remark the Java broker gives in that case. A front end maps it to its
// answer in one place (the remoting front end: the response code and
// remark; a gRPC front end: a status). Err, when set, is the cause (a store
// error, a feature package's sentinel), reachable through errors.Is and
// errors.As.
//
// errors.Is(err, target) holds for a target *Error with the same Code, so
// the sentinels below (ErrTopicNotExist, ...) name a class of refusals
// whatever the remark; Code and Remark read any error.
type Error struct {
	Code   int32
	Remark string
	Err    error
}

func (e *Error) Error() string {
	if e.Remark == "" {
		return "response code " + strconv.Itoa(int(e.Code))
	}
	return e.Remark
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error of the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels: one per response code the core's operations refuse with. Match
// them with errors.Is (by code); the errors returned carry their own remark.
var (
	ErrSystem                    = &Error{Code: protocol.RespSystemError, Remark: "system error"}
	ErrSystemBusy                = &Error{Code: protocol.RespSystemBusy, Remark: "broker busy"}
	ErrFlushDiskTimeout          = &Error{Code: protocol.RespFlushDiskTimeout, Remark: "flush disk timeout"}
	ErrMessageIllegal            = &Error{Code: protocol.RespMessageIllegal, Remark: "message illegal"}
	ErrServiceNotAvailable       = &Error{Code: protocol.RespServiceNotAvailable, Remark: "service not available"}
	ErrNoPermission              = &Error{Code: protocol.RespNoPermission, Remark: "no permission"}
	ErrTopicNotExist             = &Error{Code: protocol.RespTopicNotExist, Remark: "topic not exist"}
	ErrQueryNotFound             = &Error{Code: protocol.RespQueryNotFound, Remark: "query not found"}
	ErrSubscriptionParseFailed   = &Error{Code: protocol.RespSubscriptionParseFailed, Remark: "subscription parse failed"}
	ErrSubscriptionNotExist      = &Error{Code: protocol.RespSubscriptionNotExist, Remark: "subscription not exist"}
	ErrSubscriptionNotLatest     = &Error{Code: protocol.RespSubscriptionNotLatest, Remark: "subscription not latest"}
	ErrSubscriptionGroupNotExist = &Error{Code: protocol.RespSubscriptionGroupNotExist, Remark: "subscription group not exist"}
	ErrInvalidParameter          = &Error{Code: protocol.RespInvalidParameter, Remark: "invalid parameter"}
	ErrConsumerNotOnline         = &Error{Code: protocol.RespConsumerNotOnline, Remark: "consumer not online"}
	ErrNoMessage                 = &Error{Code: protocol.RespNoMessage, Remark: "no message"}
	// ErrSlaveNotAvailable and ErrFlushSlaveTimeout are the outcomes of a
	// durability wait on a SYNC_MASTER whose slave did not acknowledge the
	// messages (store.ErrReplicaNotAvailable, store.ErrReplicaTimeout): the
	// messages are stored on the master all the same, and a send answers
	// with the send result's fields (clients count 10, 11 and 12 as sent).
	ErrSlaveNotAvailable = &Error{Code: protocol.RespSlaveNotAvailable, Remark: "slave not available"}
	ErrFlushSlaveTimeout = &Error{Code: protocol.RespFlushSlaveTimeout, Remark: "flush slave timeout"}
)

// newError returns an *Error with a code and remark.
func newError(code int32, remark string) *Error { return &Error{Code: code, Remark: remark} }

// Code returns the response code of err: 0 (SUCCESS) for nil, an *Error's
// code, SYSTEM_ERROR (1) for any other error.
func Code(err error) int32 {
	if err == nil {
		return protocol.RespSuccess
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return protocol.RespSystemError
}

// Remark returns the remark of err: an *Error's remark, err's text for any
// other error, "" for nil.
func Remark(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Remark
	}
	return err.Error()
}

// storeError maps a store error (a put, a read, a durability wait) to the
// answer RocketMQ gives (rocketmq-protocol.md §3).
func storeError(err error) *Error {
	switch {
	case errors.Is(err, store.ErrMessageTooLarge), errors.Is(err, store.ErrBadMessage),
		errors.Is(err, store.ErrRecordTooLarge):
		return &Error{Code: protocol.RespMessageIllegal, Remark: "the message is illegal: " + err.Error(), Err: err}
	case errors.Is(err, store.ErrDiskFull):
		return &Error{Code: protocol.RespServiceNotAvailable, Remark: "service not available now: the broker's disk is full", Err: err}
	case errors.Is(err, store.ErrClosed):
		return &Error{Code: protocol.RespServiceNotAvailable, Remark: "service not available now: the message store is shut down", Err: err}
	case errors.Is(err, store.ErrReplica):
		return &Error{Code: protocol.RespServiceNotAvailable, Remark: "service not available now: messages are put to the slave", Err: err}
	case errors.Is(err, store.ErrLogFailed):
		return &Error{Code: protocol.RespServiceNotAvailable, Remark: "service not available now: the commit log failed: " + err.Error(), Err: err}
	}
	return &Error{Code: protocol.RespSystemError, Remark: "store error: " + err.Error(), Err: err}
}

// durableError maps the error of a durability wait: nil stays nil; a wait
// that ended with the messages stored but not as durable as configured
// (store.NotDurable) is ErrFlushDiskTimeout's code, or, on a SYNC_MASTER,
// ErrSlaveNotAvailable's or ErrFlushSlaveTimeout's (a replica error wins,
// as the store reports it); anything else as storeError.
func durableError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrReplicaNotAvailable):
		return &Error{Code: protocol.RespSlaveNotAvailable, Remark: "slave not available: " + err.Error(), Err: err}
	case errors.Is(err, store.ErrReplicaTimeout):
		return &Error{Code: protocol.RespFlushSlaveTimeout, Remark: "flush slave timeout: " + err.Error(), Err: err}
	case errors.Is(err, store.ErrFlushTimeout):
		return &Error{Code: protocol.RespFlushDiskTimeout, Remark: "flush disk timeout: " + err.Error(), Err: err}
	}
	return storeError(err)
}

// NotDurable reports whether err, from WaitDurable or a DurableWaiter,
// means that the messages are stored but not as durable as the broker is
// configured to make them (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
// SLAVE_NOT_AVAILABLE): an answer that counts as success for the client,
// never a reason to store again.
func NotDurable(err error) bool {
	switch Code(err) {
	case protocol.RespFlushDiskTimeout, protocol.RespFlushSlaveTimeout, protocol.RespSlaveNotAvailable:
		return err != nil
	}
	return false
}
