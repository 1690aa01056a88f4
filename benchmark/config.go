package benchmark

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

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
	// Producers and Consumers: concurrent clients. Defaults 4 and 4 (1 in consume-less modes).
	Producers, Consumers int
	// Batch: messages per send request. Default 1.
	Batch int
	// Inflight: outstanding requests per producer. Default 64 (1 for store mode,
	// where each in-flight slot is a goroutine calling Put).
	Inflight int
	// Rate: target messages per second over all producers; 0 runs closed-loop.
	Rate float64
	// Duration of the measured part, after Warmup. Defaults 10 s and 2 s.
	Duration, Warmup time.Duration
	// Messages stops after this many measured messages (0: by Duration). In
	// consume mode it is the backlog produced first (default 1,000,000).
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
	if o.Producers < 0 || o.Consumers < 0 || o.Batch < 0 || o.Inflight < 0 || o.Rate < 0 || o.Messages < 0 {
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
	if o.Mode == ModeConsume && o.Messages == 0 {
		o.Messages = 1_000_000
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
	if o.Out == nil {
		o.Out = os.Stdout
	}
	return o, nil
}
