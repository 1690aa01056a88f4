package main

import (
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestHealthz: the operator port's /healthz answers 200 "ok" without a
// login under access control (where /metrics needs one) and whatever Host
// the prober sends (where the dashboard refuses names it does not know),
// as Kubernetes' probes send the pod's IP or nothing of ours.
func TestHealthz(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	bin := buildBinary(t)
	file := filepath.Join(t.TempDir(), "acl.yml")
	if err := os.WriteFile(file, []byte(opACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, bin, "--namesrv-listen", "", "--grpc-listen", "", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--acl-file", file, "--metrics-listen", "127.0.0.1:0")
	defer p.stop(t, syscall.SIGTERM)
	addr := p.metricsAddr(t)
	if resp, body := opGet(t, addr, "/healthz", "", ""); resp.StatusCode != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", resp.StatusCode, body)
	}
	if resp, _ := opGet(t, addr, "/metrics", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/metrics without credentials under ACL: %d, want 401 (the test's premise)", resp.StatusCode)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest("GET", "http://"+addr+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "apogee-broker-0.apogee-broker.default.svc.cluster.local:5557"
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz under a Host the dashboard does not know: %d", resp.StatusCode)
	}
	req.Host = "apogee-broker-0.apogee-broker.default.svc.cluster.local:5557"
	req.URL.Path = "/topics"
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the dashboard under a Host it does not know: %d, want 403 (the test's premise)", resp.StatusCode)
	}
}
