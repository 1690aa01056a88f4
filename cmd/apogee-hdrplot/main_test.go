package main

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/benchmark"
)

// TestPlotFromABenchmarkLog runs a short benchmark with --hdr-out's
// equivalent, then the command on its log as a user would: a PNG of the
// distribution, and the .hgrm text with --percentiles.
func TestPlotFromABenchmarkLog(t *testing.T) {
	dir := t.TempDir()
	hlog := filepath.Join(dir, "run.hlog")
	_, err := benchmark.Run(context.Background(), benchmark.Config{Mode: benchmark.ModeStore, Duration: time.Second,
		Warmup: 200 * time.Millisecond, Producers: 2, Consumers: 2, Queues: 2, Size: 128, Rate: 5000,
		HdrOut: hlog, Out: &bytes.Buffer{}, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "apogee-hdrplot")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	img := filepath.Join(dir, "lat.png")
	cmd := exec.Command(bin, "-o", img, "--title", "store at 5000 msgs/s", "--tags", "send,e2e,delay", "--percentiles", hlog)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("apogee-hdrplot: %v\n%s", err, out)
	}
	for _, want := range []string{"# send (values in ms)", "# e2e (values in ms)", "# delay (values in ms)", "Value\tPercentile\tTotalCount\t1/(1-Percentile)", "#[Max     ="} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("--percentiles output lacks %q:\n%s", want, out)
		}
	}
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	// Two logs compare side by side; a tag no log has is an error.
	if out, err := exec.Command(bin, "-o", img, "--labels", "a,b", hlog, hlog).CombinedOutput(); err != nil {
		t.Fatalf("two logs: %v\n%s", err, out)
	}
	if err := exec.Command(bin, "-o", img, "--tags", "nope", hlog).Run(); err == nil {
		t.Fatal("a missing tag was accepted")
	}
	if out, err := exec.Command(bin, "--version").Output(); err != nil || !strings.HasPrefix(string(out), "apogee-hdrplot ") {
		t.Fatalf("--version: %v %q", err, out)
	}
}
