package client

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/protocol"
)

// Options are typed: an Opt configures anything (producer, push consumer, pull
// consumer), a ConsumerOpt either kind of consumer, and ProducerOpt, PushConsumerOpt
// and PullConsumerOpt only their own kind, so a producer option passed to a consumer
// does not compile. Each client validates its options once, in its constructor
// (NewProducer, NewPushConsumer, NewPullConsumer), and reports every problem there,
// wrapped in ErrConfig.

// ProducerOpt configures a Producer.
type ProducerOpt interface{ applyProducer(*producerConfig) }

// PushConsumerOpt configures a PushConsumer.
type PushConsumerOpt interface{ applyPush(*pushConfig) }

// PullConsumerOpt configures a PullConsumer.
type PullConsumerOpt interface{ applyPull(*pullConfig) }

// ConsumerOpt configures either kind of consumer.
type ConsumerOpt interface {
	PushConsumerOpt
	PullConsumerOpt
}

// Opt configures any client: the connection-level settings they share.
type Opt interface {
	ProducerOpt
	PushConsumerOpt
	PullConsumerOpt
}

// Defaults.
const (
	DefaultRequestTimeout       = 3 * time.Second
	DefaultRouteRefreshInterval = 30 * time.Second
	DefaultFailoverRefreshGap   = 500 * time.Millisecond
	DefaultHeartbeatInterval    = 30 * time.Second
	DefaultProducerGroup        = "DEFAULT_PRODUCER"
	DefaultSendTimeout          = 3 * time.Second
	DefaultReplyTimeout         = 3 * time.Second
	DefaultSendRetries          = 2
	DefaultBusyBackoff          = 50 * time.Millisecond
	DefaultMaxBusyBackoff       = time.Second
	DefaultCompressOver         = 4 << 10
	DefaultZlibLevel            = 5
	DefaultMaxMessageSize       = 4 << 20
	DefaultMaxInflight          = 8192
	DefaultCreateTopicKey       = "TBW102"
	DefaultCreateTopicQueueNums = 4
	DefaultRebalanceInterval    = 20 * time.Second
	DefaultCommitInterval       = 5 * time.Second
	DefaultPullBatchSize        = 32
	DefaultLongPollTimeout      = 20 * time.Second
	DefaultQueueCacheMessages   = 1000
	DefaultQueueCacheBytes      = 100 << 20
	DefaultMaxSpan              = 2000
	DefaultConsumeGoroutines    = 20
	DefaultConsumeBatchSize     = 1
	DefaultConsumeTimeout       = 15 * time.Minute
	DefaultMaxReconsumeTimes    = 16
	DefaultSuspendTime          = time.Second
	DefaultLockInterval         = 20 * time.Second
	DefaultMaxPollRecords       = 256
	DefaultConsumeTimestampBack = 30 * time.Minute
)

// clientConfig is what every client has: the connection-level settings. The fields
// marked (instance) belong to the shared instance and must agree between the clients
// that share it (same client ID).
type clientConfig struct {
	nameServers     []string               // (instance)
	instanceName    string                 // part of the client ID
	clientIP        string                 // part of the client ID
	requestTimeout  time.Duration          // admin/offset/heartbeat requests
	encoding        protocol.SerializeType // (instance)
	dialTimeout     time.Duration          // (instance)
	routeRefresh    time.Duration          // (instance)
	failoverGap     time.Duration          // (instance) min gap between on-failure refreshes of a topic; < 0: off
	heartbeat       time.Duration          // (instance)
	logger          *slog.Logger
	errs            []string
	nameServerGiven bool
	direct          bool             // DirectOnly: no name server needed
	creds           auth.Credentials // (instance) security.go
	tls             *tls.Config      // (instance) security.go
}

func defaultClientConfig() clientConfig {
	return clientConfig{
		requestTimeout: DefaultRequestTimeout,
		encoding:       protocol.SerializeRocketMQ,
		routeRefresh:   DefaultRouteRefreshInterval,
		failoverGap:    DefaultFailoverRefreshGap,
		heartbeat:      DefaultHeartbeatInterval,
		dialTimeout:    15 * time.Second,
	}
}

