package benchmark

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/apogeemq/apogee/auth"
)

// DefaultE2ERate is the rate of an e2e run that sets none: 20,000 msgs/s of
// 1 KiB, a rate the embedded broker sustains on a shared 2-core VM with
// consumers keeping up (its closed-loop maximum there is about 150,000), so
// the end-to-end percentiles are latency, not the length of a queue. See
// docs/bench.md.
const DefaultE2ERate = 20_000

// ClosedLoop as Config.Rate asks for a closed-loop run in any mode.
const ClosedLoop = -1

// Mode names a workload.
type Mode string

// The modes of the command-line contract.
const (
	ModeProduce Mode = "produce"
	ModeConsume Mode = "consume"
	ModeE2E     Mode = "e2e"
	ModeStore   Mode = "store"
)

// Config describes a run. The zero value of a field means its default.
type Config struct {
	Mode Mode // default e2e
	// Addr is a broker or name server address; empty starts an embedded
	// broker in a temporary directory.
	Addr string
	// Size of each message body in bytes (at least 8: the send time). Default 1024.
	Size int
	// Producers and Consumers: concurrent clients (in store mode, goroutines
	// calling PutBatch and Get). Defaults 4 and 4; produce mode runs no
	// consumers.
	Producers, Consumers int
	// Batch: messages per send request. Default 1.
	Batch int
	// Inflight: outstanding requests per producer. Default 64 (1 for store mode,
	// where each in-flight slot is a goroutine calling Put).
	Inflight int
	// Rate is the target of messages per second over all producers. 0 means
	// the mode's default: DefaultE2ERate for e2e, closed loop for produce and
	// store. ClosedLoop (any negative value) runs closed loop: each producer
	// keeps Inflight requests outstanding and sends the next one as soon as
	// one is answered, so the run finds the throughput and its latencies are
	// those of a saturated broker.
	Rate float64
	// Duration of the measured part, after Warmup. Defaults 10 s and 2 s.
	Duration, Warmup time.Duration
	// Messages is how many messages the producers send in all, warm-up
	// included (0: no limit, the run ends by Duration); the warm-up then ends
	// at Warmup or once a tenth of them were acknowledged, whichever comes
	// first, and the measured part once all were answered (or at Duration).
	// In consume mode it is the backlog produced first (default 1,000,000).
	// A multiple of Batch.
	Messages int64
	// Topic and Queues of the workload. Defaults "apogee-bench" and 8.
	Topic  string
	Queues int
	// Flush mode of the embedded broker or store: "async" (default) or "sync".
	Flush string
	// DataDir for the embedded broker or store; empty: a temporary directory, removed after.
	DataDir string
	// HdrOut writes interval histogram logs (HdrHistogram's log format) here.
	HdrOut string
	// FindMax searches for the highest rate whose p99 send latency stays under MaxP99.
	FindMax bool
	MaxP99  time.Duration // default 10 ms
	// Out receives the per-second lines and the summary. Default os.Stdout.
	Out io.Writer
	// Quiet suppresses the per-second lines.
	Quiet bool
	// Protocol the clients speak: "remoting" (default; Apogee's client) or
	// "grpc" (RocketMQ 5's MessagingService, on the broker's gRPC front
	// end; Addr is then its gRPC address).
	Protocol string
	// Lite, when above 0 (gRPC only), sends to Lite lite topics of Topic
	// (RocketMQ 5.5's lite topics, round robin) and consumes them with
	// lite consumers of the group <Topic>-lite, each subscribing to its
	// share. With no Addr the embedded broker gets the LITE parent and the
	// lite group; with Addr they must exist (docs/lite-topics.md).
	Lite int
	// TLS, when set, makes every client connection a TLS connection with
	// this configuration. With no Addr, the embedded broker then serves TLS
	// (RocketMQ's permissive mode: TLS and plain on one port) with a
	// certificate made for the run, which the clients trust. Default nil:
	// plain TCP. Not for store mode.
	TLS *tls.Config
	// Credentials, when set, make every client sign its requests. With no
	// Addr, the embedded broker then turns access control on with one user
	// of these keys, allowed Pub and Sub on Topic and on the groups
	// apogee-bench* only. Default: none (unsigned). Not for store mode.
	Credentials auth.Credentials
	// BrokerPID is the broker's process on this machine, for its CPU per
	// message; 0: the process listening on Addr's port, when there is one.
	BrokerPID int
	// ChildBroker runs the embedded broker in a child process (this binary
	// re-executed; see ServeChildBroker) so that its CPU is measured apart
	// from the generator's.
	ChildBroker bool
	// Driver names an external driver (RunTarget's); empty for Apogee's own.
	Driver string
	// SlaveAddr, in produce and e2e modes, is the address of a slave of
	// the broker under load: the run then measures the slave lag (lag.go:
	// the time from a message's visibility on the master to its visibility
	// on the slave, for the topic's queue 0), polling both every
	// LagInterval (default DefaultLagInterval). Empty: no lag probe.
	SlaveAddr   string
	LagInterval time.Duration
}

