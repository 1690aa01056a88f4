package broker

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// Defaults of Options (the core's, and the front end's own).
const (
	DefaultBrokerName          = core.DefaultBrokerName
	DefaultClusterName         = core.DefaultClusterName
	DefaultTopicQueues         = core.DefaultTopicQueues
	DefaultMaxMessageSize      = core.DefaultMaxMessageSize
	DefaultLongPollMax         = core.DefaultLongPollMax
	DefaultOffsetFlushInterval = core.DefaultOffsetFlushInterval
	DefaultClientTimeout       = core.DefaultClientTimeout
	DefaultMaxInFlightBytes    = core.DefaultMaxInFlightBytes
	DefaultBusyTimeout         = core.DefaultBusyTimeout
	DefaultRegisterInterval    = 30 * time.Second
	DefaultLockExpiry          = core.DefaultLockExpiry
	DefaultSlaveSyncInterval   = 10 * time.Second

	// DefaultDelayLevels are RocketMQ's 18 delay levels (messageDelayLevel).
	DefaultDelayLevels               = core.DefaultDelayLevels
	DefaultProgressFlushInterval     = core.DefaultProgressFlushInterval
	DefaultTimerMaxDelay             = core.DefaultTimerMaxDelay
	DefaultTimerRollInterval         = core.DefaultTimerRollInterval
	DefaultTransactionTimeout        = core.DefaultTransactionTimeout
	DefaultTransactionCheckInterval  = core.DefaultTransactionCheckInterval
	DefaultTransactionCheckMax       = core.DefaultTransactionCheckMax
	DefaultMaxDelayMessageSize       = core.DefaultMaxDelayMessageSize
	DefaultMaxTransactionMessageSize = core.DefaultMaxTransactionMessageSize
)

// Options configure a Broker: its core's options (broker/core.Options, whose
// documentation each field repeats) and the front end's own (NamesrvAddrs,
// RegisterInterval, Remoting). The zero value of every field means its
// default.
type Options struct {
	// DataDir is the broker's root directory: the store lives in it and the
	// managers' files in DataDir/config. Required.
	DataDir string
	// Store tunes the message store. Dir is set from DataDir, StoreHost from
	// AdvertiseAddr, MaxMessageSize from MaxMessageSize, and OnArrival is the
	// broker's (a caller's OnArrival is called after it).
	Store store.Options
	// BrokerName and ClusterName default to "broker-a" and "DefaultCluster".
	BrokerName, ClusterName string
	// AdvertiseAddr is the host:port put in routes and in offset message ids.
	// Required. A host name is resolved once, at New.
	AdvertiseAddr string
	// NamesrvAddrs are external name servers to register with (in addition
	// to the embedded registry, which is always kept up to date). Empty: only
	// the embedded registry.
	NamesrvAddrs []string
	// DisableAutoCreateTopic turns off RocketMQ's autoCreateTopicEnable: sends
	// to unknown topics then fail with TOPIC_NOT_EXIST (17), except to
	// %RETRY% topics, and TBW102 is not registered. Default: auto-create on.
	DisableAutoCreateTopic bool
	// DefaultTopicQueues is the queue count of TBW102, the template of
	// auto-created topics (which get min(the producer's
	// defaultTopicQueueNums, this)). Default 8.
	DefaultTopicQueues int
	// MaxMessageSize bounds a message body (a batch's whole body). Default 4 MiB.
	MaxMessageSize int
	// LongPollMax caps how long a pull is held (the client's
	// suspendTimeoutMillis is obeyed below it). Default 25 s: the Go client
	// gives up on a pull after 30 s.
	LongPollMax time.Duration
	// OffsetFlushInterval is how often consumer offsets are persisted (also at
	// Shutdown). Default 5 s.
	OffsetFlushInterval time.Duration
	// ClientTimeout removes a client (and closes its connection) that sent
	// no heartbeat for this long. Default 120 s.
	ClientTimeout time.Duration
	// MaxInFlightBytes bounds the message bytes of send requests being
	// stored or waiting for their flush; a send over it is answered
	// SYSTEM_BUSY (2) at once. Default 256 MiB.
	MaxInFlightBytes int64
	// BusyTimeout: when puts are in progress and none completed for this long
	// (the store is stalled), new sends are answered SYSTEM_BUSY (2) at once,
	// like RocketMQ's osPageCacheBusyTimeOutMills. Default 1 s.
	BusyTimeout time.Duration
	// RegisterInterval is how often the broker registers again with the name
	// servers (besides after every topic change). Default 30 s.
	RegisterInterval time.Duration
	// LockExpiry is how long a queue lock (LOCK_BATCH_MQ) lives without being
	// renewed. Default 60 s.
	LockExpiry time.Duration
	// DelayLevels are the delay levels of the DELAY property, RocketMQ's
	// messageDelayLevel syntax: durations with the units s, m, h and d,
	// separated by spaces; level n is the n-th. Default DefaultDelayLevels
	// (18 levels, 1s to 2h). SCHEDULE_TOPIC_XXXX gets one queue per level.
	DelayLevels string
	// ProgressFlushInterval is how often the progress of the delay-level
	// scanners (config/delayOffset.json), the timer wheel
	// (config/timerCheckpoint.json) and the transaction checker
	// (config/transactionCheckpoint.json) is persisted when it changed (also
	// at Shutdown). After a crash, what was delivered since the last write is
	// delivered again (at least once). Default 1 s.
	ProgressFlushInterval time.Duration
	// TimerMaxDelay bounds how far in the future TIMER_DELIVER_MS,
	// TIMER_DELAY_SEC and TIMER_DELAY_MS may put a message: a longer delay is
	// refused with MESSAGE_ILLEGAL (13). Default 40 days.
	TimerMaxDelay time.Duration
	// TimerRollInterval: a timer record older than this (by store hour) is
	// written again to the timer topic before retention can delete it, so a
	// timer may outlive the commit log's retention. Keep it well below the
	// store's RetentionTime. Default 24 h (capped at a third of RetentionTime).
	TimerRollInterval time.Duration
	// TransactionTimeout: a half message younger than this is not checked
	// back (RocketMQ's transactionTimeOut; a message's
	// CHECK_IMMUNITY_TIME_IN_SECONDS overrides it). Default 6 s.
	TransactionTimeout time.Duration
	// TransactionCheckInterval is the time between two checks of the same
	// half message (transactionCheckInterval). Default 30 s.
	TransactionCheckInterval time.Duration
	// TransactionCheckMax is how many times a half message is checked back
	// before it is moved to TRANS_CHECK_MAX_TIME_TOPIC (transactionCheckMax).
	// Default 15.
	TransactionCheckMax int
	// MaxDelayMessageSize and MaxTransactionMessageSize bound the body of a
	// delay or timer message and of a transactional message (RocketMQ 5's
	// per-type limits). A retry (a send to %RETRY%, or a send-back) is
	// bounded by MaxMessageSize only. Defaults 64 KiB each.
	MaxDelayMessageSize, MaxTransactionMessageSize int
	// DisablePropertyFilter turns off SQL92 filtering (RocketMQ's
	// enablePropertyFilter=false): a pull filtered by SQL92 is then answered
	// SYSTEM_ERROR (1). Default: SQL92 filtering on.
	DisablePropertyFilter bool
	// Remoting configures the server Serve uses (nil: remoting's defaults).
	Remoting *remoting.Options
	// FS is the file system every file under DataDir goes through (the
	// core's state files and, when Store.FS is nil, the store's; in
	// controller mode also broker/ctrlmode's identity and epoch files).
	// Default vfs.Default; tests wrap it.
	FS vfs.FS
	// WriteConfigFile replaces how the files under DataDir/config are
	// written (a seam for tests that inject failures). Default: through FS,
	// write a temporary file, fsync it, keep the target's current version
	// as TARGET.bak (the fallback at start), rename the temporary file over
	// the target, fsync the directory.
	WriteConfigFile func(path string, data []byte) error
	// Logger receives the broker's log lines. Default slog.Default().
	Logger *slog.Logger
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
	// MaxAutoCreateTopics, MaxAutoCreateGroups and MaxAutoCreatePerSource
	// cap what requests create by themselves (broker/core.Options, whose
	// documentation each repeats): topics and groups in all (default 10000
	// each) and per source address (1000 an hour). Negative: no cap.
	MaxAutoCreateTopics, MaxAutoCreateGroups, MaxAutoCreatePerSource int

	// Role, BrokerID, SlaveReadEnable and AccessMessageInMemoryMaxRatio
	// are the core's (core.Options): the broker's role in its group
	// (default ASYNC_MASTER), its id (0 for a master, 1 or more for a
	// slave), reads from slaves (default off) and the memory window
	// (default 40% of RAM). replica.go describes what each role does here.
	Role                          core.Role
	BrokerID                      int64
	SlaveReadEnable               bool
	AccessMessageInMemoryMaxRatio float64
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
	// ClientTLS, when set, makes the broker's own remoting connections TLS:
	// its registrations with the name servers and a slave's requests to
	// its master (the tables it follows). Default: plain.
	ClientTLS *tls.Config
	// ControllerNotify, when set, takes NOTIFY_BROKER_ROLE_CHANGED (1008)
	// requests from the controller (controller/client.Client.HandleNotify).
	// Default: the code is not served.
	ControllerNotify func(*protocol.Command) error
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
}

