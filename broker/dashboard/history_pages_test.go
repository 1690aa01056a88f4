package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/dashboard"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/wait"
)

// TestDecodeTraces: the 4.x clients' records (the Go client's Pub,
// SubBefore and SubAfter as it writes them; Java's EndTransaction) decode
// field by field; "null" keys are empty; a record of an unknown type is
// kept with its fields.
func TestDecodeTraces(t *testing.T) {
	const c, f = "\x01", "\x02"
	body := strings.Join([]string{"Pub", "1700000000123", "DefaultRegion", "pg", "Orders", "MSGID1", "tagA", "k1", "10.0.0.1:10911", "42", "7", "0", "OFFSETID", "true", "10.0.0.9"}, c) + f +
		strings.Join([]string{"SubBefore", "1700000000200", "DefaultRegion", "cg", "req-1", "MSGID1", "0", "null", "10.0.0.8"}, c) + f +
		strings.Join([]string{"SubAfter", "req-1", "MSGID1", "3", "false", "null", "1", "1700000000203", "cg"}, c) + f +
		strings.Join([]string{"EndTransaction", "1700000000300", "DefaultRegion", "pg", "Orders", "MSGID2", "", "", "10.0.0.1:10911", "1", "tx-9", "COMMIT_MESSAGE", "true"}, c) + f +
		strings.Join([]string{"Recall", "x", "y"}, c) + f
	ev := dashboard.DecodeTraces([]byte(body))
	if len(ev) != 5 {
		t.Fatalf("%d records: %+v", len(ev), ev)
	}
	pub, before, after, end, other := ev[0], ev[1], ev[2], ev[3], ev[4]
	if pub.Event != "sent" || pub.TimeMs != 1700000000123 || pub.Group != "pg" || pub.Topic != "Orders" || pub.MsgID != "MSGID1" ||
		pub.Tags != "tagA" || pub.Keys != "k1" || pub.StoreHost != "10.0.0.1:10911" || pub.BodyLength != "42" || pub.CostMs != "7" ||
		pub.MsgType != "normal" || pub.OffsetMsgID != "OFFSETID" || pub.Success != "true" || pub.ClientHost != "10.0.0.9" {
		t.Errorf("Pub: %+v", pub)
	}
	if before.Group != "cg" || before.RequestID != "req-1" || before.RetryTimes != "0" || before.Keys != "" || before.ClientHost != "10.0.0.8" {
		t.Errorf("SubBefore: %+v", before)
	}
	if after.RequestID != "req-1" || after.CostMs != "3" || after.Success != "false" || after.ContextCode != "1" || after.TimeMs != 1700000000203 || after.Group != "cg" {
		t.Errorf("SubAfter: %+v", after)
	}
	if end.TransactionID != "tx-9" || end.TransactionEnd != "COMMIT_MESSAGE (by a check)" || end.MsgType != "transaction half" {
		t.Errorf("EndTransaction: %+v", end)
	}
	if other.Type != "Recall" || other.Keys != "x y" {
		t.Errorf("unknown record: %+v", other)
	}
}

// startSampled runs a broker (with a trace topic) and a dashboard sampling
// every 20 ms; it returns the broker's address and the dashboard's server.
func startSampled(t *testing.T) (string, *httptest.Server) {
	t.Helper()
	b, addr := runBroker(t, dashboard.DefaultTraceTopic)
	return addr, serve(t, b, dashboard.Options{SampleInterval: 20 * time.Millisecond,
		SendLatency: func() ([]float64, []uint64) { return []float64{1, 10}, []uint64{5, 1, 0} }})
}

type apiFrame struct {
	Res    string  `json:"res"`
	Times  []int64 `json:"times"`
	Series []struct {
		Kind   string     `json:"kind"`
		Name   string     `json:"name"`
		Values []*float64 `json:"values"`
	} `json:"series"`
}

// fetch GETs url and returns the response (its body read and closed) and
// its body.
func fetch(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// getJSON GETs url and decodes its JSON answer into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, body := fetch(t, url)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %s %s", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatal(err)
	}
}