func (c *clientConfig) errf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// validate fills the defaults that depend on the environment and checks the rest.
func (c *clientConfig) validate() {
	if !c.nameServerGiven {
		if env := os.Getenv("NAMESRV_ADDR"); env != "" {
			c.nameServers = splitAddrs(env)
		}
	}
	if len(c.nameServers) == 0 && !c.direct {
		c.errs = append(c.errs, ErrNoNameServer.Error())
	}
	for _, a := range c.nameServers {
		if _, _, err := net.SplitHostPort(a); err != nil {
			c.errf("name server address %q: %v", a, err)
		}
	}
	if c.instanceName == "" {
		c.instanceName = strconv.Itoa(os.Getpid())
	}
	if c.clientIP == "" {
		c.clientIP = localIP()
	}
	if c.requestTimeout <= 0 {
		c.errf("RequestTimeout must be positive")
	}
	if c.routeRefresh <= 0 || c.heartbeat <= 0 {
		c.errf("RouteRefreshInterval and HeartbeatInterval must be positive")
	}
	if c.encoding != protocol.SerializeJSON && c.encoding != protocol.SerializeRocketMQ {
		c.errf("HeaderEncoding %v is not JSON or ROCKETMQ", c.encoding)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
}

// clientID is "ip@instanceName", the identity brokers know this process by.
func (c *clientConfig) clientID() string { return c.clientIP + "@" + c.instanceName }

// instanceSignature is compared between clients sharing one instance.
func (c *clientConfig) instanceSignature() string {
	return fmt.Sprintf("%s|%d|%v|%v|%v|%v", strings.Join(c.nameServers, ";"), c.encoding, c.dialTimeout, c.routeRefresh, c.heartbeat, c.failoverGap) +
		c.securitySignature()
}

func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
		out = append(out, a)
	}
	return out
}

// localIP returns the first non-loopback IPv4 address of the host, or 127.0.0.1.
func localIP() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() {
				if v4 := ipn.IP.To4(); v4 != nil {
					return v4.String()
				}
			}
		}
	}
	return "127.0.0.1"
}

// opt implements every option interface by applying fn to the shared clientConfig.
type opt struct{ fn func(*clientConfig) }

func (o opt) applyProducer(c *producerConfig) { o.fn(&c.client) }
func (o opt) applyPush(c *pushConfig)         { o.fn(&c.client) }
func (o opt) applyPull(c *pullConfig)         { o.fn(&c.client) }

// NameServer sets the name server addresses. Each argument may itself be a list
// separated by ';' ("10.0.0.1:9876;10.0.0.2:9876"); host names are accepted. Requests
// go to one address at a time, round robin, moving on when one cannot be reached.
// An Apogee broker answers name-server requests on its own address, so a
// single-broker deployment can name the broker here.
//
// Default: the NAMESRV_ADDR environment variable. Required one way or the other.
func NameServer(addrs ...string) Opt {
	return opt{func(c *clientConfig) {
		c.nameServerGiven = true
		c.nameServers = nil
		for _, a := range addrs {
			c.nameServers = append(c.nameServers, splitAddrs(a)...)
		}
	}}
}

// DirectOnly lets a client be created without a name server (NameServer
// or NAMESRV_ADDR): it reaches only the broker addresses its calls are
// given, as mqadmin does with -b (an Admin's ...At methods, AuthRequest,
// BrokerRuntimeInfo, BrokerConfig). Calls that need a name server (routes,
// the cluster table) fail with ErrNoNameServer. NameServer given after it
// gives one back.
func DirectOnly() Opt {
	return opt{func(c *clientConfig) {
		c.nameServerGiven, c.nameServers, c.direct = true, nil, true
	}}
}

// InstanceName sets the second half of the client ID ("ip@instanceName"). Clients of
// one process with the same client ID share one instance: one connection per broker,
// one heartbeat, one route table. Two consumers of the same group need different
// instance names (a broker counts group members by client ID).
//
// Default: the process id, as the Java and Go clients do.
func InstanceName(name string) Opt { return opt{func(c *clientConfig) { c.instanceName = name }} }

// ClientIP sets the first half of the client ID. Default: the host's first
// non-loopback IPv4 address, or 127.0.0.1.
func ClientIP(ip string) Opt { return opt{func(c *clientConfig) { c.clientIP = ip }} }

