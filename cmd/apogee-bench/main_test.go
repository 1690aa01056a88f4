package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestJSONContract runs the command as a user would and checks that the last
// line of standard output is the JSON object the command-line contract fixes.
func TestJSONContract(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "apogee-bench")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	hdr := filepath.Join(t.TempDir(), "lat.hlog")
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	cmd := exec.Command(bin, "produce", "--duration", "1s", "--warmup", "200ms", "--size", "128",
		"--producers", "2", "--inflight", "8", "--batch", "4", "--queues", "2", "--json",
		"--hdr-out", hdr, "--cpuprofile", prof, "--pprof", "127.0.0.1:0", "--data-dir", t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("apogee-bench: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var res map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, out)
	}
	if res["mode"] != "produce" || res["messages"].(float64) <= 0 || res["msgs_per_sec"].(float64) <= 0 {
		t.Fatalf("result %v", res)
	}
	for _, k := range []string{"errors", "mib_per_sec", "send_latency_us", "e2e_latency_us"} {
		if _, ok := res[k]; !ok {
			t.Fatalf("JSON lacks %q", k)
		}
	}
	for _, f := range []string{hdr, prof} {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Fatalf("%s not written: %v", f, err)
		}
	}
	if res["closed_loop"] != true || res["roles"].([]any)[0] != "producers" || len(res["roles"].([]any)) != 1 {
		t.Fatalf("produce without --rate is closed loop with producers only: %v", res)
	}
	// The embedded broker runs in this process: its counters are the
	// process's, broker and generator together.
	checkKernelJSON(t, res, "process_kernel_per_msg")
	if res["broker_kernel_per_msg"] != nil || res["client_kernel_per_msg"] != nil {
		t.Fatalf("broker and client counters of an in-process broker: %v", res)
	}
	if err := exec.Command(bin, "--flush", "sometimes").Run(); err == nil {
		t.Fatal("a bad --flush was accepted")
	}
	if err := exec.Command(bin, "--rate", "-5").Run(); err == nil {
		t.Fatal("a negative --rate was accepted")
	}
	out, err = exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "apogee-bench ") || !strings.Contains(string(out), ", commit ") {
		t.Fatalf("--version: %v %q", err, out)
	}
}

// TestSecurityFlags checks the TLS and credential flags that do not go
// together (a run with them is benchmark's TestTLSAndCredentials).
func TestSecurityFlags(t *testing.T) {
	t.Setenv("APOGEE_BENCH_SECRET_KEY", "")
	for _, args := range [][]string{
		{"--tls-ca", "ca.pem"},
		{"--tls-insecure"},
		{"--access-key", "bench"},
		{"--secret-key", "s"},
		{"--tls", "--tls-ca", filepath.Join(t.TempDir(), "missing.pem")},
		{"store", "--tls"},
	} {
		if err := run(append(args, "--duration", "100ms", "--quiet")); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
