package dashboard

// Issue 32 item 2: the dashboard with history, in Chromium against broker
// processes. The charts (uPlot, from the binary) are drawn with data after
// traffic; auto-refresh updates a page without a navigation; a message
// sent and consumed by the official Go client with tracing on has its
// trace on /trace; the broker group page of a controller-mode group (a
// controller process and two brokers) shows its members, roles, epochs
// and SyncStateSet, on the master and on the slave.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	rmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/chromedp/chromedp"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
)

func init() { rlog.SetLogLevel("error") }

// attr reads an attribute of the first element sel matches ("" when it
// has none).
func attr(t *testing.T, ctx context.Context, sel, name string) string {
	t.Helper()
	var v string
	var ok bool
	run(t, ctx, "attribute "+name+" of "+sel, chromedp.AttributeValue(sel, name, &v, &ok, chromedp.ByQuery))
	return v
}

// chartMax waits until the chart sel has drawn series name with a sample
// above 0 and returns the chart's maxima by series.
func chartMax(t *testing.T, ctx context.Context, sel, name string) map[string]float64 {
	t.Helper()
	var most map[string]float64
	wait.For(t, sel+" drawn with "+name+" above 0", func() error {
		var raw string
		var ok bool
		if err := chromedp.Run(ctx, chromedp.AttributeValue(sel, "data-max", &raw, &ok, chromedp.ByQuery)); err != nil {
			return err
		}
		if !ok || raw == "" {
			return fmt.Errorf("not drawn yet (error %q)", attr(t, ctx, sel, "data-error"))
		}
		most = map[string]float64{}
		if err := json.Unmarshal([]byte(raw), &most); err != nil {
			return err
		}
		if most[name] <= 0 {
			return fmt.Errorf("maxima %s", raw)
		}
		return nil
	})
	// A canvas: uPlot drew it.
	var n int
	run(t, ctx, "canvas of "+sel, chromedp.Evaluate(fmt.Sprintf(`document.querySelectorAll(%q).length`, sel+" canvas"), &n))
	if n == 0 {
		t.Errorf("%s: no canvas", sel)
	}
	return most
}

// samples is how many per-second samples the dashboard's history holds
// (GET /api/history).
func samples(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/api/history?kind=broker&name=put")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Times []int64 `json:"times"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatalf("/api/history: %v", err)
	}
	return len(h.Times)
}

