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
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/version"
)

func main() {
	benchmark.ServeChildBroker() // when this process is a --child-broker
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
	fs.Int64Var(&c.Messages, "messages", 0, "send exactly this many messages in all, warm-up included: the warm-up ends at --warmup or at a tenth of them, the summary says how many each part took and how many the topic stored (consume mode: the backlog, default 1,000,000)")
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
	fs.StringVar(&c.Protocol, "protocol", "remoting", "the clients' protocol: remoting (RocketMQ 4's, Apogee's client) or grpc (RocketMQ 5's MessagingService; --addr is then the broker's gRPC address)")
	fs.IntVar(&c.Lite, "lite", 0, "with --protocol grpc: send to this many lite topics of --topic (RocketMQ 5.5) and consume them with lite consumers of the group <topic>-lite; with --addr the LITE parent and the group (lite.bind.topic=<topic>) must exist")
	fs.IntVar(&c.BrokerPID, "broker-pid", 0, "pid of the broker at --addr, for its CPU per message (default: the process of this machine listening on --addr's port)")
	fs.BoolVar(&c.ChildBroker, "child-broker", false, "run the embedded broker in a child process, so that its CPU per message is measured apart from the generator's")
	driver := fs.String("driver", "apogee", "the system measured: apogee, or nats (NATS JetStream, by the apogee-bench-nats binary of benchmark/natsdriver, which takes the same flags)")
	fs.StringVar(&c.SlaveAddr, "slave-addr", "", "a slave of the broker under load: measure the slave lag (produce and e2e modes)")
	fs.DurationVar(&c.LagInterval, "lag-interval", 0, "polling period of the slave-lag probe (default 2ms)")
	showVersion := fs.Bool("version", false, "print the version and the commit, and exit")
	var tlsOn bool
	var tlsc tlsconf.ClientConfig
	fs.BoolVar(&tlsOn, "tls", false, "connect over TLS (with no --addr: the embedded broker serves TLS with a certificate made for the run)")
	fs.StringVar(&tlsc.CAFile, "tls-ca", "", "with --tls: CAs to verify the broker's certificate with (PEM; default the system's)")
	fs.StringVar(&tlsc.CertFile, "tls-cert", "", "with --tls: a client certificate (PEM) for mutual TLS")
	fs.StringVar(&tlsc.KeyFile, "tls-key", "", "with --tls: the client certificate's key (PEM)")
	fs.StringVar(&tlsc.ServerName, "tls-server-name", "", "with --tls: the name to verify the broker's certificate for (default: the host dialled)")
	fs.BoolVar(&tlsc.Insecure, "tls-insecure", false, "with --tls: accept any broker certificate (what rocketmq-client-go's WithTls(true) does)")
	fs.StringVar(&c.Credentials.AccessKey, "access-key", "", "sign requests with this access key (with no --addr: the embedded broker turns access control on with this user)")
	fs.StringVar(&c.Credentials.SecretKey, "secret-key", "", "the secret key of --access-key (or $APOGEE_BENCH_SECRET_KEY)")
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return nil
		}
		return err
	}
	switch *driver {
	case "apogee":
	case "nats":
		return runDriver("apogee-bench-nats", args)
	default:
		return fmt.Errorf("--driver %q: want apogee or nats", *driver)
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
	if c.Credentials.SecretKey == "" {
		c.Credentials.SecretKey = os.Getenv("APOGEE_BENCH_SECRET_KEY")
	}
	if (c.Credentials.AccessKey == "") != (c.Credentials.SecretKey == "") {
		return fmt.Errorf("--access-key and --secret-key go together")
	}
	if !tlsOn && (fs.Changed("tls-ca") || fs.Changed("tls-cert") || fs.Changed("tls-key") || fs.Changed("tls-server-name") || tlsc.Insecure) {
		return fmt.Errorf("--tls-ca, --tls-cert, --tls-key, --tls-server-name and --tls-insecure need --tls")
	}
	if tlsOn {
		cfg, err := tlsc.Load()
		if err != nil {
			return fmt.Errorf("--tls: %w", err)
		}
		c.TLS = cfg
	}
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
