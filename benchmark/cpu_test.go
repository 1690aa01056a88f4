package benchmark

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
)

// TestMain lets the test binary serve as its own child broker
// (Config.ChildBroker re-executes the running binary).
func TestMain(m *testing.M) {
	ServeChildBroker()
	os.Exit(m.Run())
}

func TestPIDListeningOnFindsTheListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pid, err := pidListeningOn(l.Addr().String())
	if err != nil || pid != os.Getpid() {
		t.Fatalf("pidListeningOn(%s) = %d, %v; want %d", l.Addr(), pid, err, os.Getpid())
	}
	port := l.Addr().(*net.TCPAddr).Port
	if pid, err := pidListeningOn("nats://localhost:" + strings.TrimPrefix(l.Addr().String(), "127.0.0.1:")); err != nil || pid != os.Getpid() {
		t.Fatalf("URL form, port %d: %d, %v", port, pid, err)
	}
	l.Close()
	if _, err := pidListeningOn(l.Addr().String()); err == nil {
		t.Fatal("found a listener on a closed port")
	}
	if _, err := pidListeningOn("192.0.2.1:9876"); err == nil {
		t.Fatal("found a process for an address that is not this machine's")
	}
}

func TestProcCPUAdvances(t *testing.T) {
	before, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the kernel's 10 ms ticks have seen some CPU time.
	x := 0
	wait.For(t, "the process's CPU time to advance", func() error {
		for i := 0; i < 1_000_000; i++ {
			x += i
		}
		after, err := procCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after <= before {
			return fmt.Errorf("CPU time %v, %v before (spun to %d)", after, before, x)
		}
		return nil
	})
}

// TestChildBrokerReportsCPUPerMessage runs a produce and a consume workload
// against a broker in a child process: both CPU figures are there and
// plausible, the JSON carries them, and the summary prints them.
func TestChildBrokerReportsCPUPerMessage(t *testing.T) {
	for _, mode := range []Mode{ModeProduce, ModeConsume} {
		t.Run(string(mode), func(t *testing.T) {
			var out bytes.Buffer
			c := short(mode)
			c.ChildBroker = true
			c.Out = &out
			c.DataDir = t.TempDir()
			if mode == ModeConsume {
				c.Messages = 5000
			}
			res, err := Run(context.Background(), c)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if res.Messages == 0 || res.BrokerCPUUsPerMsg == nil || res.ClientCPUUsPerMsg == nil || res.ProcessCPUUsPerMsg != nil {
				t.Fatalf("result %+v\n%s", res, out.String())
			}
			// A message costs CPU, and not a second of it.
			for name, v := range map[string]float64{"broker": *res.BrokerCPUUsPerMsg, "client": *res.ClientCPUUsPerMsg} {
				if v < 0 || v > 1e6 {
					t.Fatalf("%s CPU per message %.2f µs", name, v)
				}
			}
			if res.BrokerPID == 0 || res.BrokerPID == os.Getpid() {
				t.Fatalf("broker pid %d (this process %d)", res.BrokerPID, os.Getpid())
			}
			checkKernelPerMsg(t, "broker", res.BrokerKernel, true)
			checkKernelPerMsg(t, "client", res.ClientKernel, true)
			if res.ProcessKernel != nil || res.KernelNote != "" {
				t.Fatalf("process counters %+v, note %q", res.ProcessKernel, res.KernelNote)
			}
			if !strings.Contains(out.String(), "CPU per") || !strings.Contains(out.String(), "child process") {
				t.Fatalf("summary lacks the CPU line or the child broker:\n%s", out.String())
			}
			if !strings.Contains(out.String(), "system calls per") || !strings.Contains(out.String(), "context switches per") {
				t.Fatalf("summary lacks the system call and context switch lines:\n%s", out.String())
			}
			var line bytes.Buffer
			if err := PrintJSON(&line, res); err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(line.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			if _, ok := m["broker_cpu_us_per_msg"].(float64); !ok {
				t.Fatalf("JSON broker_cpu_us_per_msg: %s", line.String())
			}
			if _, ok := m["client_cpu_us_per_msg"].(float64); !ok {
				t.Fatalf("JSON client_cpu_us_per_msg: %s", line.String())
			}
			for _, k := range []string{"broker_kernel_per_msg", "client_kernel_per_msg"} {
				o, _ := m[k].(map[string]any)
				for _, f := range []string{"syscr", "syscw", "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"} {
					if _, ok := o[f].(float64); !ok {
						t.Fatalf("JSON %s.%s: %s", k, f, line.String())
					}
				}
			}
		})
	}
}

// TestInProcessBrokerReportsProcessCPU: with the broker in this process the
// harness reports the process's CPU and says why there is no split.
func TestInProcessBrokerReportsProcessCPU(t *testing.T) {
	c := short(ModeProduce)
	c.Out = &bytes.Buffer{}
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if res.ProcessCPUUsPerMsg == nil || res.BrokerCPUUsPerMsg != nil || res.ClientCPUUsPerMsg != nil || res.CPUNote == "" {
		t.Fatalf("result %+v", res)
	}
	checkKernelPerMsg(t, "process", res.ProcessKernel, true)
	if res.BrokerKernel != nil || res.ClientKernel != nil {
		t.Fatalf("broker %+v and client %+v counters of an in-process broker", res.BrokerKernel, res.ClientKernel)
	}
}

// TestBrokerAtAddrFoundByPort: a broker at --addr on this machine, in
// another process, is found by its listening port.
func TestBrokerAtAddrFoundByPort(t *testing.T) {
	c := short(ModeProduce)
	c.Flush, c.Queues = "async", 4
	ch, err := startChildBroker(c, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.stop()
	c.Addr = ch.addr
	c.Out = &bytes.Buffer{}
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if res.BrokerPID != ch.cmd.Process.Pid || res.BrokerCPUUsPerMsg == nil || res.ClientCPUUsPerMsg == nil {
		t.Fatalf("result %+v; child pid %d", res, ch.cmd.Process.Pid)
	}
	checkKernelPerMsg(t, "broker", res.BrokerKernel, true)
	checkKernelPerMsg(t, "client", res.ClientKernel, true)
}

// TestServeChildSpec: the child broker takes a data directory with a comma
// in its name, says where it listens, and stops when its input closes; a
// malformed spec is refused.
func TestServeChildSpec(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a,b")
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serveChild(dir+",async,2", inR, outW) }()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "listening 127.0.0.1:") {
		t.Fatalf("first line %q, %v", line, err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("data directory: %v", err)
	}
	inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("the child broker did not stop when its input closed")
	}
	if err := serveChild("no-commas", strings.NewReader(""), io.Discard); err == nil {
		t.Fatal("a malformed spec was accepted")
	}
}