func (c *Config) withDefaults() (Config, error) {
	o := *c
	if o.Mode == "" {
		o.Mode = ModeE2E
	}
	switch o.Mode {
	case ModeProduce, ModeConsume, ModeE2E, ModeStore:
	default:
		return o, fmt.Errorf("benchmark: unknown mode %q (produce, consume, e2e or store)", o.Mode)
	}
	if o.Mode == ModeStore && (o.TLS != nil || !o.Credentials.IsEmpty()) {
		return o, errors.New("benchmark: store mode has no connections: TLS and credentials do not apply")
	}
	if o.ChildBroker && o.Addr == "" && (o.TLS != nil || !o.Credentials.IsEmpty()) {
		return o, errors.New("benchmark: the child broker serves neither TLS nor access control: run apogee-broker with them and point --addr at it")
	}
	if o.Size == 0 {
		o.Size = 1024
	}
	if o.Size < 8 {
		return o, errors.New("benchmark: --size must be at least 8 bytes (the send time travels in the body)")
	}
	if o.Producers == 0 {
		o.Producers = 4
	}
	if o.Consumers == 0 {
		o.Consumers = 4
	}
	if o.Batch == 0 {
		o.Batch = 1
	}
	if o.Inflight == 0 {
		o.Inflight = 64
		if o.Mode == ModeStore {
			o.Inflight = 1
		}
	}
	switch {
	case o.Rate < 0:
		o.Rate = 0 // closed loop, as the run's code spells it
	case o.Rate == 0 && o.Mode == ModeE2E:
		o.Rate = DefaultE2ERate
	}
	if o.Producers < 0 || o.Consumers < 0 || o.Batch < 0 || o.Inflight < 0 || o.Messages < 0 {
		return o, errors.New("benchmark: counts and rates must not be negative")
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 2 * time.Second
	}
	if o.Warmup < 0 {
		o.Warmup = 0
	}
	if o.SlaveAddr != "" && o.Mode != ModeProduce && o.Mode != ModeE2E {
		return o, errors.New("benchmark: --slave-addr measures the slave lag of produce and e2e runs only")
	}
	if o.LagInterval <= 0 {
		o.LagInterval = DefaultLagInterval
	}
	if o.Mode == ModeConsume && o.Messages == 0 {
		o.Messages = 1_000_000
	}
	if o.Messages%int64(max(o.Batch, 1)) != 0 {
		return o, fmt.Errorf("benchmark: --messages %d is not a multiple of --batch %d: the run sends whole batches", o.Messages, o.Batch)
	}
	if o.Topic == "" {
		o.Topic = "apogee-bench"
	}
	if o.Queues == 0 {
		o.Queues = 8
	}
	if o.Flush == "" {
		o.Flush = "async"
	}
	if o.Flush != "async" && o.Flush != "sync" {
		return o, fmt.Errorf("benchmark: --flush %q: want async or sync", o.Flush)
	}
	if o.MaxP99 == 0 {
		o.MaxP99 = 10 * time.Millisecond
	}
	switch o.Protocol {
	case "":
		o.Protocol = ProtocolRemoting
	case ProtocolRemoting, ProtocolGRPC:
	default:
		return o, fmt.Errorf("benchmark: --protocol %q: want remoting or grpc", o.Protocol)
	}
	if o.Protocol == ProtocolGRPC && o.Mode == ModeStore {
		return o, errors.New("benchmark: --protocol grpc needs a broker: not in store mode")
	}
	if o.Lite > 0 && o.Protocol != ProtocolGRPC {
		return o, errors.New("benchmark: --lite needs --protocol grpc (lite topics are RocketMQ 5's)")
	}
	if o.ChildBroker && (o.Addr != "" || o.Mode == ModeStore || o.Protocol != ProtocolRemoting) {
		return o, errors.New("benchmark: --child-broker runs the embedded broker for the remoting protocol: not with --addr, --protocol grpc or store mode")
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	return o, nil
}