// RequestTimeout bounds each request that is not a send or a pull: routes,
// heartbeats, offsets, consumer lists, locks, send-back. Default 3 s.
func RequestTimeout(d time.Duration) Opt {
	return opt{func(c *clientConfig) { c.requestTimeout = d }}
}

// HeaderEncoding selects the remoting header encoding of every request the instance
// sends: protocol.SerializeRocketMQ (binary, the default; compact and cheap to encode,
// decoded by Apogee and Java brokers) or protocol.SerializeJSON (what the official Go
// client sends; every broker accepts it). Instance-level.
func HeaderEncoding(t protocol.SerializeType) Opt {
	return opt{func(c *clientConfig) { c.encoding = t }}
}

// DialTimeout bounds a TCP connect to a broker or name server. Default 15 s.
// Instance-level.
func DialTimeout(d time.Duration) Opt { return opt{func(c *clientConfig) { c.dialTimeout = d }} }

// RouteRefreshInterval sets how often the routes of every topic the instance
// publishes to or subscribes are fetched again from the name server. Default 30 s.
// Instance-level.
func RouteRefreshInterval(d time.Duration) Opt {
	return opt{func(c *clientConfig) { c.routeRefresh = d }}
}

// RouteRefreshOnFailure sets the least time between two refreshes of one topic's
// route that failures trigger. A producer whose send fails with a connection error
// or with an answer that says the broker does not take the write now (SYSTEM_ERROR,
// SYSTEM_BUSY, SERVICE_NOT_AVAILABLE, NO_PERMISSION, TOPIC_NOT_EXIST,
// NOT_LEADER_FOR_QUEUE: what a dead, fenced or demoted master, or a slave, answers)
// fetches the topic's route from the name servers before its retry, so that the
// retry goes to the master the route names now; a consumer whose pull fails
// likewise refreshes before its next pull. At most one such refresh of a topic runs
// at a time (concurrent failures wait for it) and at most one starts per gap; the
// sends in between use the route in the table. Default 500 ms; 0 removes the gap
// (still one refresh of a topic at a time); a negative value
// turns refreshing on failure off (routes then change only every
// RouteRefreshInterval, as in the official Go client). Instance-level.
func RouteRefreshOnFailure(gap time.Duration) Opt {
	return opt{func(c *clientConfig) { c.failoverGap = gap }}
}

// HeartbeatInterval sets how often the instance sends HEART_BEAT to every broker it
// knows. Default 30 s (consumers also send one synchronously when they start).
// Instance-level.
func HeartbeatInterval(d time.Duration) Opt {
	return opt{func(c *clientConfig) { c.heartbeat = d }}
}

// Logger sets the logger. Default slog.Default().
func Logger(l *slog.Logger) Opt { return opt{func(c *clientConfig) { c.logger = l }} }

// ---------------------------------------------------------------------------
// Producer options.

type producerConfig struct {
	client         clientConfig
	group          string
	sendTimeout    time.Duration
	retries        int
	busyBackoff    time.Duration
	maxBusyBackoff time.Duration
	selector       QueueSelector
	compressOver   int
	compression    Compression
	level          int
	levelSet       bool
	maxMessageSize int
	maxInflight    int
	faultTolerance bool
	createTopicKey string
	topicQueueNums int
	txListener     TransactionListener
	replyTimeout   time.Duration
}

func defaultProducerConfig() producerConfig {
	return producerConfig{
		client:         defaultClientConfig(),
		group:          DefaultProducerGroup,
		sendTimeout:    DefaultSendTimeout,
		retries:        DefaultSendRetries,
		busyBackoff:    DefaultBusyBackoff,
		maxBusyBackoff: DefaultMaxBusyBackoff,
		compressOver:   DefaultCompressOver,
		compression:    CompressionZlib,
		maxMessageSize: DefaultMaxMessageSize,
		maxInflight:    DefaultMaxInflight,
		faultTolerance: true,
		createTopicKey: DefaultCreateTopicKey,
		topicQueueNums: DefaultCreateTopicQueueNums,
		replyTimeout:   DefaultReplyTimeout,
	}
}

