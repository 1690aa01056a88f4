package natsdriver

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/apogeemq/apogee/benchmark"
)

// natsServer starts a nats-server with JetStream in a temporary directory
// on a port of its choosing and returns its URL and pid; the test is skipped
// when there is no nats-server on PATH or in $(go env GOPATH)/bin.
func natsServer(t *testing.T) (string, int) {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		gopath := os.Getenv("GOPATH")
		if gopath == "" {
			out, _ := exec.Command("go", "env", "GOPATH").Output()
			gopath = string(bytes.TrimSpace(out))
		}
		bin = filepath.Join(gopath, "bin", "nats-server")
		if _, err := os.Stat(bin); err != nil {
			t.Skip("no nats-server on PATH or in GOPATH/bin: go install github.com/nats-io/nats-server/v2@v2.15.2 to run this test")
		}
	}
	cmd := exec.Command(bin, "-js", "-sd", t.TempDir(), "-a", "127.0.0.1", "-p", "-1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`Listening for client connections on (\S+)`)
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			if m := re.FindStringSubmatch(s.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return "nats://" + a, cmd.Process.Pid
	case <-time.After(20 * time.Second):
		t.Fatal("nats-server did not say where it listens in 20 s")
	}
	return "", 0
}

func short(mode benchmark.Mode, url string) benchmark.Config {
	return benchmark.Config{Mode: mode, Addr: url, Duration: time.Second, Warmup: 300 * time.Millisecond,
		Producers: 2, Consumers: 2, Queues: 4, Inflight: 8, Size: 256, Out: &bytes.Buffer{}}
}

// TestWorkloadsAgainstNATS runs produce, e2e (fixed rate, batches of 2),
// consume and a closed-loop e2e against a real nats-server, and checks what
// each measured, its CPU figures included.
func TestWorkloadsAgainstNATS(t *testing.T) {
	url, pid := natsServer(t)
	ctx := context.Background()

	t.Run("produce", func(t *testing.T) {
		res, err := Run(ctx, short(benchmark.ModeProduce, url), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Messages == 0 || res.Errors != 0 || res.SendLatency.Count == 0 {
			t.Fatalf("result %+v", res)
		}
		if res.BrokerPID != pid || res.BrokerCPUUsPerMsg == nil || res.ClientCPUUsPerMsg == nil || *res.BrokerCPUUsPerMsg <= 0 {
			t.Fatalf("CPU figures: pid %d (server %d), %+v", res.BrokerPID, pid, res)
		}
		// The server's system calls and context switches, from its /proc.
		for who, k := range map[string]*benchmark.KernelPerMsg{"server": res.BrokerKernel, "client": res.ClientKernel} {
			if k == nil || k.SyscR == nil || k.SyscW == nil || k.VoluntaryCtxtSwitches == nil || k.NonvoluntaryCtxtSwitches == nil {
				t.Fatalf("%s counters %+v (note %q)", who, k, res.KernelNote)
			}
			if *k.SyscR <= 0 || *k.SyscW <= 0 || *k.VoluntaryCtxtSwitches < 0 || *k.NonvoluntaryCtxtSwitches < 0 {
				t.Fatalf("%s counters per message: syscr %f syscw %f switches %f + %f", who, *k.SyscR, *k.SyscW, *k.VoluntaryCtxtSwitches, *k.NonvoluntaryCtxtSwitches)
			}
		}
	})
	t.Run("e2e", func(t *testing.T) {
		c := short(benchmark.ModeE2E, url)
		c.Rate, c.Batch = 2000, 2
		res, err := Run(ctx, c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Messages == 0 || res.Consumed == 0 || res.E2ELatency.Count == 0 || res.Errors != 0 || res.TargetRate != 2000 {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("consume", func(t *testing.T) {
		c := short(benchmark.ModeConsume, url)
		c.Messages = 5000
		res, err := Run(ctx, c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Consumed != 5000 || res.Errors != 0 || res.BrokerCPUUsPerMsg == nil {
			t.Fatalf("drained %d of 5000: %+v", res.Consumed, res)
		}
	})
	t.Run("no stream takes the subject", func(t *testing.T) {
		// A run whose stream is deleted under it counts errors, not acks,
		// and still ends.
		c := short(benchmark.ModeProduce, url)
		c.Duration, c.Warmup, c.Topic = 500*time.Millisecond, 0, "gone"
		res, err := benchmark.RunTarget(ctx, c, "nats", func(ctx context.Context, c benchmark.Config) (benchmark.Target, error) {
			tg, err := Open(ctx, c, Options{Stream: "GONE"})
			if err != nil {
				return nil, err
			}
			if err := tg.js.DeleteStream(ctx, "GONE"); err != nil {
				return nil, err
			}
			return tg, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors == 0 || res.Messages != 0 {
			t.Fatalf("publishing to no stream: %+v", res)
		}
	})
}
