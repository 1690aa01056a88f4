// Command apogee-bench measures Apogee (or any RocketMQ-protocol broker):
// throughput and latency percentiles of producing, consuming and both, or of
// the storage engine alone. With no --addr it starts an embedded broker in a
// temporary directory, so `go run ./cmd/apogee-bench` measures a fresh
// broker in about 12 seconds: an e2e run at a fixed 20,000 msgs/s, whose
// end-to-end percentiles are latency. `--rate 0` runs closed loop (the
// throughput). The guide is docs/bench.md.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/benchmark"
	"github.com/apogeemq/apogee/internal/version"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "apogee-bench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := pflag.NewFlagSet("apogee-bench", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: apogee-bench [produce|consume|e2e|store] [flags]\n\n%s", fs.FlagUsages())
	}
	var c benchmark.Config
	var mode string
	fs.StringVar(&mode, "mode", "e2e", "produce, consume, e2e or store (also accepted as the first argument)")
	fs.StringVar(&c.Addr, "addr", "", "broker or name server address; empty starts an embedded broker")
	fs.IntVar(&c.Size, "size", 1024, "message body size in bytes")
	fs.IntVar(&c.Producers, "producers", 4, "concurrent producers")
	fs.IntVar(&c.Consumers, "consumers", 4, "concurrent consumers")
	fs.IntVar(&c.Batch, "batch", 1, "messages per send request")
	fs.IntVar(&c.Inflight, "inflight", 0, "outstanding requests per producer (default 64; 1 in store mode)")
	fs.Float64Var(&c.Rate, "rate", 0, fmt.Sprintf("target msgs/s over all producers, latency counted from each message's intended send time; 0 = closed loop, as fast as acknowledgements return (default: %d for e2e, closed loop for produce and store)", benchmark.DefaultE2ERate))
	fs.DurationVar(&c.Duration, "duration", 0, "measured duration (default 10s)")
	fs.DurationVar(&c.Warmup, "warmup", 0, "warm-up before measuring (default 2s)")
	fs.Int64Var(&c.Messages, "messages", 0, "stop after this many messages (consume mode: the backlog, default 1,000,000)")
	fs.StringVar(&c.Topic, "topic", "apogee-bench", "topic")
	fs.IntVar(&c.Queues, "queues", 8, "queues of the topic")
	fs.StringVar(&c.Flush, "flush", "async", "flush mode of the embedded broker or store: async or sync")
	fs.StringVar(&c.DataDir, "data-dir", "", "data directory of the embedded broker or store (default: a temporary directory)")
	jsonOut := fs.Bool("json", false, "print the result as one JSON object on the last line")
	fs.StringVar(&c.HdrOut, "hdr-out", "", "write interval histogram logs (HdrHistogram log format) to this file")
	fs.BoolVar(&c.FindMax, "find-max", false, "search for the highest rate with p99 send latency under --max-p99")
	fs.DurationVar(&c.MaxP99, "max-p99", 0, "latency bound for --find-max (default 10ms)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this address")
	fs.BoolVar(&c.Quiet, "quiet", false, "no per-second lines")
	fs.StringVar(&c.SlaveAddr, "slave-addr", "", "a slave of the broker under load: measure the slave lag (produce and e2e modes)")
	fs.DurationVar(&c.LagInterval, "lag-interval", 0, "polling period of the slave-lag probe (default 2ms)")
	showVersion := fs.Bool("version", false, "print the version and the commit, and exit")
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return nil
		}
		return err
	}
	if *showVersion {
		fmt.Println(version.Get().String("apogee-bench"))
		return nil
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
	if *pprofAddr != "" {
		l, err := net.Listen("tcp", *pprofAddr)
		if err != nil {
			return fmt.Errorf("--pprof: %w", err)
		}
		go http.Serve(l, nil)
		fmt.Fprintf(os.Stderr, "pprof on http://%s/debug/pprof/\n", l.Addr())
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := benchmark.Run(ctx, c)
	if err != nil {
		return err
	}
	if *jsonOut {
		return benchmark.PrintJSON(os.Stdout, res)
	}
	return nil
}