func (c *producerConfig) validate() error {
	c.client.validate()
	if c.group == "" || len(c.group) > 255 {
		c.client.errf("ProducerGroup must be 1..255 bytes")
	}
	if c.sendTimeout <= 0 {
		c.client.errf("SendTimeout must be positive")
	}
	if c.replyTimeout <= 0 {
		c.client.errf("ReplyTimeout must be positive")
	}
	if c.retries < 0 {
		c.client.errf("SendRetries must not be negative")
	}
	if c.busyBackoff <= 0 || c.maxBusyBackoff < c.busyBackoff {
		c.client.errf("SystemBusyBackoff: need 0 < base <= max")
	}
	if c.selector == nil {
		c.selector = RoundRobinSelector()
	}
	switch c.compression {
	case CompressionZlib:
		if !c.levelSet {
			c.level = DefaultZlibLevel
		}
		if c.level < -2 || c.level > 9 {
			c.client.errf("CompressionLevel %d out of zlib's range -2..9", c.level)
		}
	case CompressionZstd:
		if !c.levelSet {
			c.level = 3
		}
		if c.level < 1 || c.level > 22 {
			c.client.errf("CompressionLevel %d out of zstd's range 1..22", c.level)
		}
	default:
		c.client.errf("unknown Compression %d", c.compression)
	}
	if c.maxMessageSize <= 0 {
		c.client.errf("MaxMessageSize must be positive")
	}
	if c.maxInflight <= 0 {
		c.client.errf("MaxInflight must be positive")
	}
	if c.createTopicKey == "" {
		c.client.errf("CreateTopicKey must not be empty")
	}
	if c.topicQueueNums <= 0 {
		c.client.errf("DefaultTopicQueueNums must be positive")
	}
	return c.client.err()
}

func (c *clientConfig) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrConfig, strings.Join(c.errs, "; "))
}

type producerOpt struct{ fn func(*producerConfig) }

func (o producerOpt) applyProducer(c *producerConfig) { o.fn(c) }

// ProducerGroup names the producer group: brokers route transaction checks to it, and
// it is listed in heartbeats. Default "DEFAULT_PRODUCER"; a transactional producer
// should have its own.
func ProducerGroup(g string) ProducerOpt { return producerOpt{func(c *producerConfig) { c.group = g }} }

// SendTimeout bounds a send from the call to the acknowledgement, retries included.
// Default 3 s.
func SendTimeout(d time.Duration) ProducerOpt {
	return producerOpt{func(c *producerConfig) { c.sendTimeout = d }}
}

// ReplyTimeout bounds Producer.Request's wait for the reply (the send included) when
// its context has no deadline. Default 3 s.
func ReplyTimeout(d time.Duration) ProducerOpt {
	return producerOpt{func(c *producerConfig) { c.replyTimeout = d }}
}

// SendRetries sets how many times a failed send is tried again, on another queue and,
// when there is one, another broker (custom selectors are asked again). Retried:
// transport errors and the codes SYSTEM_ERROR (1), SERVICE_NOT_AVAILABLE (14),
// NO_PERMISSION (16) and TOPIC_NOT_EXIST (17), like the official Go client, and
// SYSTEM_BUSY (2) after an exponential back-off (SystemBusyBackoff). Default 2
// (three attempts in all). Oneway sends are never retried.
func SendRetries(n int) ProducerOpt { return producerOpt{func(c *producerConfig) { c.retries = n }} }

// SystemBusyBackoff sets the pause before retrying a send the broker refused with
// SYSTEM_BUSY: base, doubled for each further busy answer, capped at max (and always
// within the send timeout). Default 50 ms, 1 s.
func SystemBusyBackoff(base, max time.Duration) ProducerOpt {
	return producerOpt{func(c *producerConfig) { c.busyBackoff, c.maxBusyBackoff = base, max }}
}

// Selector sets how a queue is chosen for each message. Default RoundRobinSelector(),
// the only selector that also avoids slow and failing brokers (FaultTolerance).
func Selector(s QueueSelector) ProducerOpt {
	return producerOpt{func(c *producerConfig) { c.selector = s }}
}

// CompressOver compresses a single message's body when it is at least n bytes
// (batches are never compressed, as with the other clients). Default 4096; a negative
// n disables compression.
func CompressOver(n int) ProducerOpt {
	return producerOpt{func(c *producerConfig) { c.compressOver = n }}
}

