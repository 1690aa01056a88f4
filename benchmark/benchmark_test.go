package benchmark

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// short returns a configuration for a run of about a second.
func short(mode Mode) Config {
	return Config{Mode: mode, Duration: time.Second, Warmup: 300 * time.Millisecond, Producers: 2, Consumers: 2, Queues: 4, Inflight: 4, Size: 256}
}

func TestStoreModeMeasures(t *testing.T) {
	var out bytes.Buffer
	c := short(ModeStore)
	c.Out = &out
	c.HdrOut = filepath.Join(t.TempDir(), "run.hlog")
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages == 0 || res.MsgsPerSec <= 0 || res.Errors != 0 {
		t.Fatalf("result %+v", res)
	}
	if res.SendLatency.Count == 0 || res.SendLatency.P50 <= 0 || res.SendLatency.Max < res.SendLatency.P99 {
		t.Fatalf("send latency %+v", res.SendLatency)
	}
	if res.Consumed == 0 || res.E2ELatency.Count == 0 {
		t.Fatalf("consumers measured nothing: %+v", res)
	}
	if !strings.Contains(out.String(), "msgs/s") || !strings.Contains(out.String(), "send-to-ack") {
		t.Fatalf("output lacks the per-second lines or the summary:\n%s", out.String())
	}
	log, err := os.ReadFile(c.HdrOut)
	if err != nil || !bytes.Contains(log, []byte("#[StartTime:")) || !bytes.Contains(log, []byte("Tag=send")) {
		t.Fatalf("hdr log missing or malformed (%v):\n%.300s", err, log)
	}
	var line bytes.Buffer
	if err := PrintJSON(&line, res); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(line.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"mode", "messages", "errors", "msgs_per_sec", "mib_per_sec", "send_latency_us", "e2e_latency_us"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("JSON lacks %q: %s", k, line.String())
		}
	}
	for _, k := range []string{"p50", "p90", "p99", "p999", "p9999", "max"} {
		if _, ok := m["send_latency_us"].(map[string]any)[k]; !ok {
			t.Fatalf("send_latency_us lacks %q", k)
		}
	}
}

func TestFixedRateReportsDelayAndReach(t *testing.T) {
	c := short(ModeStore)
	c.Out = &bytes.Buffer{}
	c.Rate = 2000
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if res.TargetRate != 2000 || !res.RateReached {
		t.Fatalf("2,000 msgs/s not reached on the store: %+v", res)
	}
	if res.SendDelay.Count == 0 {
		t.Fatal("fixed-rate run recorded no send delay")
	}
	if res.MsgsPerSec > 2600 {
		t.Fatalf("rate limit not applied: %.0f msgs/s", res.MsgsPerSec)
	}
}

func TestConsumeModeDrainsBacklog(t *testing.T) {
	c := short(ModeConsume)
	c.Mode = ModeStore // the store target with the backlog workload
	c.Out = &bytes.Buffer{}
	c.Messages = 20_000
	tgt, err := openStoreTarget(mustDefaults(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.close()
	cc := mustDefaults(t, c)
	res, err := measureBacklog(context.Background(), cc, tgt, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Consumed < 20_000 || res.ConsumeMsgsPerSec <= 0 {
		t.Fatalf("drained %d of 20000: %+v", res.Consumed, res)
	}
}

func mustDefaults(t *testing.T, c Config) Config {
	t.Helper()
	d, err := c.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []Config{{Mode: "bogus"}, {Size: 4}, {Flush: "maybe"}, {Producers: -1}} {
		if _, err := c.withDefaults(); err == nil {
			t.Fatalf("config %+v accepted", c)
		}
	}
}

func TestBrokerModesAgainstEmbeddedBroker(t *testing.T) {
	for _, mode := range []Mode{ModeProduce, ModeE2E, ModeConsume} {
		t.Run(string(mode), func(t *testing.T) {
			var out bytes.Buffer
			c := short(mode)
			c.Out = &out
			c.DataDir = t.TempDir()
			if mode == ModeConsume {
				c.Messages = 5_000
			}
			res, err := Run(context.Background(), c)
			if err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if res.Messages == 0 || res.Errors != 0 {
				t.Fatalf("result %+v\n%s", res, out.String())
			}
			switch mode {
			case ModeProduce:
				if res.SendLatency.Count == 0 || res.Consumed != 0 {
					t.Fatalf("produce: %+v", res)
				}
			case ModeE2E:
				if res.Consumed == 0 || res.E2ELatency.Count == 0 {
					t.Fatalf("e2e consumed nothing: %+v\n%s", res, out.String())
				}
			case ModeConsume:
				if res.Consumed < 5_000 {
					t.Fatalf("drained %d of 5000\n%s", res.Consumed, out.String())
				}
			}
		})
	}
}

func TestFindMaxOnTheStore(t *testing.T) {
	c := short(ModeStore)
	c.Out = &bytes.Buffer{}
	c.FindMax = true
	c.Duration = 500 * time.Millisecond
	c.Warmup = 100 * time.Millisecond
	c.MaxP99 = 50 * time.Millisecond
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if res.MaxRate <= 0 {
		t.Fatalf("find-max found no rate: %+v\n%s", res, c.Out.(*bytes.Buffer).String())
	}
}
