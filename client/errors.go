package client

import (
	"errors"
	"fmt"

	"github.com/apogeemq/apogee/protocol"
)

// Sentinel errors. Errors returned by this package wrap one of them (or a
// *BrokerError, or an error from package remoting) with context; test with
// errors.Is and errors.As.
var (
	// ErrClosed: the producer or consumer was closed.
	ErrClosed = errors.New("client: closed")
	// ErrNotStarted: a consumer method that needs Start was called before it.
	ErrNotStarted = errors.New("client: not started")
	// ErrStarted: Start was called twice.
	ErrStarted = errors.New("client: already started")
	// ErrConfig: an option is invalid or a required one is missing.
	ErrConfig = errors.New("client: invalid configuration")
	// ErrNoNameServer: no name server address was configured (option NameServer or
	// the NAMESRV_ADDR environment variable).
	ErrNoNameServer = errors.New("client: no name server address")
	// ErrTopicNotExist: the name server knows no route for the topic (and, for a
	// producer, the auto-create fallback through the create-topic key found none either).
	ErrTopicNotExist = errors.New("client: topic does not exist")
	// ErrNoRoute: the topic's route has no usable queue or broker address.
	ErrNoRoute = errors.New("client: no usable route")
	// ErrGroupInUse: a consumer of the same group is already running in this client
	// instance. Give the second one its own InstanceName.
	ErrGroupInUse = errors.New("client: consumer group already has a consumer in this client instance")
	// ErrInstanceConflict: a client was created with the client ID of an existing
	// instance but different instance-level options (name servers, header encoding,
	// intervals). Give it its own InstanceName.
	ErrInstanceConflict = errors.New("client: client instance exists with different options")
	// ErrMessageTooLarge: the (compressed) body exceeds MaxMessageSize.
	ErrMessageTooLarge = errors.New("client: message too large")
	// ErrBadMessage: the message cannot be sent as it is (no topic, a property with a
	// separator byte, properties over 32767 bytes, a delayed message in a batch, ...).
	ErrBadMessage = errors.New("client: invalid message")
	// ErrTimeout: the send or request did not complete within its timeout.
	ErrTimeout = errors.New("client: timed out")
	// ErrQueueNotFound: a selector chose no queue (ManualSelector with a queue that is
	// not in the topic's route, or a custom selector returning an index out of range).
	ErrQueueNotFound = errors.New("client: queue not found")
	// ErrNotTransactional: SendInTransaction on a producer without a TransactionListener.
	ErrNotTransactional = errors.New("client: producer has no transaction listener")
	// ErrNotAssigned: a pull-consumer operation on a queue it does not own.
	ErrNotAssigned = errors.New("client: queue not assigned")
)

// BrokerError is a response code other than success from a broker or name server.
type BrokerError struct {
	Code   int32  // response code (protocol.Resp*)
	Remark string // the broker's remark
	Addr   string // the address that answered
}

func (e *BrokerError) Error() string {
	name := protocol.ResponseCodeName(e.Code)
	if name == "" {
		name = "UNKNOWN"
	}
	return fmt.Sprintf("client: broker %s answered %d %s: %s", e.Addr, e.Code, name, e.Remark)
}

// Is makes errors.Is(err, ErrTopicNotExist) true for code TOPIC_NOT_EXIST.
func (e *BrokerError) Is(target error) bool {
	return target == ErrTopicNotExist && e.Code == protocol.RespTopicNotExist
}

func brokerError(addr string, resp *protocol.Command) *BrokerError {
	return &BrokerError{Code: resp.Code, Remark: string(resp.Remark), Addr: addr}
}