// WithCompression selects the codec: CompressionZlib (default; sysflag bit 0 only,
// which every RocketMQ consumer inflates) or CompressionZstd (RocketMQ 5's
// compression-type bits 0x200 as well; only RocketMQ 5 consumers and this client
// read it). LZ4 is not offered: github.com/klauspost/compress has no LZ4 codec.
func WithCompression(c Compression) ProducerOpt {
	return producerOpt{func(pc *producerConfig) { pc.compression = c }}
}

// CompressionLevel sets the codec's level. Default 5 for zlib (as the Java and Go
// clients), 3 for zstd.
func CompressionLevel(level int) ProducerOpt {
	return producerOpt{func(c *producerConfig) { c.level, c.levelSet = level, true }}
}

// MaxMessageSize is the largest body (after compression) a single send accepts, and
// the size a batch is split under. Default 4 MiB, the broker's default limit.
func MaxMessageSize(n int) ProducerOpt {
	return producerOpt{func(c *producerConfig) { c.maxMessageSize = n }}
}

// MaxInflight caps the sends (async, sync and batch) awaiting their acknowledgement;
// SendAsync blocks (until its context ends) while the cap is reached. Default 8192.
func MaxInflight(n int) ProducerOpt {
	return producerOpt{func(c *producerConfig) { c.maxInflight = n }}
}

// FaultTolerance turns the latency-based avoidance of slow or failing brokers on or
// off (RocketMQ's MQFaultStrategy, simplified): a broker whose send took long, or
// failed, is skipped by RoundRobinSelector for a while, longer the slower it was.
// Default on.
func FaultTolerance(on bool) ProducerOpt {
	return producerOpt{func(c *producerConfig) { c.faultTolerance = on }}
}

// CreateTopicKey names the topic whose route is used to send to a topic the name
// server does not know yet, so that the broker auto-creates it. Default "TBW102".
func CreateTopicKey(topic string) ProducerOpt {
	return producerOpt{func(c *producerConfig) { c.createTopicKey = topic }}
}

// DefaultTopicQueueNums caps the queues used for, and asked of, an auto-created
// topic. Default 4.
func DefaultTopicQueueNums(n int) ProducerOpt {
	return producerOpt{func(c *producerConfig) { c.topicQueueNums = n }}
}

// WithTransactionListener makes the producer transactional: SendInTransaction runs
// the listener's local transaction, and the broker's CHECK_TRANSACTION_STATE requests
// for this producer group are answered by its CheckLocalTransaction. Default none.
func WithTransactionListener(l TransactionListener) ProducerOpt {
	return producerOpt{func(c *producerConfig) { c.txListener = l }}
}

// ---------------------------------------------------------------------------
// Consumer options (push and pull).

type subscription struct {
	topic   string
	expr    string // "*", "a || b", or SQL92
	sql     bool
	tags    []string // parsed tag set; nil means all
	codes   []int32
	version int64
	isRetry bool
}

type consumerConfig struct {
	client            clientConfig
	group             string
	subs              []subscription
	model             MessageModel
	from              ConsumeFrom
	fromTime          time.Time
	strategy          AllocateStrategy
	rebalanceInterval time.Duration
	commitInterval    time.Duration
	pullBatch         int
	longPoll          time.Duration
	cacheMsgs         int
	cacheBytes        int64
	offsetDir         string
	// offsetFS is the file system of the offset files under offsetDir.
	// Default vfs.Default; tests wrap it (no public option: the seam is
	// internal).
	offsetFS     vfs.FS
	maxReconsume int
}

func defaultConsumerConfig() consumerConfig {
	return consumerConfig{
		client:            defaultClientConfig(),
		model:             Clustering,
		from:              ConsumeFromLastOffset,
		strategy:          AllocateAveragely(),
		rebalanceInterval: DefaultRebalanceInterval,
		commitInterval:    DefaultCommitInterval,
		pullBatch:         DefaultPullBatchSize,
		longPoll:          DefaultLongPollTimeout,
		cacheMsgs:         DefaultQueueCacheMessages,
		cacheBytes:        DefaultQueueCacheBytes,
		maxReconsume:      DefaultMaxReconsumeTimes,
		offsetFS:          vfs.Default,
	}
}

