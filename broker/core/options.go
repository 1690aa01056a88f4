package core

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/apogeemq/apogee/broker/delay"
	"github.com/apogeemq/apogee/broker/timerwheel"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/store"
)

// Defaults of Options.
const (
	DefaultBrokerName          = "broker-a"
	DefaultClusterName         = "DefaultCluster"
	DefaultTopicQueues         = 8
	DefaultMaxMessageSize      = 4 << 20
	DefaultLongPollMax         = 25 * time.Second
	DefaultOffsetFlushInterval = 5 * time.Second
	DefaultClientTimeout       = 120 * time.Second
	DefaultMaxInFlightBytes    = 256 << 20
	DefaultBusyTimeout         = time.Second
	DefaultLockExpiry          = 60 * time.Second

	// DefaultDelayLevels are RocketMQ's 18 delay levels (messageDelayLevel).
	DefaultDelayLevels               = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
	DefaultProgressFlushInterval     = time.Second
	DefaultTimerMaxDelay             = 40 * 24 * time.Hour
	DefaultTimerRollInterval         = 24 * time.Hour
	DefaultTransactionTimeout        = 6 * time.Second
	DefaultTransactionCheckInterval  = 30 * time.Second
	DefaultTransactionCheckMax       = 15
	DefaultMaxDelayMessageSize       = 64 << 10
	DefaultMaxTransactionMessageSize = 64 << 10
)

// MaxQueues bounds a topic's read and write queue counts.
const MaxQueues = 1024

