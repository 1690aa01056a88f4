package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
)

var metricsLine = regexp.MustCompile(`msg="metrics and dashboard" addr=(\S+)`)

// metricsAddr is the --metrics-listen address of the ready file, which the
// broker's log line names too (it is logged before the ready file is
// written).
func (p *process) metricsAddr(t *testing.T) string {
	t.Helper()
	m := metricsLine.FindStringSubmatch(p.RunLog())
	if m == nil || m[1] != p.Ready.Metrics {
		t.Fatalf("ready file's metrics %q, log line %v:\n%s", p.Ready.Metrics, m, p.RunLog())
	}
	return p.Ready.Metrics
}

// scrape reads /metrics and parses it with Prometheus's own text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type %q", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value finds the series of name whose labels include want and returns its
// value (a counter's, a gauge's, or a histogram's count); ok is false when
// there is none.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	var sum float64
	found := false
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Summary != nil:
			sum += float64(m.Summary.GetSampleCount())
		}
	}
	return sum, found
}

// TestMetricsCountSendsAndPulls runs the broker binary with
// --metrics-listen, sends 40 messages, pulls them all with a group that
// commits 15 of them, and checks the scraped counters against that.
func TestMetricsCountSendsAndPulls(t *testing.T) {
	bin := buildBinary(t)
	p := start(t, bin, "--namesrv-listen", "", "--data-dir", t.TempDir(),
		"--metrics-listen", "127.0.0.1:0", "--cluster", "MetricsCluster")
	defer p.stop(t, syscall.SIGTERM)
	maddr := p.metricsAddr(t)

	const topic, group, n = "MetricsTopic", "metrics-group", 40
	body := strings.Repeat("m", 100)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod, err := client.NewProducer(client.NameServer(p.addr), client.Selector(client.ManualSelector()), client.Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close(context.Background())
	for i := range n {
		q := client.MessageQueue{Topic: topic, BrokerName: core.DefaultBrokerName, QueueID: int32(i % 4)}
		if _, err := prod.SendSync(ctx, &client.Message{Topic: topic, Queue: &q, Body: []byte(body)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}

	cons, err := client.NewPullConsumer(client.NameServer(p.addr), client.ConsumerGroup(group),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.AutoCommit(false), client.Logger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer cons.Close(context.Background())
	var qs []client.MessageQueue
	for i := int32(0); i < 4; i++ {
		qs = append(qs, client.MessageQueue{Topic: topic, BrokerName: core.DefaultBrokerName, QueueID: i})
	}
	if err := cons.Assign(ctx, qs); err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < n {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		msgs, err := cons.Poll(pctx)
		pcancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("poll: %v", err)
		}
		got += len(msgs)
		if ctx.Err() != nil {
			t.Fatalf("pulled %d of %d", got, n)
		}
	}
	// Commit 10 of queue 0 and 5 of queue 1: a lag of 25.
	if err := cons.CommitOffsets(ctx, map[client.MessageQueue]int64{qs[0]: 10, qs[1]: 5, qs[2]: 0, qs[3]: 0}); err != nil {
		t.Fatal(err)
	}

	fams := scrape(t, maddr)
	tl := map[string]string{"topic": topic}
	gl := map[string]string{"topic": topic, "consumer_group": group}
	check := func(name string, labels map[string]string, want float64) {
		t.Helper()
		v, ok := value(fams, name, labels)
		if !ok || v != want {
			t.Errorf("%s%v = %v (present %v), want %v", name, labels, v, ok, want)
		}
	}
	check("rocketmq_messages_in_total", tl, n)
	check("rocketmq_throughput_in_total", tl, n*float64(len(body)))
	check("rocketmq_messages_out_total", gl, n)
	check("rocketmq_consumer_lag_messages", gl, 25)
	check("rocketmq_consumer_ready_messages", gl, 25)
	check("rocketmq_producer_connections", map[string]string{"language": "GO"}, 1)
	check("rocketmq_consumer_connections", map[string]string{"consumer_group": group}, 1)
	if v, _ := value(fams, "rocketmq_consumer_lag_latency", gl); v <= 0 {
		t.Errorf("rocketmq_consumer_lag_latency = %v, want > 0 with a backlog", v)
	}
	// Every series carries the broker's constant labels.
	check("rocketmq_messages_in_total", map[string]string{"topic": topic, "cluster": "MetricsCluster", "node_type": "broker", "node_id": core.DefaultBrokerName}, n)
	// The send requests were timed: SEND_MESSAGE (10) or its V2 (310).
	sends := 0.0
	for _, code := range []string{"10", "310"} {
		v, _ := value(fams, "rocketmq_rpc_latency", map[string]string{"request_code": code, "response_code": "0", "protocol_type": "remoting"})
		sends += v
	}
	if sends < n {
		t.Errorf("rocketmq_rpc_latency counts %v sends, want at least %d", sends, n)
	}
	for _, name := range []string{"apogee_commitlog_segments", "apogee_commitlog_bytes", "apogee_disk_usage_ratio", "apogee_uptime_seconds"} {
		if v, ok := value(fams, name, nil); !ok || v <= 0 {
			t.Errorf("%s = %v (present %v), want > 0", name, v, ok)
		}
	}
	if v, _ := value(fams, "apogee_send_requests_total", nil); v < n {
		t.Errorf("apogee_send_requests_total = %v, want >= %d", v, n)
	}
	for _, name := range []string{"apogee_flush_duration_seconds", "apogee_dispatch_lag_bytes", "apogee_timers_pending",
		"apogee_delayed_messages_pending", "rocketmq_half_messages", "apogee_remoting_connections", "go_goroutines"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}

	// The dashboard on the same listener: the group's page shows the same
	// lag, and an action without the confirmation's token is refused.
	page := get(t, "http://"+maddr+"/group?g="+group)
	if !strings.Contains(page, `id="lag-total">25<`) {
		t.Errorf("group page lacks a total lag of 25:\n%s", page)
	}
	resp, err := http.PostForm("http://"+maddr+"/do", url.Values{"action": {"create-topic"}, "topic": {"Forged"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST /do without a token: %d, want 403", resp.StatusCode)
	}
}

func get(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", u, resp.StatusCode, b)
	}
	return string(b)
}

// TestMetricsListenConfigKeys: broker.conf's metricsExporterType=PROM
// starts the listener on metricsPromExporterHost:metricsPromExporterPort
// (RocketMQ 5's keys, port 5557 by default); without it (the default)
// there is none, and --metrics-listen wins over the file.
func TestMetricsListenConfigKeys(t *testing.T) {
	c, err := parseConfig([]string{})
	if err != nil {
		t.Fatal(err)
	}
	if c.metricsListen != "" {
		t.Fatalf("default metrics listener %q, want off", c.metricsListen)
	}
	for body, want := range map[string]string{
		"metricsExporterType=PROM\n": "0.0.0.0:5557",
		"metricsExporterType=PROM\nmetricsPromExporterHost=127.0.0.1\nmetricsPromExporterPort=0\n":    "127.0.0.1:0",
		"metricsExporterType=PROM\nmetricsPromExporterHost=127.0.0.1\nmetricsPromExporterPort=9100\n": "127.0.0.1:9100",
		"metricsExporterType=DISABLE\nmetricsPromExporterPort=9100\n":                                 "",
	} {
		conf := filepath.Join(t.TempDir(), "broker.conf")
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := parseConfig([]string{"-c", conf})
		if err != nil || c.metricsListen != want {
			t.Errorf("%q: metrics listener %q (%v), want %q", body, c.metricsListen, err, want)
		}
		c, err = parseConfig([]string{"-c", conf, "--metrics-listen", "127.0.0.1:9999"})
		if err != nil || c.metricsListen != "127.0.0.1:9999" {
			t.Errorf("%q with the flag: %q (%v), want the flag's", body, c.metricsListen, err)
		}
	}
	conf := filepath.Join(t.TempDir(), "broker.conf")
	os.WriteFile(conf, []byte("metricsExporterType=OTLP_GRPC\n"), 0o644)
	if _, err := parseConfig([]string{"-c", conf}); err == nil {
		t.Error("metricsExporterType=OTLP_GRPC accepted")
	}
}

// The metrics and dashboard listener follows --tls-mode: enforcing serves
// https only, with the broker's certificate.
func TestMetricsListenerTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	pki := tlstest.Write(t, t.TempDir())
	p := start(t, buildBinary(t), "--namesrv-listen", "", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--metrics-listen", "127.0.0.1:0", "--tls-mode", "enforcing", "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey)
	defer p.stop(t, syscall.SIGTERM)
	addr := p.metricsAddr(t)
	ca, err := tlsconf.ClientConfig{CAFile: pki.CA, ServerName: "127.0.0.1"}.Load()
	if err != nil {
		t.Fatal(err)
	}
	secure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: ca}}
	resp, err := secure.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "rocketmq_") {
		t.Fatalf("https scrape: %d\n%.300s", resp.StatusCode, body)
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	if resp, err := plain.Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain http served in enforcing mode")
		}
	}
}
