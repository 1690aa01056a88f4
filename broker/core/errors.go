package core

//go:generate go run ./internal/errgen

import (
	"errors"
	"strconv"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// Reason is why the core refused a request: one row of errors.json, the
// one table of the core's refusals. Each row names the RocketMQ remoting
// response code the reason is answered with (Reason.Code) and the status
// code of RocketMQ 5's gRPC protocol (broker/grpcfe's generated
// reasonCodes); go generate writes the constants and both mappings from
// the table (internal/errgen). Callers switch on a Reason, never on an
// error's text.
type Reason uint16

// ReasonNone is the reason of no error.
const ReasonNone Reason = 0

// reasonRow is one row of errors.json (errors_gen.go's reasons).
type reasonRow struct {
	name        string
	code        int32
	generic     bool
	description string
}

func (r Reason) valid() bool { return r > ReasonNone && int(r) < numReasons }

// String returns the reason's name (its constant without "Reason").
func (r Reason) String() string {
	if r == ReasonNone {
		return "None"
	}
	if !r.valid() {
		return "Reason(" + strconv.Itoa(int(r)) + ")"
	}
	return reasons[r].name
}

// Code returns the remoting response code the reason is answered with:
// SUCCESS for ReasonNone, SYSTEM_ERROR for a value outside the table.
func (r Reason) Code() int32 {
	if r == ReasonNone {
		return protocol.RespSuccess
	}
	if !r.valid() {
		return protocol.RespSystemError
	}
	return reasons[r].code
}

// Description returns the table's description of the reason.
func (r Reason) Description() string {
	if !r.valid() {
		return ""
	}
	return reasons[r].description
}

// Generic reports whether the reason stands for its whole remoting code
// (the reason of the code's sentinel, ErrTopicNotExist, ...).
func (r Reason) Generic() bool { return r.valid() && reasons[r].generic }

// Reasons returns every reason of the table, in its order.
func Reasons() []Reason {
	out := make([]Reason, 0, numReasons-1)
	for r := Reason(1); int(r) < numReasons; r++ {
		out = append(out, r)
	}
	return out
}

// Error is the one error type the core's operations return for a refusal
// a client is told about. Reason is why (a row of errors.json); Code is
// the RocketMQ response code it is answered with over remoting (the
// reason's, set by the core's constructors), and Remark the text the Java
// broker gives in that case (clients see it; nothing may branch on it). A
// front end maps an *Error to its answer in one place (the remoting front
// end: Code and Remark; the gRPC front end: the status code of Reason).
// Err, when set, is the cause (a store error, a feature package's
// sentinel), reachable through errors.Is and errors.As.
//
// A front end may build an *Error of its own with a Code and no Reason
// (the remoting front end's refusals, an answer relayed from a client):
// ReasonOf gives it the generic reason of its code.
//
// errors.Is(err, target) holds for a target *Error of a generic reason
// (the sentinels below: ErrTopicNotExist, ...) when err has the same Code,
// so a sentinel names a class of refusals whatever the reason and remark;
// for any other target, when err has the same Reason.
type Error struct {
	Reason Reason
	Code   int32
	Remark string
	Err    error
}

func (e *Error) Error() string {
	if e.Remark == "" {
		return "response code " + strconv.Itoa(int(e.code()))
	}
	return e.Remark
}

// code is e.Code, or its reason's when unset.
func (e *Error) code() int32 {
	if e.Code == protocol.RespSuccess && e.Reason != ReasonNone {
		return e.Reason.Code()
	}
	return e.Code
}

// reason is e.Reason, or the generic reason of its code when unset.
func (e *Error) reason() Reason {
	if e.Reason == ReasonNone {
		return genericReason(e.Code)
	}
	return e.Reason
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error of the same code (a target of a
// generic reason) or of the same reason (any other target).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if tr := t.reason(); !tr.Generic() {
		return tr == e.reason()
	}
	return t.code() == e.code()
}

// Sentinels: one per response code the core's operations refuse with. Match
// them with errors.Is (by code); the errors returned carry their own reason
// and remark.
var (
	ErrSystem                    = newError(ReasonSystemError, "system error")
	ErrSystemBusy                = newError(ReasonSystemBusy, "broker busy")
	ErrFlushDiskTimeout          = newError(ReasonFlushDiskTimeout, "flush disk timeout")
	ErrMessageIllegal            = newError(ReasonMessageIllegal, "message illegal")
	ErrServiceNotAvailable       = newError(ReasonServiceNotAvailable, "service not available")
	ErrNoPermission              = newError(ReasonNoPermission, "no permission")
	ErrTopicNotExist             = newError(ReasonTopicNotExist, "topic not exist")
	ErrQueryNotFound             = newError(ReasonQueryNotFound, "query not found")
	ErrSubscriptionParseFailed   = newError(ReasonSubscriptionParseFailed, "subscription parse failed")
	ErrSubscriptionNotExist      = newError(ReasonSubscriptionNotExist, "subscription not exist")
	ErrSubscriptionNotLatest     = newError(ReasonSubscriptionNotLatest, "subscription not latest")
	ErrSubscriptionGroupNotExist = newError(ReasonSubscriptionGroupNotExist, "subscription group not exist")
	ErrInvalidParameter          = newError(ReasonInvalidParameter, "invalid parameter")
	ErrConsumerNotOnline         = newError(ReasonConsumerNotOnline, "consumer not online")
	ErrNoMessage                 = newError(ReasonNoMessage, "no message")
	// ErrSlaveNotAvailable and ErrFlushSlaveTimeout are the outcomes of a
	// durability wait on a SYNC_MASTER whose slave did not acknowledge the
	// messages (store.ErrReplicaNotAvailable, store.ErrReplicaTimeout): the
	// messages are stored on the master all the same, and a send answers
	// with the send result's fields (clients count 10, 11 and 12 as sent).
	ErrSlaveNotAvailable = newError(ReasonSlaveNotAvailable, "slave not available")
	ErrFlushSlaveTimeout = newError(ReasonFlushSlaveTimeout, "flush slave timeout")
)

// newError returns an *Error of a reason (and its code) with a remark.
func newError(r Reason, remark string) *Error {
	return &Error{Reason: r, Code: r.Code(), Remark: remark}
}

// wrapError returns an *Error of a reason with a remark and a cause.
func wrapError(r Reason, remark string, cause error) *Error {
	return &Error{Reason: r, Code: r.Code(), Remark: remark, Err: cause}
}

// ReasonOf returns the reason of err: ReasonNone for nil, an *Error's
// reason (the generic reason of its code when it has none),
// ReasonSystemError for any other error.
func ReasonOf(err error) Reason {
	if err == nil {
		return ReasonNone
	}
	var e *Error
	if errors.As(err, &e) {
		return e.reason()
	}
	return ReasonSystemError
}

// Code returns the response code of err: 0 (SUCCESS) for nil, an *Error's
// code, SYSTEM_ERROR (1) for any other error.
func Code(err error) int32 {
	if err == nil {
		return protocol.RespSuccess
	}
	var e *Error
	if errors.As(err, &e) {
		return e.code()
	}
	return protocol.RespSystemError
}

// Remark returns the remark of err for the wire: an *Error's remark, err's
// text for any other error, "" for nil. Nothing may branch on it.
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
	case errors.Is(err, store.ErrMessageTooLarge), errors.Is(err, store.ErrRecordTooLarge):
		return wrapError(ReasonMessageBodyTooLarge, "the message is illegal: "+err.Error(), err)
	case errors.Is(err, store.ErrBadMessage):
		return wrapError(ReasonMessageMalformed, "the message is illegal: "+err.Error(), err)
	case errors.Is(err, store.ErrDiskFull):
		return wrapError(ReasonStoreDiskFull, "service not available now: the broker's disk is full", err)
	case errors.Is(err, store.ErrClosed):
		return wrapError(ReasonStoreClosed, "service not available now: the message store is shut down", err)
	case errors.Is(err, store.ErrReplica):
		return wrapError(ReasonStoreReplica, "service not available now: messages are put to the slave", err)
	case errors.Is(err, store.ErrLogFailed):
		return wrapError(ReasonStoreFailed, "service not available now: the commit log failed: "+err.Error(), err)
	}
	return wrapError(ReasonStoreError, "store error: "+err.Error(), err)
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
		return wrapError(ReasonSlaveNotAvailable, "slave not available: "+err.Error(), err)
	case errors.Is(err, store.ErrReplicaTimeout):
		return wrapError(ReasonFlushSlaveTimeout, "flush slave timeout: "+err.Error(), err)
	case errors.Is(err, store.ErrFlushTimeout):
		return wrapError(ReasonFlushDiskTimeout, "flush disk timeout: "+err.Error(), err)
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