func (c *consumerConfig) validate(needSubs bool) {
	c.client.validate()
	if c.group == "" || len(c.group) > 255 {
		c.client.errf("ConsumerGroup is required (1..255 bytes)")
	}
	if needSubs && len(c.subs) == 0 {
		c.client.errf("at least one Subscribe is required")
	}
	seen := map[string]bool{}
	for _, s := range c.subs {
		if seen[s.topic] {
			c.client.errf("topic %q subscribed twice", s.topic)
		}
		seen[s.topic] = true
		if s.topic == "" {
			c.client.errf("Subscribe with an empty topic")
		}
	}
	if c.model != Clustering && c.model != Broadcasting {
		c.client.errf("unknown MessageModel %d", c.model)
	}
	if c.from == ConsumeFromTimestamp && c.fromTime.IsZero() {
		c.fromTime = time.Now().Add(-DefaultConsumeTimestampBack)
	}
	if c.strategy == nil {
		c.client.errf("Allocation strategy must not be nil")
	}
	if c.rebalanceInterval <= 0 || c.commitInterval <= 0 {
		c.client.errf("RebalanceInterval and CommitInterval must be positive")
	}
	if c.pullBatch <= 0 || c.pullBatch > 1024 {
		c.client.errf("PullBatchSize must be 1..1024")
	}
	if c.longPoll <= 0 {
		c.client.errf("LongPollTimeout must be positive")
	}
	if c.cacheMsgs <= 0 || c.cacheBytes <= 0 {
		c.client.errf("QueueCacheLimits must be positive")
	}
	if c.maxReconsume < 0 {
		c.client.errf("MaxReconsumeTimes must not be negative")
	}
	if c.offsetDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		c.offsetDir = filepath.Join(home, ".rocketmq_offsets")
	}
}

type consumerOpt struct{ fn func(*consumerConfig) }

func (o consumerOpt) applyPush(c *pushConfig) { o.fn(&c.consumerConfig) }
func (o consumerOpt) applyPull(c *pullConfig) { o.fn(&c.consumerConfig) }

// ConsumerGroup names the consumer group. Required.
func ConsumerGroup(g string) ConsumerOpt { return consumerOpt{func(c *consumerConfig) { c.group = g }} }

// Subscribe subscribes a topic with a tag expression: "*" (or "") for every message,
// or tags separated by "||" ("a || b"). The broker filters by tag hash; the client
// checks the exact tag again. A push consumer needs at least one subscription; a pull
// consumer either subscribes (and is given queues by rebalancing) or assigns queues.
func Subscribe(topic, tagExpr string) ConsumerOpt {
	return consumerOpt{func(c *consumerConfig) { c.subs = append(c.subs, newTagSubscription(topic, tagExpr)) }}
}

// SubscribeSQL subscribes a topic with an SQL92 expression over message properties,
// evaluated by the broker (which must support it).
func SubscribeSQL(topic, expr string) ConsumerOpt {
	return consumerOpt{func(c *consumerConfig) {
		c.subs = append(c.subs, subscription{topic: topic, expr: expr, sql: true, version: time.Now().UnixNano()})
	}}
}

// WithMessageModel selects Clustering (default: the group shares the queues, offsets
// are kept by the broker) or Broadcasting (every consumer gets every message, offsets
// are kept in a local file per client).
func WithMessageModel(m MessageModel) ConsumerOpt {
	return consumerOpt{func(c *consumerConfig) { c.model = m }}
}

// WithConsumeFrom sets where a group with no stored offset for a queue starts:
// ConsumeFromLastOffset (default: only new messages; retry topics from their start),
// ConsumeFromFirstOffset, or ConsumeFromTimestamp (see ConsumeTimestamp).
func WithConsumeFrom(f ConsumeFrom) ConsumerOpt {
	return consumerOpt{func(c *consumerConfig) { c.from = f }}
}

// ConsumeTimestamp sets the time ConsumeFromTimestamp starts from (and selects
// ConsumeFromTimestamp). Default: 30 minutes before the consumer was created.
func ConsumeTimestamp(t time.Time) ConsumerOpt {
	return consumerOpt{func(c *consumerConfig) { c.from, c.fromTime = ConsumeFromTimestamp, t }}
}