// core returns the core's options: every field but the front end's own
// (NamesrvAddrs, RegisterInterval, Remoting). The core fills in the
// defaults and validates them.
func (o Options) core() core.Options {
	return core.Options{
		DataDir: o.DataDir, Store: o.Store, BrokerName: o.BrokerName, ClusterName: o.ClusterName,
		AdvertiseAddr: o.AdvertiseAddr, DisableAutoCreateTopic: o.DisableAutoCreateTopic,
		DefaultTopicQueues: o.DefaultTopicQueues, MaxMessageSize: o.MaxMessageSize, LongPollMax: o.LongPollMax,
		OffsetFlushInterval: o.OffsetFlushInterval, ClientTimeout: o.ClientTimeout,
		MaxInFlightBytes: o.MaxInFlightBytes, BusyTimeout: o.BusyTimeout, LockExpiry: o.LockExpiry,
		DelayLevels: o.DelayLevels, ProgressFlushInterval: o.ProgressFlushInterval,
		TimerMaxDelay: o.TimerMaxDelay, TimerRollInterval: o.TimerRollInterval,
		TransactionTimeout: o.TransactionTimeout, TransactionCheckInterval: o.TransactionCheckInterval,
		TransactionCheckMax: o.TransactionCheckMax, MaxDelayMessageSize: o.MaxDelayMessageSize,
		MaxTransactionMessageSize: o.MaxTransactionMessageSize, DisablePropertyFilter: o.DisablePropertyFilter,
		FS: o.FS, WriteConfigFile: o.WriteConfigFile, Logger: o.Logger,
		MaxAutoCreateTopics: o.MaxAutoCreateTopics, MaxAutoCreateGroups: o.MaxAutoCreateGroups,
		MaxAutoCreatePerSource: o.MaxAutoCreatePerSource,
		Role:                   o.Role, BrokerID: o.BrokerID, SlaveReadEnable: o.SlaveReadEnable,
		AccessMessageInMemoryMaxRatio: o.AccessMessageInMemoryMaxRatio,
	}
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
