package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestChildBrokerAndDriver runs the binary with --child-broker (the binary
// re-executes itself as the broker: main must hand over to
// benchmark.ServeChildBroker) and checks both CPU figures in the JSON; then
// --driver nats with no driver binary to be found fails saying what to install.
func TestChildBrokerAndDriver(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "apogee-bench")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "produce", "--child-broker", "--duration", "1s", "--warmup", "200ms", "--size", "128",
		"--producers", "2", "--inflight", "8", "--queues", "2", "--json", "--data-dir", t.TempDir()).Output()
	if err != nil {
		t.Fatalf("apogee-bench --child-broker: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var res map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, out)
	}
	for _, k := range []string{"broker_cpu_us_per_msg", "client_cpu_us_per_msg"} {
		if v, ok := res[k].(float64); !ok || v < 0 {
			t.Fatalf("%s = %v\n%s", k, res[k], out)
		}
	}
	if pid, _ := res["broker_pid"].(float64); pid <= 0 {
		t.Fatalf("broker_pid %v", res["broker_pid"])
	}
	checkKernelJSON(t, res, "broker_kernel_per_msg")
	checkKernelJSON(t, res, "client_kernel_per_msg")

	cmd := exec.Command(bin, "--driver", "nats", "produce")
	cmd.Env = append(os.Environ(), "PATH="+dir) // only apogee-bench itself there
	msg, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "apogee-bench-nats") {
		t.Fatalf("--driver nats without the driver: %v %s", err, msg)
	}
	if err := exec.Command(bin, "--driver", "kafka").Run(); err == nil {
		t.Fatal("an unknown --driver was accepted")
	}
}

// checkKernelJSON fails unless the JSON result res has the object key with
// the four kernel counters per message, none negative, and read-like and
// write-like system calls (every run of these tests sends).
func checkKernelJSON(t *testing.T, res map[string]any, key string) {
	t.Helper()
	o, ok := res[key].(map[string]any)
	if !ok {
		t.Fatalf("JSON %s = %v", key, res[key])
	}
	for _, f := range []string{"syscr", "syscw", "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"} {
		v, ok := o[f].(float64)
		if !ok || v < 0 {
			t.Fatalf("JSON %s.%s = %v", key, f, o[f])
		}
		if (f == "syscr" || f == "syscw") && v == 0 {
			t.Fatalf("JSON %s.%s = 0 for a run that sent", key, f)
		}
	}
}