// Allocation sets the strategy that divides a topic's queues among the group's
// consumers. Default AllocateAveragely(). Every consumer of a group must use the same.
func Allocation(s AllocateStrategy) ConsumerOpt {
	return consumerOpt{func(c *consumerConfig) { c.strategy = s }}
}

// RebalanceInterval sets how often queues are re-divided; the consumer also
// rebalances at once when the broker announces a membership change
// (NOTIFY_CONSUMER_IDS_CHANGED). Default 20 s.
func RebalanceInterval(d time.Duration) ConsumerOpt {
	return consumerOpt{func(c *consumerConfig) { c.rebalanceInterval = d }}
}

// CommitInterval sets how often consumed offsets are written: to the broker in
// clustering, to the local offset file in broadcasting. Offsets are also written at
// shutdown and, synchronously, for each queue a rebalance takes away. Default 5 s.
func CommitInterval(d time.Duration) ConsumerOpt {
	return consumerOpt{func(c *consumerConfig) { c.commitInterval = d }}
}

// PullBatchSize sets the maximum messages per pull request. Default 32.
func PullBatchSize(n int) ConsumerOpt {
	return consumerOpt{func(c *consumerConfig) { c.pullBatch = n }}
}

// LongPollTimeout sets how long the broker may hold a pull that finds nothing
// (suspendTimeoutMillis); the request's own timeout is this plus 10 s. Default 20 s.
func LongPollTimeout(d time.Duration) ConsumerOpt {
	return consumerOpt{func(c *consumerConfig) { c.longPoll = d }}
}

// QueueCacheLimits sets the flow control of each queue: pulling pauses (it does not
// fail) while a queue holds more than msgs messages or bytes bytes of body pulled but
// not yet consumed. Default 1,000 messages, 100 MiB.
func QueueCacheLimits(msgs int, bytes int64) ConsumerOpt {
	return consumerOpt{func(c *consumerConfig) { c.cacheMsgs, c.cacheBytes = msgs, bytes }}
}

// OffsetDir sets the directory of broadcasting consumers' offset files
// (<dir>/<clientID>/<group>/offsets.json). Default ~/.rocketmq_offsets.
func OffsetDir(dir string) ConsumerOpt {
	return consumerOpt{func(c *consumerConfig) { c.offsetDir = dir }}
}

// MaxReconsumeTimes sets how many times a message is redelivered before it goes to
// the group's dead-letter queue (%DLQ%group). Concurrent consumers pass it to the
// broker with each send-back; orderly consumers retry locally this many times. Default 16.
func MaxReconsumeTimes(n int) ConsumerOpt {
	return consumerOpt{func(c *consumerConfig) { c.maxReconsume = n }}
}

// ---------------------------------------------------------------------------
// Push consumer options.

type pushConfig struct {
	consumerConfig
	concurrent     ConcurrentListener
	orderly        OrderlyListener
	goroutines     int
	batch          int
	consumeTimeout time.Duration
	maxSpan        int64
	pullInterval   time.Duration
	suspendTime    time.Duration
	lockInterval   time.Duration
}

func defaultPushConfig() pushConfig {
	return pushConfig{
		consumerConfig: defaultConsumerConfig(),
		goroutines:     DefaultConsumeGoroutines,
		batch:          DefaultConsumeBatchSize,
		consumeTimeout: DefaultConsumeTimeout,
		maxSpan:        DefaultMaxSpan,
		suspendTime:    DefaultSuspendTime,
		lockInterval:   DefaultLockInterval,
	}
}

func (c *pushConfig) validate() error {
	c.consumerConfig.validate(true)
	if (c.concurrent == nil) == (c.orderly == nil) {
		c.client.errf("exactly one of ConcurrentListener and OrderlyListener is required")
	}
	if c.orderly != nil && c.model == Broadcasting {
		c.client.errf("orderly consumption needs Clustering (queue locks are per group)")
	}
	if c.goroutines <= 0 {
		c.client.errf("ConsumeGoroutines must be positive")
	}
	if c.batch <= 0 || c.batch > 1024 {
		c.client.errf("ConsumeBatchSize must be 1..1024")
	}
	if c.consumeTimeout <= 0 || c.suspendTime <= 0 || c.lockInterval <= 0 {
		c.client.errf("ConsumeTimeout, SuspendTime and LockInterval must be positive")
	}
	if c.maxSpan <= 0 {
		c.client.errf("MaxSpan must be positive")
	}
	if c.pullInterval < 0 {
		c.client.errf("PullInterval must not be negative")
	}
	return c.client.err()
}