// Options configure a Core. The zero value of every field means its default.
type Options struct {
	// DataDir is the root directory: the store lives in it and the state
	// files in DataDir/config. Required.
	DataDir string
	// Store tunes the message store. Dir is set from DataDir, StoreHost from
	// AdvertiseAddr, MaxMessageSize from MaxMessageSize, FS from FS when
	// nil, and OnArrival and TagCode are the core's (a caller's are called
	// after them).
	Store store.Options
	// BrokerName and ClusterName default to "broker-a" and "DefaultCluster".
	// ClusterName is the CLUSTER property of stored messages; both are
	// reserved words a topic may not be named.
	BrokerName, ClusterName string
	// AdvertiseAddr is the host:port of the broker: the store host of offset
	// message ids and the born host of the messages the core makes.
	// Required. A host name is resolved once, at New.
	AdvertiseAddr string
	// DisableAutoCreateTopic turns off RocketMQ's autoCreateTopicEnable: sends
	// to unknown topics then fail with TOPIC_NOT_EXIST (17), except to
	// %RETRY% topics, and TBW102 is not in the table. Default: auto-create on.
	DisableAutoCreateTopic bool
	// DefaultTopicQueues is the queue count of TBW102, the template of
	// auto-created topics (which get min(the producer's
	// defaultTopicQueueNums, this)). Default 8.
	DefaultTopicQueues int
	// MaxMessageSize bounds a message body (a batch's whole body). Default 4 MiB.
	MaxMessageSize int
	// LongPollMax caps how long a front end holds a request that waits for
	// messages (a pull's suspendTimeoutMillis, a pop's pollTime). The core
	// holds nothing itself; front ends read it from Core.Options. Default
	// 25 s: the Go client gives up on a pull after 30 s.
	LongPollMax time.Duration
	// OffsetFlushInterval is how often consumer offsets are persisted (also at
	// Shutdown). Default 5 s.
	OffsetFlushInterval time.Duration
	// ClientTimeout removes a client (and closes its connection) that sent
	// no heartbeat for this long. Default 120 s.
	ClientTimeout time.Duration
	// Lite topics (lite.go). LiteMaxSubscriptions bounds the active lite
	// subscriptions (client × lite topic; RocketMQ's
	// maxLiteSubscriptionCount, default 100,000); LiteMaxClientEvents is a
	// lite client's event capacity when its group sets none
	// (maxClientEventCount, default 100); LiteMinTTL is the least idle time
	// before a lite topic expires, and the wait after the start before the
	// first expiry scan (minLiteTTl, default 15 min); LiteTTLCheckInterval
	// is how often idle lite topics are looked for (liteTtlCheckInterval,
	// default 120 s).
	LiteMaxSubscriptions int
	LiteMaxClientEvents  int
	LiteMinTTL           time.Duration
	LiteTTLCheckInterval time.Duration
	// MaxInFlightBytes bounds the message bytes of sends being stored or
	// waiting for their flush; a send over it is refused with SYSTEM_BUSY (2)
	// at once. Default 256 MiB.
	MaxInFlightBytes int64
	// BusyTimeout: when puts are in progress and none completed for this long
	// (the store is stalled), new sends are refused with SYSTEM_BUSY (2) at
	// once, like RocketMQ's osPageCacheBusyTimeOutMills. Default 1 s.
	BusyTimeout time.Duration
	// LockExpiry is how long a queue lock (LockQueues) lives without being
	// renewed. Default 60 s.
	LockExpiry time.Duration
	// DelayLevels are the delay levels of the DELAY property, RocketMQ's
	// messageDelayLevel syntax: durations with the units s, m, h and d,
	// separated by spaces; level n is the n-th. Default DefaultDelayLevels
	// (18 levels, 1s to 2h). SCHEDULE_TOPIC_XXXX gets one queue per level.
	DelayLevels string
	// ProgressFlushInterval is how often the progress of the delay-level
	// scanners (config/delayOffset.json), the timer wheel
	// (config/timerCheckpoint.json), the transaction checker
	// (config/transactionCheckpoint.json) and POP (config/popState.json) is
	// persisted when it changed (also at Shutdown). After a crash, what was
	// delivered since the last write is delivered again (at least once).
	// Default 1 s.
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
	// enablePropertyFilter=false): a pull or pop filtered by SQL92 is then
	// refused with SYSTEM_ERROR (1). Default: SQL92 filtering on.
	DisablePropertyFilter bool
	// PriorityQueueZeroHighest makes queue 0 a PRIORITY topic's highest
	// priority, its pops taking the queues from the lowest id up
	// (RocketMQ 5.4's priorityOrderAsc=false). Default: the highest queue
	// id is the highest priority (priorityOrderAsc=true).
	PriorityQueueZeroHighest bool
	// PriorityRetryFirstPercent (0..100) is the share of a PRIORITY
	// topic's pops that hand out the group's messages visible again
	// (retries) before the new ones (RocketMQ 5.4's
	// popFromRetryProbabilityForPriority, taken as its PopConsumerService
	// takes it: every 100/p-th pop, 51 and above every pop; RocketMQ counts
	// the pops of each group and topic, Apogee those of the broker).
	// Default 0: retries after the backlog of new messages.
	PriorityRetryFirstPercent int
	// FS is the file system every file under DataDir goes through: the
	// state files under DataDir/config (read and written), the config
	// directory itself, and the store's files (Store.FS, when that is nil).
	// Default vfs.Default (the operating system); tests wrap it
	// (internal/vfs/errorfs, internal/vfs/crashfs).
	FS vfs.FS
	// WriteConfigFile replaces how the files under DataDir/config are
	// written (a seam for tests that inject failures). Default: through FS,
	// write a temporary file, fsync it, keep the target's current version
	// as TARGET.bak (the fallback at start), rename the temporary file over
	// the target, fsync the directory.
	WriteConfigFile func(path string, data []byte) error
	// TopicChanged, when set, is told the name of every topic created,
	// changed or deleted, after the table changed and outside the core's
	// locks (a front end registers the topic with its name servers; it
	// reads the topic's current state with Core.TopicConfig). It must not
	// block: it runs on the goroutine that changed the topic (a send that
	// auto-created it, a heartbeat, an admin request).
	TopicChanged func(topic string)
	// Logger receives the core's log lines. Default slog.Default().
	Logger *slog.Logger
	// MaxAutoCreateTopics: a send to an unknown topic does not create it
	// once the table holds this many topics (TOPIC_NOT_EXIST; the admin
	// API still creates topics). Default DefaultMaxAutoCreateTopics
	// (10000); negative: no cap.
	MaxAutoCreateTopics int
	// MaxAutoCreateGroups: a heartbeat, pull or pop of an unknown group
	// does not create it once the table holds this many groups. Default
	// DefaultMaxAutoCreateGroups (10000); negative: no cap.
	MaxAutoCreateGroups int
	// MaxAutoCreatePerSource caps the topics and groups that requests from
	// one source address create on demand: that many within an hour (a
	// bucket refilled evenly). Default DefaultMaxAutoCreatePerSource
	// (1000); negative: no cap.
	MaxAutoCreatePerSource int
	// Role is the broker's role in its group (RocketMQ's brokerRole; see
	// replica.go): RoleAsyncMaster (the default); RoleSyncMaster, whose
	// store needs a replica's acknowledgement before a message is durable
	// (Store.SyncReplicas is set to 1 when it is 0); or RoleSlave, whose
	// store opens as a replica (Store.Replica), which refuses writes, runs
	// none of the features and follows its master's tables through the
	// Sync* methods. It is the role at New: SetRole changes it in place
	// (Core.Role reads the current one), and a slave's Store.SyncReplicas
	// applies once it is promoted.
	Role Role
	// BrokerID is the broker's id in its group: 0 for a master (the
	// default; a master with another id is refused), 1 or more for a slave
	// (required).
	BrokerID int64
	// SlaveReadEnable (RocketMQ's slaveReadEnable): a pull answer suggests
	// the group's whichBrokerWhenConsumeSlowly (a slave) to a consumer that
	// reads further behind the commit log's end than the memory window, and
	// its brokerId (the master) otherwise. Default off: every answer
	// suggests the master.
	SlaveReadEnable bool
	// AccessMessageInMemoryMaxRatio is the memory window, in percent of
	// physical RAM (RocketMQ's accessMessageInMemoryMaxRatio): how far
	// behind the commit log's end a message still counts as in memory, for
	// SlaveReadEnable and QueryConsumerOffset's quirk. Fractions are
	// allowed. Default 40.
	AccessMessageInMemoryMaxRatio float64
	// TraceTopic, when set, is in the topic table from the start with one
	// queue (RocketMQ's traceTopicEnable and msgTraceTopicName: the topic
	// the clients' message traces go to, which they cannot auto-create);
	// an existing entry is kept as it is. Default "": none.
	TraceTopic string
	// MasterOnline, on a slave, reports whether its master is reachable
	// (the front end: its replication connection is up): a slave then sends
	// a consumer that is not far behind back to the master. Default nil:
	// never.
	MasterOnline func() bool
}

