package scenario

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// Msg is a message a scenario sends.
type Msg struct {
	Topic string
	Body  string
	Tag   string
	Keys  []string
	// Props are user properties.
	Props map[string]string
	// DelayLevel > 0 delays the message by a delay level (remoting's DELAY
	// property).
	DelayLevel int32
	// DeliverAt, when set, is the message's delivery time (a timer).
	DeliverAt time.Time
	// Group is the message group (FIFO): the queue is chosen by its hash,
	// and an orderly consumer gets one message of a group at a time.
	Group string
	// Priority, when set, is the message's priority (RocketMQ 5.4,
	// RIP-80): remoting's _SYS_MSG_PRIORITY_ property, gRPC's priority.
	Priority *int32
}

// Sent is what a send stored.
type Sent struct {
	ID     string // the message id (UNIQ_KEY)
	Queue  int32
	Offset int64
	tx     txRef // a half message's handle for endTx
}

// txRef names a half message for ending its transaction.
type txRef struct {
	id                string // UNIQ_KEY
	commitLog, offset int64  // the half's commit-log and queue offsets
	grpcID            string // the gRPC front end's transaction id
}

// resolution is a producer's outcome of a transaction.
type resolution uint8

const (
	commit   resolution = iota
	rollback            // the half message is dropped
	unknown             // nothing changes: the broker checks again
)

// Check is a transaction check the broker pushed to the producer.
type Check struct {
	ID   string
	Body string
	tx   txRef
}

// Got is a message delivered by a pull or a pop.
type Got struct {
	ID    string
	Topic string
	Body  string
	Tag   string
	Keys  []string
	// Props holds at least the user properties (the core and remoting
	// drivers give every property of the record).
	Props map[string]string
	Group string // message group ("" when none)
	Queue int32
	// Offset is the queue offset of the delivered record.
	Offset int64
	// Reconsume is how often the message was delivered before (the record's
	// reconsumeTimes; gRPC's delivery_attempt - 1).
	Reconsume int32
	// StoreTime is the record's store timestamp (ms precision).
	StoreTime time.Time
	// RetryTopic is the RETRY_TOPIC property (the original topic of a
	// retried or dead-lettered message), "" when none.
	RetryTopic string

	commitLog int64  // the record's commit-log offset
	popTime   int64  // a popped message's delivery (the core driver)
	handle    string // a popped message's receipt handle (front ends)
}

// Filter is a subscription: Type "TAG" or "SQL92" and an expression.
// The zero value takes every message.
type Filter struct {
	Type, Expr string
	// registered, when not 0, makes a pull name no filter of its own: the
	// subscription the group registered (subscribe) applies, at least of
	// this version.
	registered int64
}

// registeredFilter is the filter of a pull by the group's registered
// subscription of version v.
func registeredFilter(v int64) Filter { return Filter{registered: v} }

func tagFilter(expr string) Filter { return Filter{Type: "TAG", Expr: expr} }
func sqlFilter(expr string) Filter { return Filter{Type: "SQL92", Expr: expr} }

func (f Filter) typ() string {
	if f.Type == "" {
		return "TAG"
	}
	return f.Type
}

func (f Filter) expr() string {
	if f.Expr == "" {
		return "*"
	}
	return f.Expr
}

// Pulled is a pull's answer.
type Pulled struct {
	Msgs []Got
	// Next is where the next pull reads.
	Next int64
}

// groupConfig is a consumer group's configuration.
type groupConfig struct {
	retryMax int32 // the group's retryMaxTimes (< 0: the default)
	orderly  bool  // consumeMessageOrderly: POP/receive is FIFO
}

// op names the operations a driver may lack.
type op string

const (
	opDelayLevel op = "delay level"
	opSendBack   op = "send-back"
	opHold       op = "long polling"
	opSubscribe  op = "pull by a registered subscription"
)

