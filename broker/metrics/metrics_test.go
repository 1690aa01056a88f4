package metrics

import (
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/store"
)

// newCore starts a core in a temporary directory with 10 messages on
// queue 0 of topic "T" and a group "g" that committed 4 of them.
func newCore(t *testing.T) *core.Core {
	t.Helper()
	c, err := core.New(core.Options{DataDir: t.TempDir(), AdvertiseAddr: "127.0.0.1:10911",
		Store:  store.Options{SegmentSize: 8 << 20, ConsumeQueueEntries: 4096, IndexSlots: 1024, IndexMaxEntries: 8192, CleanInterval: -1},
		Logger: testlog.New(t, "core")})
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(func() { c.Shutdown() })
	for range 10 {
		var res core.SendResult
		if err := c.Send(&core.SendRequest{Topic: []byte("T"), QueueID: 0, Body: []byte("0123456789"),
			BornTimestamp: time.Now().UnixMilli(), BornHost: netip.MustParseAddrPort("127.0.0.1:1")}, &res); err != nil {
			t.Fatal(err)
		}
	}
	wait.Equal(t, "T/0's 10 messages dispatched", 10, func() int64 { return c.MaxOffset("T", 0) })
	if err := c.UpdateConsumerOffset([]byte("T"), []byte("g"), 0, 4); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestExporterReadsTheCore(t *testing.T) {
	c := newCore(t)
	e, err := New(Options{Core: c, RPC: NewRPCLatency("remoting", ConstLabels(c))})
	if err != nil {
		t.Fatal(err)
	}
	fams, err := e.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.Metric {
			labels := []string{}
			for _, l := range m.Label {
				if l.GetName() == "topic" || l.GetName() == "consumer_group" {
					labels = append(labels, l.GetValue())
				}
			}
			k := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			got[k] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	for k, want := range map[string]float64{
		"rocketmq_messages_in_total{T}":       10,
		"rocketmq_throughput_in_total{T}":     100,
		"rocketmq_consumer_lag_messages{g,T}": 6, // labels in name order
		"apogee_topics{}":                     float64(len(mustTopics(c))),
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	if got["rocketmq_consumer_lag_latency{g,T}"] <= 0 {
		t.Errorf("lag latency %v, want > 0 with a backlog", got["rocketmq_consumer_lag_latency{g,T}"])
	}
}

func mustTopics(c *core.Core) []string {
	cfgs, _ := c.Admin().Topics()
	out := make([]string, len(cfgs))
	for i, t := range cfgs {
		out[i] = t.TopicName
	}
	return out
}

// TestGrafanaDashboardSeries: every series docs/grafana-apogee.json
// queries is one the exporter serves.
func TestGrafanaDashboardSeries(t *testing.T) {
	c := newCore(t)
	e, err := New(Options{Core: c, RPC: NewRPCLatency("remoting", ConstLabels(c)), Remoting: nil})
	if err != nil {
		t.Fatal(err)
	}
	// Every series the exporter can serve, whether or not it has a value
	// now (a counter of pulls has none before the first pull).
	have := map[string]bool{}
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		e.reg.Describe(ch)
		close(ch)
	}()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			have[m[1]] = true
		}
	}
	// The remoting series come with Options.Remoting, as the binary sets it.
	for _, d := range []string{"apogee_remoting_connections", "apogee_remoting_budget_waits_total"} {
		have[d] = true
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "grafana-apogee.json"))
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`\b(?:rocketmq|apogee)_[a-z_]+`).FindAllString(string(b), -1)
	if len(names) < 20 {
		t.Fatalf("only %d series names in the dashboard", len(names))
	}
	for _, n := range names {
		base := n
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if s, ok := strings.CutSuffix(n, suf); ok && have[s] {
				base = s
			}
		}
		if !have[base] {
			t.Errorf("the dashboard queries %s, which the exporter does not serve", n)
		}
	}
}