// TestHistoryAPI: after sends, /api/history holds the topic's put rate
// (above 0 in some sample), the broker's series in their order, no
// latency where the histogram did not move (null), and one topic when
// names filter; every series as long as the time axis.
func TestHistoryAPI(t *testing.T) {
	addr, srv := startSampled(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	prod := newProducer(t, addr)
	for range 20 {
		if _, err := prod.SendSync(ctx, &client.Message{Topic: "HistTopic", Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	var f apiFrame
	wait.For(t, "HistTopic's put rate in the history", func() error {
		f = apiFrame{}
		getJSON(t, srv.URL+"/api/history?kind=put&name=HistTopic", &f)
		if len(f.Series) != 1 || f.Series[0].Name != "HistTopic" {
			return fmt.Errorf("series %+v", f.Series)
		}
		for _, v := range f.Series[0].Values {
			if v != nil && *v > 0 {
				return nil
			}
		}
		return fmt.Errorf("no sample above 0 in %d", len(f.Times))
	})
	if f.Res != "s" || len(f.Series[0].Values) != len(f.Times) {
		t.Errorf("res %q, %d values for %d times", f.Res, len(f.Series[0].Values), len(f.Times))
	}
	var b apiFrame
	getJSON(t, srv.URL+"/api/history?kind=broker", &b)
	var names []string
	for _, s := range b.Series {
		names = append(names, s.Name)
		if s.Name == "send_p50" {
			for _, v := range s.Values {
				if v != nil {
					t.Errorf("send_p50 %v with a histogram that never moved", *v)
				}
			}
		}
	}
	if got := strings.Join(names, ","); got != "put,get,send_reqs,send_p50,send_p99,disk" {
		t.Errorf("broker series %s", got)
	}
	var m apiFrame
	getJSON(t, srv.URL+"/api/history?res=m", &m)
	if m.Res != "m" {
		t.Errorf("res=m answered %q", m.Res)
	}
}

// TestStaticAndPolicy: the chart library and the dashboard's script are
// served from the binary, with their types; the pages load them from
// 'self' only (the policy forbids any other origin and inline scripts);
// a name not embedded is 404; /api/history is behind the Host check.
func TestStaticAndPolicy(t *testing.T) {
	_, srv := startSampled(t)
	for path, typ := range map[string]string{"/static/uPlot.iife.min.js": "text/javascript", "/static/dash.js": "text/javascript",
		"/static/uPlot.min.css": "text/css", "/static/uPlot.LICENSE": "text/plain"} {
		resp, body := fetch(t, srv.URL+path)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), typ) || len(body) == 0 {
			t.Errorf("GET %s: %s %q, %d bytes", path, resp.Status, resp.Header.Get("Content-Type"), len(body))
		}
	}
	if resp, _ := fetch(t, srv.URL+"/static/nothing.js"); resp.StatusCode != 404 {
		t.Errorf("GET /static/nothing.js: %s", resp.Status)
	}
	resp, page := fetch(t, srv.URL+"/")
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "script-src 'self' 'unsafe-inline'") ||
		!strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("policy %q", csp)
	}
	if strings.Contains(string(page), "<script>") || strings.Contains(string(page), "https://") {
		t.Errorf("the page has an inline script or another origin:\n%s", page)
	}
	if code, _ := request(t, http.DefaultClient, srv, "GET", "/api/history", "evil.example", nil, nil); code != http.StatusForbidden {
		t.Errorf("/api/history with Host evil.example: %d", code)
	}
}

// TestReplicationAndTracePages: a classic master alone: the broker group
// page shows it as master with no slave; the trace page finds the trace
// topic (created at start) and says when an id has no records.
func TestReplicationAndTracePages(t *testing.T) {
	_, srv := startSampled(t)
	br := browser{t, srv.URL, http.DefaultClient}
	page := br.get("/replication", 200)
	for _, want := range []string{`data-k="mode">classic<`, `data-k="role">ASYNC_MASTER<`, "No slave is connected", "(this broker)"} {
		if !strings.Contains(page, want) {
			t.Errorf("/replication lacks %q:\n%s", want, page)
		}
	}
	page = br.get("/trace?id=NOSUCHID", 200)
	if !strings.Contains(page, `id="trace-none"`) || strings.Contains(page, "no-trace-topic") {
		t.Errorf("/trace of an unknown id:\n%s", page)
	}
}