// driver is what a scenario needs of a broker. Every method fails the test
// on an error it does not return (a transport error, a refusal of a request
// the scenario expects to succeed).
//
// Each driver also has a method lacks(op) string, which says why its
// protocol has no such operation ("" when it has it); it reads no field, so
// the table asks it before the driver starts.
type driver interface {
	// createTopic creates a topic with queues read and write queues and,
	// when typ is not "", the message.type attribute (NORMAL, FIFO, DELAY,
	// TRANSACTION).
	createTopic(t *testing.T, topic string, queues int32, typ string)
	createGroup(t *testing.T, group string, cfg groupConfig)
	// send sends m; the error is the broker's refusal.
	send(t *testing.T, m Msg) (Sent, error)
	// sendHalf sends m as a transactional half message, its producer group
	// being its topic (RocketMQ 5's rule: its clients have no producer
	// group; the drivers of the other protocols follow it).
	sendHalf(t *testing.T, m Msg) Sent
	// endTx commits or rolls back a transaction, or leaves it open
	// (unknown), from a check or not.
	endTx(t *testing.T, topic string, tx txRef, res resolution, fromCheck bool)
	// watchChecks registers a producer of topic's transactions and returns
	// the checks the broker pushes to it.
	watchChecks(t *testing.T, topic string) <-chan Check
	// pull reads queue q of topic from offset for group with filter f,
	// without holding: no message is an empty answer; the error is the
	// broker's refusal (*refusal).
	pull(t *testing.T, group, topic string, q int32, offset int64, f Filter) (Pulled, error)
	// pop hands out up to max messages of every queue of topic, each
	// invisible for invisible, without holding. A group created orderly pops
	// orderly. The error is the broker's refusal (*refusal).
	pop(t *testing.T, group, topic string, max int32, invisible time.Duration, f Filter) ([]Got, error)
	// pullHeld and popHeld are pull and pop held up to hold (long polling)
	// while they find nothing.
	pullHeld(t *testing.T, group, topic string, q int32, offset int64, f Filter, hold time.Duration) (Pulled, error)
	popHeld(t *testing.T, group, topic string, max int32, invisible time.Duration, f Filter, hold time.Duration) ([]Got, error)
	// subscribe registers a consumer of group subscribing to topic with f
	// (a heartbeat) and returns the subscription's version.
	subscribe(t *testing.T, group, topic string, f Filter) int64
	// ack acknowledges a popped message; false when the broker refused the
	// receipt (stale, or not in flight).
	ack(t *testing.T, group string, g Got) bool
	// changeInvisible makes a popped message invisible for d from now and
	// returns it with its new receipt; false when the receipt was refused.
	changeInvisible(t *testing.T, group string, g Got, d time.Duration) (Got, bool)
	commitOffset(t *testing.T, group, topic string, q int32, offset int64)
	// queryOffset returns the group's offset of a queue; false when the
	// broker has none for it.
	queryOffset(t *testing.T, group, topic string, q int32) (int64, bool)
	// sendBack reports a pulled message as failed (CONSUMER_SEND_MSG_BACK):
	// it is retried through %RETRY%<group> after delayLevel (0: the
	// broker's choice), or dead-lettered past the group's retry maximum.
	sendBack(t *testing.T, group string, g Got, delayLevel int32)
	// forwardDLQ gives up on a popped message: a copy goes to the group's
	// %DLQ% topic and the delivery is acked. False when the receipt was
	// refused.
	forwardDLQ(t *testing.T, group string, g Got) bool
	// readDLQ returns what the group's dead-letter queue (%DLQ%<group>,
	// one queue) holds: nothing while the topic does not exist (it is
	// created with the first dead letter).
	readDLQ(t *testing.T, group string) []Got
}

// The suite's timings: delay levels of 25 ms steps, transactions checked
// 200 ms after their half message and every 300 ms after.
var fastLevels = func() string {
	var b strings.Builder
	for i := 1; i <= 18; i++ {
		if i > 1 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(25*i) + "ms")
	}
	return b.String()
}()

