package broker

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Defaults of the front end's options (the core's are package
// broker/core's).
const (
	DefaultRegisterInterval  = 30 * time.Second
	DefaultSlaveSyncInterval = 10 * time.Second
)

// Options configure a Broker: the messaging core's (Core, package
// broker/core's own options) and the remoting front end's, each said once.
// The zero value of every field means its default.
type Options struct {
	// Core configures the messaging core: the store, the tables, the
	// features, the broker's name, role and address (core.Options). Its
	// Store.OnArrival is the broker's too (a caller's is called after it).
	Core core.Options
	// NamesrvAddrs are the external name servers to register with (none:
	// only the embedded registry). A classic slave needs them or
	// HAMasterAddr.
	NamesrvAddrs []string
	// RegisterInterval is how often the whole topic table is registered
	// again (embedded registry and name servers). Default 30 s.
	RegisterInterval time.Duration
	// Remoting configures the server Serve uses (nil: remoting's defaults).
	Remoting *remoting.Options
	// SlowRequest logs, as one WARN line, every request whose handler ran
	// longer than this on its connection's goroutine (the time that holds
	// the connection's other requests back; a request answered later, such
	// as a held pull or a sync-flush send, is timed until it was deferred).
	// Default 0: off.
	SlowRequest time.Duration
	// Security, when set, authenticates and authorizes every request
	// before it is served (package acl's Guard; see docs/security.md), on
	// the broker's address and on NamesrvHandler. Default nil: off, every
	// request served (RocketMQ's default).
	Security Security

	// Replication (replica.go; the role and id are Core's).
	//
	// HAAdvertiseAddr, on a master, is the HA address registered with the
	// name servers (haServerAddr), where its slaves connect for the
	// commit-log stream that ServeHA serves. Default: AdvertiseAddr's host
	// with the port of the first listener given to ServeHA.
	HAAdvertiseAddr string
	// HAMasterAddr, on a slave, is its master's HA address (RocketMQ's
	// haMasterAddress). Default: the one the name servers answer each
	// registration with (their haServerAddr), followed as it changes. A
	// slave needs NamesrvAddrs or this.
	HAMasterAddr string
	// SlaveSyncInterval, on a slave, is how often the master's topics,
	// subscription groups, consumer offsets and delay offsets are fetched
	// and applied (RocketMQ's SlaveSynchronize). Default 10 s.
	SlaveSyncInterval time.Duration

	// Controller mode (docs/failover.md; package broker/ctrlmode runs a
	// broker under a controller group and sets these).
	//
	// ControllerMode makes the controller, not the name servers, name a
	// slave's master: registration answers no longer steer the HA stream
	// or the tables a slave follows (FollowMaster does). Default false.
	ControllerMode bool
	// StateVersion is put in every registration's data version
	// (stateVersion): in controller mode the master epoch, so that a name
	// server lets a new master take the route of an old one it still
	// thinks alive (RocketMQ's rule). Default 0.
	StateVersion int64
	// HAMasterHandshake and HASlaveHandshake are the HA stream's handshake
	// hooks (ha.MasterOptions.Handshake, ha.SlaveOptions.Handshake).
	// Default none.
	HAMasterHandshake func(net.Conn) (string, error)
	HASlaveHandshake  func(net.Conn) error
	// HASecure, on a master, prepares each connection the HA listener
	// accepts (ha.MasterOptions.Secure): cmd/apogee-broker passes its
	// tlsconf server's Handshake, so that the HA port follows --tls-mode.
	// HATLS, on a slave, makes its connections to the master TLS
	// (ha.SlaveOptions.TLS). Default: plain TCP both.
	HASecure func(context.Context, net.Conn) (net.Conn, error)
	HATLS    *tls.Config
	// HAVerify, on a master, makes the HA port require authentication
	// (ha.MasterOptions.Verify: a slave's credentials or a verified client
	// certificate); cmd/apogee-broker sets it from its ACL when access
	// control is on. HASign, on a slave, signs the HA handshake with the
	// broker's inner credentials (ha.SlaveOptions.Sign). The HA handshake
	// always names the broker's cluster, broker name and id (a master
	// refuses a slave of another group). Default: neither.
	HAVerify func(remote net.Addr, accessKey string, content, signature []byte) (user string, err error)
	HASign   func(content []byte) (accessKey string, signature []byte)
	// GRPCAdvertiseAddr is the address of the gRPC front end on this
	// broker's core, reported by GET_BROKER_CONFIG as grpcAdvertiseAddr:
	// in controller mode a group's members find each other's there (to
	// forward to the master, and to name every member in routes). Default
	// "": none reported.
	GRPCAdvertiseAddr string
	// ClientTLS, when set, makes the broker's own remoting connections TLS:
	// its registrations with the name servers and a slave's requests to
	// its master (the tables it follows). Default: plain.
	ClientTLS *tls.Config
	// ControllerInfo, when set, adds controller mode's figures (the master
	// epoch, the SyncStateSet) to GET_BROKER_RUNTIME_INFO's table
	// (broker/ctrlmode sets it).
	ControllerInfo func(m map[string]string)
	// ControllerNotify, when set, takes NOTIFY_BROKER_ROLE_CHANGED (1008)
	// requests from the controller (controller/client.Client.HandleNotify).
	// Default: the code is not served.
	ControllerNotify func(*protocol.Command) error
	// ControllerEpochCache, when set, answers GET_BROKER_EPOCH_CACHE
	// (1007, mqadmin's getBrokerEpoch) with its JSON body (EpochEntryCache:
	// the epoch file's entries and the log's end; broker/ctrlmode sets
	// it). Default: the code is answered SYSTEM_ERROR, "not in controller
	// mode", as RocketMQ's broker does.
	ControllerEpochCache func() ([]byte, error)
	// ObserveRequest, when set, is called after every request's handler
	// with its code, the response code and the time the handler ran (timed
	// as SlowRequest times it); package broker/metrics's RPCLatency.Observe
	// is one. It runs on the connection's goroutine and must neither block
	// nor allocate. Default nil: requests are not timed.
	ObserveRequest func(code, respCode int32, took time.Duration)

	// NamesrvSign, if set, signs every request the broker sends to its
	// external name servers (registrations), for name servers with access
	// control on. Default nil: unsigned.
	NamesrvSign func(req *protocol.Command)
	// InnerSigner, when set, signs every request the broker sends over its
	// own remoting connections: registrations with the name servers, and
	// a slave's requests to its master (the tables it follows, the offsets
	// it forwards). cmd/apogee-broker sets it from
	// innerClientAuthenticationCredentials, so that brokers under ACL
	// authenticate to each other. Default nil: unsigned (a master under
	// ACL refuses them, and the slave logs an ERROR naming the key).
	InnerSigner remoting.Signer
}

// withDefaults fills in the front end's defaults (the core fills in its own).
func (o Options) withDefaults() Options {
	if o.RegisterInterval <= 0 {
		o.RegisterInterval = DefaultRegisterInterval
	}
	if o.SlaveSyncInterval <= 0 {
		o.SlaveSyncInterval = DefaultSlaveSyncInterval
	}
	return o
}