type pushOpt struct{ fn func(*pushConfig) }

func (o pushOpt) applyPush(c *pushConfig) { o.fn(c) }

// WithConcurrentListener consumes with fn on a bounded pool of goroutines
// (ConsumeGoroutines), ConsumeBatchSize messages at a time, in no particular order.
func WithConcurrentListener(fn ConcurrentListener) PushConsumerOpt {
	return pushOpt{func(c *pushConfig) { c.concurrent = fn }}
}

// WithOrderlyListener consumes each queue in queue order on one goroutine per queue,
// holding the queue's broker lock (LOCK_BATCH_MQ) while it does. Clustering only.
func WithOrderlyListener(fn OrderlyListener) PushConsumerOpt {
	return pushOpt{func(c *pushConfig) { c.orderly = fn }}
}

// ConsumeGoroutines bounds the goroutines running a concurrent listener. Default 20.
func ConsumeGoroutines(n int) PushConsumerOpt {
	return pushOpt{func(c *pushConfig) { c.goroutines = n }}
}

// ConsumeBatchSize sets the most messages passed to one listener call. Default 1.
func ConsumeBatchSize(n int) PushConsumerOpt { return pushOpt{func(c *pushConfig) { c.batch = n }} }

// ConsumeTimeout bounds one listener call: its context ends then, and a concurrent
// batch still running at that point counts as failed (sent back for redelivery) when
// it returns. Default 15 min.
func ConsumeTimeout(d time.Duration) PushConsumerOpt {
	return pushOpt{func(c *pushConfig) { c.consumeTimeout = d }}
}

// MaxSpan pauses pulling a queue (concurrent consumption) while the offsets of its
// cached messages span more than n: one slow message then cannot hold back an
// unbounded amount of committed progress. Default 2000.
func MaxSpan(n int) PushConsumerOpt { return pushOpt{func(c *pushConfig) { c.maxSpan = int64(n) }} }

// PullInterval pauses between two pulls of one queue. Default 0.
func PullInterval(d time.Duration) PushConsumerOpt {
	return pushOpt{func(c *pushConfig) { c.pullInterval = d }}
}

// SuspendTime sets how long an orderly queue waits before a failed batch is consumed
// again. Default 1 s.
func SuspendTime(d time.Duration) PushConsumerOpt {
	return pushOpt{func(c *pushConfig) { c.suspendTime = d }}
}

// LockInterval sets how often an orderly consumer renews its queue locks (a lock is
// considered lost 30 s after its last renewal, and brokers expire it after 60 s).
// Default 20 s.
func LockInterval(d time.Duration) PushConsumerOpt {
	return pushOpt{func(c *pushConfig) { c.lockInterval = d }}
}

// ---------------------------------------------------------------------------
// Pull consumer options.

type pullConfig struct {
	consumerConfig
	autoCommit     bool
	maxPollRecords int
}

func defaultPullConfig() pullConfig {
	return pullConfig{consumerConfig: defaultConsumerConfig(), autoCommit: true, maxPollRecords: DefaultMaxPollRecords}
}

func (c *pullConfig) validate() error {
	c.consumerConfig.validate(false)
	if c.maxPollRecords <= 0 {
		c.client.errf("MaxPollRecords must be positive")
	}
	return c.client.err()
}

type pullOpt struct{ fn func(*pullConfig) }

func (o pullOpt) applyPull(c *pullConfig) { o.fn(c) }

// AutoCommit makes Poll mark everything returned by the previous Poll consumed, and
// the consumer write those offsets every CommitInterval. Off, offsets move only with
// Commit / CommitSync. Default on.
func AutoCommit(on bool) PullConsumerOpt { return pullOpt{func(c *pullConfig) { c.autoCommit = on }} }

// MaxPollRecords caps the messages one Poll returns. Default 256.
func MaxPollRecords(n int) PullConsumerOpt {
	return pullOpt{func(c *pullConfig) { c.maxPollRecords = n }}
}