const (
	levelStep                = 25 * time.Millisecond
	progressFlushInterval    = 20 * time.Millisecond
	transactionTimeout       = 200 * time.Millisecond
	transactionCheckInterval = 300 * time.Millisecond
	// callTimeout bounds a call the suite expects an answer to: it only ends
	// a test that would hang.
	callTimeout = time.Minute
)

// coreOptions are the core's options every driver uses: a small store in
// t's temporary directory, the fast timings above.
func coreOptions(t testing.TB) core.Options {
	return core.Options{
		DataDir: t.TempDir(), AdvertiseAddr: "127.0.0.1:10911", Logger: testlog.New(t, "core"),
		Store: store.Options{SegmentSize: 8 << 20, ConsumeQueueEntries: 4096, IndexSlots: 1024,
			IndexMaxEntries: 8192, CleanInterval: -1},
		MaxMessageSize:           1 << 20,
		DelayLevels:              fastLevels,
		ProgressFlushInterval:    progressFlushInterval,
		TransactionTimeout:       transactionTimeout,
		TransactionCheckInterval: transactionCheckInterval,
	}
}

// idSeq makes message ids unique within the process.
var idSeq atomic.Int64

// newID is a message id as clients make them (unique, hexadecimal).
func newID() string {
	return fmt.Sprintf("%016X%08X", time.Now().UnixNano(), idSeq.Add(1))
}

// msgProps are a remoting message's properties for m (a client's work):
// UNIQ_KEY, TAGS, KEYS, the user properties, DELAY, TIMER_DELIVER_MS and
// __SHARDINGKEY.
func msgProps(m Msg, id string) []byte {
	var p []byte
	for k, v := range m.Props {
		p = message.AppendProperty(p, k, v)
	}
	p = message.AppendProperty(p, message.PropUniqKey, id)
	if m.Tag != "" {
		p = message.AppendProperty(p, message.PropTags, m.Tag)
	}
	if len(m.Keys) > 0 {
		p = message.AppendProperty(p, message.PropKeys, strings.Join(m.Keys, message.PropKeysSeparator))
	}
	if m.DelayLevel > 0 {
		p = message.AppendProperty(p, message.PropDelay, strconv.Itoa(int(m.DelayLevel)))
	}
	if !m.DeliverAt.IsZero() {
		p = message.AppendProperty(p, message.PropTimerDeliverMS, strconv.FormatInt(m.DeliverAt.UnixMilli(), 10))
	}
	if m.Group != "" {
		p = message.AppendProperty(p, message.PropJavaShardingKey, m.Group)
	}
	if m.Priority != nil {
		p = message.AppendProperty(p, message.PropPriority, strconv.Itoa(int(*m.Priority)))
	}
	return p
}

// subVersion makes subscription versions that grow.
var subVersion atomic.Int64

func init() { subVersion.Store(time.Now().UnixMilli()) }

// consumerHeartbeat is a consumer's heartbeat subscribing group to topic
// with f (and to the group's retry topic), as a 4.x push consumer sends it.
func consumerHeartbeat(clientID, group, topic string, f Filter) (protocol.HeartbeatData, int64) {
	v := subVersion.Add(1)
	return protocol.HeartbeatData{ClientID: clientID, ConsumerDataSet: []protocol.ConsumerData{{
		GroupName: group, ConsumeType: "CONSUME_PASSIVELY", MessageModel: "CLUSTERING", ConsumeFromWhere: "CONSUME_FROM_FIRST_OFFSET",
		SubscriptionDataSet: []protocol.SubscriptionData{
			{Topic: topic, SubString: f.expr(), ExpressionType: f.typ(), SubVersion: v},
			{Topic: "%RETRY%" + group, SubString: "*", ExpressionType: "TAG", SubVersion: v},
		},
	}}}, v
}

// groupQueue is the queue a message group goes to among n write queues:
// the Java hash of the group modulo n, as the gRPC front end and RocketMQ's
// clients choose.
func groupQueue(group string, n int32) int32 {
	h := message.JavaHashCodeBytes([]byte(group))
	if h < 0 {
		h = -h
		if h < 0 {
			h = 0
		}
	}
	return h % n
}