// withDefaults validates o and fills in the defaults; host is the resolved
// AdvertiseAddr.
func (o Options) withDefaults() (Options, netip.AddrPort, error) {
	o.MaxAutoCreateTopics = capDefault(o.MaxAutoCreateTopics, DefaultMaxAutoCreateTopics)
	o.MaxAutoCreateGroups = capDefault(o.MaxAutoCreateGroups, DefaultMaxAutoCreateGroups)
	o.MaxAutoCreatePerSource = capDefault(o.MaxAutoCreatePerSource, DefaultMaxAutoCreatePerSource)
	if o.DataDir == "" {
		return o, netip.AddrPort{}, errors.New("broker: Options.DataDir is required")
	}
	if o.AdvertiseAddr == "" {
		return o, netip.AddrPort{}, errors.New("broker: Options.AdvertiseAddr is required")
	}
	host, err := resolveAddr(o.AdvertiseAddr)
	if err != nil {
		return o, netip.AddrPort{}, err
	}
	if o.BrokerName == "" {
		o.BrokerName = DefaultBrokerName
	}
	if o.ClusterName == "" {
		o.ClusterName = DefaultClusterName
	}
	if o.DefaultTopicQueues <= 0 {
		o.DefaultTopicQueues = DefaultTopicQueues
	}
	if o.DefaultTopicQueues > MaxQueues {
		return o, host, fmt.Errorf("broker: DefaultTopicQueues %d > %d", o.DefaultTopicQueues, MaxQueues)
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.LongPollMax <= 0 {
		o.LongPollMax = DefaultLongPollMax
	}
	if o.OffsetFlushInterval <= 0 {
		o.OffsetFlushInterval = DefaultOffsetFlushInterval
	}
	if o.ClientTimeout <= 0 {
		o.ClientTimeout = DefaultClientTimeout
	}
	if o.MaxInFlightBytes <= 0 {
		o.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if o.LockExpiry <= 0 {
		o.LockExpiry = DefaultLockExpiry
	}
	if o.DelayLevels == "" {
		o.DelayLevels = DefaultDelayLevels
	}
	if o.PriorityRetryFirstPercent < 0 || o.PriorityRetryFirstPercent > 100 {
		return o, host, fmt.Errorf("broker: PriorityRetryFirstPercent %d is not in 0..100", o.PriorityRetryFirstPercent)
	}
	if _, err := delay.ParseLevels(o.DelayLevels); err != nil {
		return o, host, err
	}
	if o.ProgressFlushInterval <= 0 {
		o.ProgressFlushInterval = DefaultProgressFlushInterval
	}
	if o.TimerMaxDelay <= 0 {
		o.TimerMaxDelay = DefaultTimerMaxDelay
	}
	if o.TimerMaxDelay > timerwheel.MaxDelayLimit {
		return o, host, fmt.Errorf("broker: TimerMaxDelay %v exceeds %v", o.TimerMaxDelay, timerwheel.MaxDelayLimit)
	}
	if o.TimerRollInterval <= 0 {
		o.TimerRollInterval = DefaultTimerRollInterval
		if r := o.Store.RetentionTime; r > 0 && r/3 < o.TimerRollInterval {
			o.TimerRollInterval = max(r/3, time.Minute)
		}
	}
	if o.TransactionTimeout <= 0 {
		o.TransactionTimeout = DefaultTransactionTimeout
	}
	if o.TransactionCheckInterval <= 0 {
		o.TransactionCheckInterval = DefaultTransactionCheckInterval
	}
	if o.TransactionCheckMax <= 0 {
		o.TransactionCheckMax = DefaultTransactionCheckMax
	}
	if o.MaxDelayMessageSize <= 0 {
		o.MaxDelayMessageSize = DefaultMaxDelayMessageSize
	}
	if o.MaxTransactionMessageSize <= 0 {
		o.MaxTransactionMessageSize = DefaultMaxTransactionMessageSize
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Store.FS == nil {
		o.Store.FS = o.FS
	}
	if o.WriteConfigFile == nil {
		fsys := o.FS
		o.WriteConfigFile = func(path string, data []byte) error { return writeStateFile(fsys, path, data) }
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch o.Role {
	case RoleAsyncMaster, RoleSyncMaster:
		if o.BrokerID != 0 {
			return o, host, fmt.Errorf("broker: a master is broker 0, not %d", o.BrokerID)
		}
		if o.Store.Replica {
			return o, host, errors.New("broker: a master's store cannot be a replica (Store.Replica)")
		}
	case RoleSlave:
		if o.BrokerID <= 0 {
			return o, host, fmt.Errorf("broker: a slave's broker id must be 1 or more, not %d", o.BrokerID)
		}
	default:
		return o, host, fmt.Errorf("broker: unknown role %v", o.Role)
	}
	if o.AccessMessageInMemoryMaxRatio == 0 {
		o.AccessMessageInMemoryMaxRatio = 40
	}
	if o.AccessMessageInMemoryMaxRatio < 0 || o.AccessMessageInMemoryMaxRatio > 100 {
		return o, host, fmt.Errorf("broker: AccessMessageInMemoryMaxRatio %v is not a percentage", o.AccessMessageInMemoryMaxRatio)
	}
	return o, host, nil
}

// resolveAddr parses host:port, resolving a host name once.
func resolveAddr(addr string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("broker: advertise address %q: %w", addr, err)
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}