func TestDashboardHistoryInChromium(t *testing.T) {
	ctx := browser(t)
	p := startBrokerProc(t, "--namesrv-listen", "127.0.0.1:0", "--trace-topic-enable")
	addr, base, ns := p.Ready.Advertise, "http://"+p.Ready.Metrics, p.Ready.Namesrv
	actx, cancel := context.WithTimeout(context.Background(), 3*wait.DefaultTimeout) // a bound on a hung test only
	defer cancel()

	// Traffic: 300 messages to Charts while a group consumes them.
	prod, err := client.NewProducer(client.NameServer(addr), client.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close(context.Background())
	send := func(topic string, n int) {
		t.Helper()
		for i := range n {
			if _, err := prod.SendSync(actx, &client.Message{Topic: topic, Body: []byte(fmt.Sprint("chart-", i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var consumed atomic.Int64
	cons, err := client.NewPushConsumer(client.NameServer(addr), client.ConsumerGroup("charting"), client.Subscribe("Charts", "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.Logger(quiet),
		client.WithConcurrentListener(func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			consumed.Add(int64(len(msgs)))
			return client.ConsumeSuccess
		}))
	if err != nil {
		t.Fatal(err)
	}
	send("Charts", 1) // the topic exists before the consumer subscribes
	if err := cons.Start(actx); err != nil {
		t.Fatal(err)
	}
	defer cons.Close(context.Background())
	// Ten bursts, one per history sample, growing: 10, 20, ... 100.
	total := 1
	for i := range 10 {
		n := samples(t, base)
		send("Charts", 10*(i+1))
		total += 10 * (i + 1)
		wait.For(t, "the next history sample", func() error {
			if m := samples(t, base); m <= n {
				return fmt.Errorf("%d samples, %d before the burst", m, n)
			}
			return nil
		})
	}
	wait.Equal(t, "charting to consume everything", int64(total), consumed.Load)

	// The overview's charts: put and get rates above 0, the send latency
	// percentiles, the disk ratio.
	run(t, ctx, "overview", chromedp.Navigate(base+"/?refresh=2"), chromedp.WaitVisible("#chart-rates", chromedp.ByQuery))
	rates := chartMax(t, ctx, "#chart-rates", "put")
	if rates["get"] <= 0 {
		wait.For(t, "the get rate drawn", func() error {
			if m := chartMax(t, ctx, "#chart-rates", "put"); m["get"] <= 0 {
				return fmt.Errorf("maxima %v", m)
			}
			return nil
		})
	}
	lat := chartMax(t, ctx, "#chart-latency", "send_p99")
	if lat["send_p50"] <= 0 || lat["send_p50"] > lat["send_p99"] {
		t.Errorf("send latency maxima %v: p50 should be above 0 and at most p99", lat)
	}
	chartMax(t, ctx, "#chart-disk", "disk")
	chartMax(t, ctx, "#chart-topics", "Charts")
	shot(t, ctx, "img/dashboard-charts.png")
	// The hour per minute: the charts reload from the minute ring (at
	// most the minutes begun since the broker started).
	setRes := func(res string) {
		t.Helper()
		run(t, ctx, "resolution "+res, chromedp.Evaluate(fmt.Sprintf(`(() => { const s = document.getElementById("res"); s.value = %q; s.dispatchEvent(new Event("change")); return true })()`, res), nil))
		wait.For(t, "the charts at resolution "+res, func() error {
			var got, n string
			var ok bool
			if err := chromedp.Run(ctx, chromedp.AttributeValue("#chart-rates", "data-res", &got, &ok, chromedp.ByQuery),
				chromedp.AttributeValue("#chart-rates", "data-samples", &n, &ok, chromedp.ByQuery)); err != nil {
				return err
			}
			if got != res {
				return fmt.Errorf("resolution %q, %s samples", got, n)
			}
			if res == "m" {
				if k, _ := strconv.Atoi(n); k > 2 {
					return fmt.Errorf("%d minute samples within the test's first minutes", k)
				}
			}
			return nil
		})
	}
	setRes("m")
	setRes("s")

	// Auto-refresh: more messages show on the page without a navigation.
	before := text(t, ctx, `#info td[data-k="msgPutTotalTodayNow"]`)
	n0, _ := strconv.Atoi(before)
	send("Charts", 25)
	wait.For(t, "the overview to refresh itself", func() error {
		var s string
		if err := chromedp.Run(ctx, chromedp.Text(`#info td[data-k="msgPutTotalTodayNow"]`, &s, chromedp.ByQuery)); err != nil {
			return err
		}
		if n, _ := strconv.Atoi(strings.TrimSpace(s)); n < n0+25 {
			return fmt.Errorf("msgPutTotalTodayNow %s, was %s", s, before)
		}
		return nil
	})
	if r := attr(t, ctx, "body", "data-refreshes"); r == "" || r == "0" {
		t.Errorf("body's data-refreshes %q after the page updated itself", r)
	}

	// The topic's and the group's pages draw their own series.
	run(t, ctx, "topic", chromedp.Navigate(base+"/topic?t=Charts"), chromedp.WaitVisible("#chart-topic", chromedp.ByQuery))
	chartMax(t, ctx, "#chart-topic", "Charts")
	run(t, ctx, "group", chromedp.Navigate(base+"/group?g=charting"), chromedp.WaitVisible("#chart-group-get", chromedp.ByQuery))
	chartMax(t, ctx, "#chart-group-get", "charting")
	shot(t, ctx, "img/dashboard-group-charts.png")
	// The lag chart: a group with offsets and no members lags.
	commitOffsets(t, actx, addr, "lagging", map[client.MessageQueue]int64{{Topic: "Charts", BrokerName: brokerName, QueueID: 0}: 0})
	run(t, ctx, "groups", chromedp.Navigate(base+"/groups"), chromedp.WaitVisible("#chart-lag", chromedp.ByQuery))
	chartMax(t, ctx, "#chart-lag", "lagging")

	// A traced send and consumption with the official Go client.
	tc := &primitive.TraceConfig{TraceTopic: "RMQ_SYS_TRACE_TOPIC", Access: primitive.Local, Resolver: primitive.NewPassthroughResolver([]string{ns})}
	tp, err := rmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})), producer.WithGroupName("traced-producer"),
		producer.WithTrace(tc), producer.WithRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(); err != nil {
		t.Fatal(err)
	}
	defer tp.Shutdown()
	msg := primitive.NewMessage("Traced", []byte("traced body"))
	msg.WithKeys([]string{"trace-key-1"})
	msg.WithTag("audit")
	var res *primitive.SendResult
	wait.For(t, "a traced send", func() error {
		var err error
		res, err = tp.SendSync(actx, msg)
		if err == nil && res.Status != primitive.SendOK {
			err = fmt.Errorf("status %v", res.Status)
		}
		return err
	})
	var got atomic.Int64
	tcons, err := rmq.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})), consumer.WithGroupName("traced-consumer"),
		consumer.WithTrace(tc), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	if err := tcons.Subscribe("Traced", consumer.MessageSelector{}, func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		got.Add(1)
		return consumer.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := tcons.Start(); err != nil {
		t.Fatal(err)
	}
	defer tcons.Shutdown()
	wait.Until(t, "the traced message consumed", func() bool { return got.Load() > 0 })

	wait.For(t, "the trace of "+res.MsgID+" with its send and its consumption", func() error {
		var s string
		if err := chromedp.Run(ctx, chromedp.Navigate(base+"/trace?id="+res.MsgID), chromedp.WaitVisible("#rendered", chromedp.ByQuery),
			chromedp.Evaluate(`Array.from(document.querySelectorAll('#trace-events td[data-k="event"]')).map(e => e.textContent).join("|")`, &s)); err != nil {
			return err
		}
		if !strings.Contains(s, "sent") || !strings.Contains(s, "consumed") {
			return fmt.Errorf("events %q", s)
		}
		return nil
	})
	if g := text(t, ctx, `#trace-events tr[data-key="Pub"] td[data-k="group"]`); g != "traced-producer" {
		t.Errorf("the send's group on the trace page: %q", g)
	}
	if g := text(t, ctx, `#trace-events tr[data-key="SubAfter"] td[data-k="group"]`); g != "traced-consumer" {
		t.Errorf("the consumption's group on the trace page: %q", g)
	}
	if s := text(t, ctx, `#trace-events tr[data-key="SubAfter"] td[data-k="success"]`); s != "true" {
		t.Errorf("the consumption's success: %q", s)
	}
	shot(t, ctx, "img/dashboard-trace.png")
	// The message page links to the trace.
	run(t, ctx, "message", chromedp.Navigate(base+"/messages?topic=Traced&id="+res.MsgID), chromedp.WaitVisible("a.trace-link", chromedp.ByQuery))
}

// TestDashboardControllerGroupInChromium: a controller and two brokers in
// controller mode; each broker's broker group page shows the group as the
// controller holds it (master, SyncStateSet of both, epochs), the
// master's its slave's acknowledged offset, and the charts work on both.
func TestDashboardControllerGroupInChromium(t *testing.T) {
	ctx := browser(t)
	bin, ctlBin := buildCmd(t, "apogee-broker"), buildCmd(t, "apogee-controller")
	ctls := proctest.StartControllers(t, ctlBin, 1)
	members := make([]*proctest.Proc, 2)
	for i := range members {
		members[i] = proctest.Start(t, fmt.Sprintf("apogee-broker-%d", i), bin,
			"--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--grpc-listen", "", "--namesrv-listen", "127.0.0.1:0",
			"--metrics-listen", "127.0.0.1:0", "--broker-name", "g1", "--cluster", "DashCluster",
			"--data-dir", t.TempDir(), "--enable-controller-mode", "--controller-addr", proctest.ControllerAddrs(ctls))
		t.Cleanup(members[i].StopClean)
	}
	actx, cancel := context.WithTimeout(context.Background(), 3*wait.DefaultTimeout) // a bound on a hung test only
	defer cancel()
	admin, err := client.NewAdmin(client.NameServer(members[0].Ready.Advertise), client.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	role := func(p *proctest.Proc) string {
		info, err := admin.BrokerRuntimeInfo(actx, p.Ready.Advertise)
		if err != nil {
			return err.Error()
		}
		return info["brokerRole"]
	}
	var master, slave *proctest.Proc
	wait.For(t, "a master and a slave in the SyncStateSet", func() error {
		r0, r1 := role(members[0]), role(members[1])
		switch {
		case r0 != "SLAVE" && r1 == "SLAVE":
			master, slave = members[0], members[1]
		case r1 != "SLAVE" && r0 == "SLAVE":
			master, slave = members[1], members[0]
		default:
			return fmt.Errorf("roles %s and %s", r0, r1)
		}
		info, err := admin.BrokerRuntimeInfo(actx, master.Ready.Advertise)
		if err != nil {
			return err
		}
		if s := info["syncStateSet"]; strings.Count(s, ",") != 1 {
			return fmt.Errorf("syncStateSet %q", s)
		}
		return nil
	})
	// Traffic on the master.
	prod, err := client.NewProducer(client.NameServer(master.Ready.Namesrv), client.InstanceName("group-producer"), client.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close(context.Background())
	wait.For(t, "sends to the master", func() error {
		for i := range 50 {
			if _, err := prod.SendSync(actx, &client.Message{Topic: "GroupTopic", Body: []byte(fmt.Sprint("m-", i))}); err != nil {
				return err
			}
		}
		return nil
	})

	mweb := "http://" + master.Ready.Metrics
	wait.For(t, "the master's broker group page: two members, both in the SyncStateSet, both alive", func() error {
		var rows, sset, alive string
		if err := chromedp.Run(ctx, chromedp.Navigate(mweb+"/replication"), chromedp.WaitVisible("#repl-members", chromedp.ByQuery),
			chromedp.Evaluate(`document.querySelectorAll('#repl-members tr[data-key]').length + ""`, &rows),
			chromedp.Text(`#controller td[data-k="sync-state-set"]`, &sset, chromedp.ByQuery),
			chromedp.Evaluate(`Array.from(document.querySelectorAll('#repl-members td[data-k="alive"]')).map(e => e.textContent.trim()).join(",")`, &alive)); err != nil {
			return err
		}
		if rows != "2" || strings.Count(sset, ",") != 1 || alive != "yes,yes" {
			return fmt.Errorf("%s member rows, SyncStateSet %q, alive %q", rows, sset, alive)
		}
		return nil
	})
	if m := text(t, ctx, `#repl-self td[data-k="mode"]`); m != "controller" {
		t.Errorf("mode %q", m)
	}
	masterID := text(t, ctx, `#repl-self td[data-k="self-id"]`)
	if got := text(t, ctx, fmt.Sprintf(`#repl-members tr[data-key="%s"] td[data-k="role"]`, masterID)); got != "MASTER" {
		t.Errorf("the master's row says %q", got)
	}
	if e := number(t, ctx, `#controller td[data-k="master-epoch"]`); e < 1 {
		t.Errorf("master epoch %d", e)
	}
	if n := number(t, ctx, `#epochs tr[data-key] td`); n < 1 {
		t.Errorf("epoch file's first epoch %d", n)
	}
	// The slave's acknowledged offset reaches the master's log end: lag 0.
	wait.For(t, "the slave's lag on the master's page to reach 0", func() error {
		var lag string
		if err := chromedp.Run(ctx, chromedp.Navigate(mweb+"/replication"), chromedp.WaitVisible("#repl-slaves", chromedp.ByQuery),
			chromedp.Text(`#repl-slaves td[data-k="lag"]`, &lag, chromedp.ByQuery)); err != nil {
			return err
		}
		if strings.TrimSpace(lag) != "0" {
			return fmt.Errorf("lag %q", lag)
		}
		return nil
	})
	shot(t, ctx, "img/dashboard-broker-group.png")

	// The slave's page: the same group, this broker a slave.
	sweb := "http://" + slave.Ready.Metrics
	run(t, ctx, "slave's broker group page", chromedp.Navigate(sweb+"/replication"), chromedp.WaitVisible("#repl-members", chromedp.ByQuery))
	if r := text(t, ctx, `#repl-self td[data-k="role"]`); r != "SLAVE" {
		t.Errorf("the slave's page says role %q", r)
	}
	if got := text(t, ctx, fmt.Sprintf(`#repl-members tr[data-key="%s"] td[data-k="role"]`, masterID)); got != "MASTER" {
		t.Errorf("the slave's page: the master's row says %q", got)
	}
	// Charts in both roles.
	run(t, ctx, "master's overview", chromedp.Navigate(mweb+"/"), chromedp.WaitVisible("#chart-rates", chromedp.ByQuery))
	chartMax(t, ctx, "#chart-rates", "put")
	run(t, ctx, "slave's overview", chromedp.Navigate(sweb+"/"), chromedp.WaitVisible("#chart-disk", chromedp.ByQuery))
	chartMax(t, ctx, "#chart-disk", "disk")
}

// TestDashboardClassicGroupInChromium: a classic master (with its embedded
// name server) and its slave: the master's broker group page lists both
// from the name server's table and the slave's acknowledged offset
// catching up; the slave's page and charts work too.
func TestDashboardClassicGroupInChromium(t *testing.T) {
	ctx := browser(t)
	master := startBrokerProc(t, "--namesrv-listen", "127.0.0.1:0")
	slave := startBrokerProc(t, "--broker-role", "SLAVE", "--broker-id", "1", "--ha-listen", "", "--namesrv", master.Ready.Namesrv)
	actx, cancel := context.WithTimeout(context.Background(), 3*wait.DefaultTimeout) // a bound on a hung test only
	defer cancel()
	prod, err := client.NewProducer(client.NameServer(master.Ready.Namesrv), client.InstanceName("classic-producer"), client.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close(context.Background())
	for i := range 40 {
		if _, err := prod.SendSync(actx, &client.Message{Topic: "Replicated", Body: []byte(fmt.Sprint("r-", i))}); err != nil {
			t.Fatal(err)
		}
	}
	mweb, sweb := "http://"+master.Ready.Metrics, "http://"+slave.Ready.Metrics
	wait.For(t, "the master's page: both members, the slave caught up", func() error {
		var rows, lag string
		if err := chromedp.Run(ctx, chromedp.Navigate(mweb+"/replication"), chromedp.WaitVisible("#repl-members", chromedp.ByQuery),
			chromedp.Evaluate(`document.querySelectorAll('#repl-members tr[data-key]').length + ""`, &rows),
			chromedp.Evaluate(`(document.querySelector('#repl-slaves td[data-k="lag"]') || {textContent: "none"}).textContent.trim()`, &lag)); err != nil {
			return err
		}
		if rows != "2" || lag != "0" {
			return fmt.Errorf("%s member rows, slave lag %q", rows, lag)
		}
		return nil
	})
	if m := text(t, ctx, `#repl-self td[data-k="mode"]`); m != "classic" {
		t.Errorf("mode %q", m)
	}
	if r := text(t, ctx, `#repl-members tr[data-key="1"] td[data-k="role"]`); r != "SLAVE" {
		t.Errorf("broker 1's role on the master's page: %q", r)
	}
	if a := number(t, ctx, `#repl-slaves td[data-k="acked"]`); a != number(t, ctx, `#repl-self td[data-k="written"]`) {
		t.Errorf("slave acknowledged %d, master's log end %d", a, number(t, ctx, `#repl-self td[data-k="written"]`))
	}
	run(t, ctx, "slave's broker group page", chromedp.Navigate(sweb+"/replication"), chromedp.WaitVisible("#repl-self", chromedp.ByQuery))
	if r := text(t, ctx, `#repl-self td[data-k="role"]`); r != "SLAVE" {
		t.Errorf("the slave's page says role %q", r)
	}
	run(t, ctx, "slave's overview", chromedp.Navigate(sweb+"/"), chromedp.WaitVisible("#chart-disk", chromedp.ByQuery))
	chartMax(t, ctx, "#chart-disk", "disk")
}