// gotOf copies a stored record into a Got.
func gotOf(rec []byte) (Got, error) {
	v, err := message.Decode(rec, false)
	if err != nil {
		return Got{}, err
	}
	g := Got{Topic: string(v.Topic()), Body: string(v.Body()), Queue: v.QueueID(), Offset: v.QueueOffset(),
		Reconsume: v.ReconsumeTimes(), StoreTime: time.UnixMilli(v.StoreTimestamp()), commitLog: v.PhysicalOffset(),
		Props: map[string]string{}}
	message.ForEachProperty(v.Properties(), func(k, val []byte) bool {
		g.Props[string(k)] = string(val)
		return true
	})
	g.ID = g.Props[message.PropUniqKey]
	g.Tag = g.Props[message.PropTags]
	if k := g.Props[message.PropKeys]; k != "" {
		g.Keys = strings.Fields(k)
	}
	g.Group = g.Props[message.PropJavaShardingKey]
	g.RetryTopic = g.Props[message.PropRetryTopic]
	return g, nil
}

// errRefused is what every refusal a driver returns wraps.
var errRefused = errors.New("refused")

// refusal is a broker's refusal of a request, in the driver's protocol's
// terms: the core's reason, the remoting response code, or the gRPC
// status code (the one its driver sets).
type refusal struct {
	reason   core.Reason // the core driver's
	remoting int32       // the remoting driver's (not 0)
	grpc     string      // the gRPC driver's status code (rmqpb.Code's name)
	msg      string
	// noTopic: the request named a topic that does not exist.
	noTopic bool
}

func (r *refusal) Error() string {
	switch {
	case r.grpc != "":
		return "refused: " + r.grpc + ": " + r.msg
	case r.remoting != 0:
		return "refused: code " + strconv.Itoa(int(r.remoting)) + ": " + r.msg
	}
	return "refused: " + r.reason.String() + ": " + r.msg
}

// is reports whether the refusal is the answer of its protocol to a
// refusal for reason want: the reason itself (core), its remoting code
// (remoting), its gRPC status code (gRPC; both codes from errors.json, the
// core's table of reasons).
func (r *refusal) is(t *testing.T, want core.Reason) bool {
	t.Helper()
	switch {
	case r.grpc != "":
		return r.grpc == grpcCodeOf(t, want)
	case r.remoting != 0:
		return r.remoting == want.Code()
	}
	return r.reason == want
}

// refusedFor reports whether err is a refusal for reason want, in its
// driver's protocol.
func refusedFor(t *testing.T, err error, want core.Reason) bool {
	t.Helper()
	var r *refusal
	return errors.As(err, &r) && r.is(t, want)
}

// reasonTable is errors.json (broker/core's table of reasons): each
// reason's gRPC status code, by the reason's name.
var reasonTable = sync.OnceValues(func() (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join("..", "core", "errors.json"))
	if err != nil {
		return nil, err
	}
	var rows []struct {
		Constant string `json:"constant"`
		GRPC     string `json:"grpc"`
	}
	if err := json.Unmarshal(b, &rows); err != nil {
		return nil, err
	}
	m := make(map[string]string, len(rows))
	for _, r := range rows {
		m[strings.TrimPrefix(r.Constant, "Reason")] = r.GRPC
	}
	return m, nil
})

// grpcCodeOf is the gRPC status code errors.json gives a reason.
func grpcCodeOf(t *testing.T, r core.Reason) string {
	t.Helper()
	m, err := reasonTable()
	if err != nil {
		t.Fatalf("broker/core/errors.json: %v", err)
	}
	c, ok := m[r.String()]
	if !ok {
		t.Fatalf("reason %v is not in broker/core/errors.json", r)
	}
	return c
}
func (r *refusal) Unwrap() error { return errRefused }

// topicMissing reports whether err is a refusal because the topic does not
// exist.
func topicMissing(err error) bool {
	var r *refusal
	return errors.As(err, &r) && r.noTopic
}
