// Command apogee-bench-nats is apogee-bench's NATS JetStream driver: the
// same workloads, flags and reports as apogee-bench, against a nats-server
// with JetStream at --addr (default nats://127.0.0.1:4222). `apogee-bench
// --driver nats ...` runs it. Start the server with
//
//	go install github.com/nats-io/nats-server/v2@v2.15.2
//	nats-server -js -sd /tmp/nats-data             # acknowledges before fsync
//	nats-server -c sync.conf                       # jetstream { sync_interval: always }
//
// See docs/benchmarks.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/benchmark"
	"github.com/apogeemq/apogee/benchmark/natsdriver"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "apogee-bench-nats:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := pflag.NewFlagSet("apogee-bench-nats", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: apogee-bench-nats [produce|consume|e2e] [flags]\n\n%s", fs.FlagUsages())
	}
	var c benchmark.Config
	var o natsdriver.Options
	var mode string
	fs.StringVar(&mode, "mode", "e2e", "produce, consume or e2e (also accepted as the first argument)")
	fs.StringVar(&c.Addr, "addr", natsdriver.DefaultURL, "NATS server URL")
	fs.IntVar(&c.Size, "size", 1024, "message body size in bytes")
	fs.IntVar(&c.Producers, "producers", 4, "concurrent producers (a connection each)")
	fs.IntVar(&c.Consumers, "consumers", 4, "concurrent consumers (a connection each, one shared pull consumer)")
	fs.IntVar(&c.Batch, "batch", 1, "messages per request (NATS publishes each; the slot completes when all are acknowledged)")
	fs.IntVar(&c.Inflight, "inflight", 0, "outstanding requests per producer (default 64)")
	fs.Float64Var(&c.Rate, "rate", 0, fmt.Sprintf("target msgs/s over all producers; 0 = closed loop (default: %d for e2e, closed loop for produce)", benchmark.DefaultE2ERate))
	fs.DurationVar(&c.Duration, "duration", 0, "measured duration (default 10s)")
	fs.DurationVar(&c.Warmup, "warmup", 0, "warm-up before measuring (default 2s)")
	fs.Int64Var(&c.Messages, "messages", 0, "send exactly this many messages in all, warm-up included: the warm-up ends at --warmup or at a tenth of them (consume mode: the backlog, default 1,000,000)")
	fs.StringVar(&c.Topic, "topic", "apogee-bench", "topic: the stream's subjects are <topic>.<queue>")
	fs.IntVar(&c.Queues, "queues", 8, "subjects of the stream, published to in turn")
	fs.StringVar(&o.Stream, "stream", natsdriver.DefaultStream, "JetStream stream (deleted and created afresh)")
	fs.IntVar(&c.BrokerPID, "broker-pid", 0, "pid of nats-server, for its CPU per message (default: the process of this machine listening on --addr's port)")
	jsonOut := fs.Bool("json", false, "print the result as one JSON object on the last line")
	fs.StringVar(&c.HdrOut, "hdr-out", "", "write interval histogram logs (HdrHistogram log format) to this file")
	fs.BoolVar(&c.FindMax, "find-max", false, "search for the highest rate with p99 send latency under --max-p99")
	fs.DurationVar(&c.MaxP99, "max-p99", 0, "latency bound for --find-max (default 10ms)")
	fs.BoolVar(&c.Quiet, "quiet", false, "no per-second lines")
	fs.String("driver", "nats", "accepted for apogee-bench's sake: this binary is the nats driver")
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return nil
		}
		return err
	}
	if d, _ := fs.GetString("driver"); d != "nats" {
		return fmt.Errorf("--driver %q: this is the nats driver", d)
	}
	if c.Rate < 0 {
		return fmt.Errorf("--rate %v: want 0 (closed loop) or a positive rate", c.Rate)
	}
	if fs.Changed("rate") && c.Rate == 0 {
		c.Rate = benchmark.ClosedLoop
	}
	switch fs.NArg() {
	case 0:
	case 1:
		if fs.Changed("mode") && fs.Arg(0) != mode {
			return fmt.Errorf("mode given twice: %q and --mode %q", fs.Arg(0), mode)
		}
		mode = fs.Arg(0)
	default:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.Mode = benchmark.Mode(mode)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := natsdriver.Run(ctx, c, o)
	if err != nil {
		return err
	}
	if *jsonOut {
		return benchmark.PrintJSON(os.Stdout, res)
	}
	return nil
}
