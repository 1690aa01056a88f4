// Package dashboard tests the broker's built-in dashboard in a real
// headless browser: Debian's chromium, driven by chromedp over the DevTools
// protocol, against an apogee-broker process started with --metrics-listen.
// The pages' numbers are checked against the admin protocol's answers
// (Apogee's admin client), and the actions (create a topic, reset a
// group's offsets, resend a message to a consumer) are clicked through
// their confirmation and checked there too. Against a broker with
// --acl-file, a login as an ACL user (login_test.go): an admin acts, a
// user whose policies do not allow the action is refused.
//
// It is a module of its own so that the main module does not depend on
// chromedp. scripts/test.sh runs it (installing chromium with apt-get when
// it is missing). `go test -screenshots` rewrites the PNGs in ../docs.
package dashboard

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

var screenshots = flag.Bool("screenshots", false, "write the pages' screenshots to ../docs/dashboard-*.png and ../docs/img/dashboard-*.png")

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const brokerName = "broker-a"

var metricsLine = regexp.MustCompile(`msg="metrics and dashboard" addr=(\S+)`)

// startBroker builds apogee-broker and runs it with every listener on a
// loopback port from :0 (package proctest: the addresses from its ready
// file, its log printed if the test fails) and the flags extra; it
// returns the broker's and the dashboard's addresses.
func startBroker(t *testing.T, extra ...string) (addr, web string) {
	t.Helper()
	p := startBrokerProc(t, extra...)
	return p.Ready.Advertise, p.Ready.Metrics
}

// buildCmd builds ./cmd/NAME of the main module into the test's temporary
// directory.
func buildCmd(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	build := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	build.Dir = ".." // the main module, with its own go.sum
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startBrokerProc is startBroker's process (its ready file's addresses).
func startBrokerProc(t *testing.T, extra ...string) *proctest.Proc {
	t.Helper()
	p := proctest.New(t, "apogee-broker", buildCmd(t, "apogee-broker"))
	t.Cleanup(p.StopClean)
	p.Run(append([]string{"--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--namesrv-listen", "", "--grpc-listen", "",
		"--data-dir", t.TempDir(), "--metrics-listen", "127.0.0.1:0", "--cluster", "DashCluster"}, extra...)...)
	// The log line names the dashboard too (logged before the ready file).
	if m := metricsLine.FindStringSubmatch(p.RunLog()); m == nil || m[1] != p.Ready.Metrics {
		t.Fatalf("ready file's metrics %q, log line %v", p.Ready.Metrics, m)
	}
	return p
}

// browser starts headless chromium (Debian's package) for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			exe = p
			break
		}
	}
	if exe == "" {
		t.Skip("no chromium: install Debian's chromium package (scripts/test.sh does)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // root in a container
		chromedp.DisableGPU,
		chromedp.WindowSize(1100, 760),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 3*wait.DefaultTimeout) // a bound on a hung test only
	t.Cleanup(cancel3)
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// text reads the text of the first element sel matches.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	var s string
	run(t, ctx, "read "+sel, chromedp.Text(sel, &s, chromedp.ByQuery))
	return strings.TrimSpace(s)
}

func number(t *testing.T, ctx context.Context, sel string) int64 {
	t.Helper()
	s := text(t, ctx, sel)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is not a number", sel, s)
	}
	return n
}

func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if !*screenshots {
		return
	}
	var png []byte
	run(t, ctx, "screenshot", chromedp.CaptureScreenshot(&png))
	if err := os.WriteFile(filepath.Join("..", "docs", name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDashboardInChromium(t *testing.T) {
	ctx := browser(t)
	addr, web := startBroker(t)
	base := "http://" + web
	actx, cancel := context.WithTimeout(context.Background(), 3*wait.DefaultTimeout) // a bound on a hung test only
	defer cancel()

	// 24 messages to Orders (4 queues), keys order-0 ... order-23.
	prod, err := client.NewProducer(client.NameServer(addr), client.Selector(client.ManualSelector()), client.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close(context.Background())
	var ids []string
	for i := range 24 {
		q := client.MessageQueue{Topic: "Orders", BrokerName: brokerName, QueueID: int32(i % 4)}
		res, err := prod.SendSync(actx, &client.Message{Topic: "Orders", Queue: &q, Tags: "new", Keys: []string{fmt.Sprint("order-", i)},
			Body: []byte(fmt.Sprintf(`{"order":%d,"amount":%d.50}`, i, 10+i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.OffsetMsgID())
	}
	// A push consumer that takes everything and counts what it is given,
	// and a group "billing" with offsets but no members (a backlog).
	var mu sync.Mutex
	seen := map[string]int{}
	cons, err := client.NewPushConsumer(client.NameServer(addr), client.ConsumerGroup("shipping"), client.Subscribe("Orders", "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.Logger(quiet),
		client.WithConcurrentListener(func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				seen[string(m.Body)]++
			}
			return client.ConsumeSuccess
		}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(actx); err != nil {
		t.Fatal(err)
	}
	defer cons.Close(context.Background())
	admin, err := client.NewAdmin(client.NameServer(addr), client.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	offs := map[client.MessageQueue]int64{}
	for q := range int32(4) {
		offs[client.MessageQueue{Topic: "Orders", BrokerName: brokerName, QueueID: q}] = int64(q) // lag 6+5+4+3 = 18
	}
	commitOffsets(t, actx, addr, "billing", offs)
	// Wait until shipping has consumed and committed everything: 6 messages
	// on each queue. A lag of 0 is not enough: the broker dispatches what it
	// stored to the consume queues in the background (as RocketMQ's reput
	// does), so right after the sends a loaded machine can report max
	// offsets of 0 (a lag of 0 before shipping committed anything), and
	// shipping's first commits (1 on a queue) then show on the pages.
	wait.For(t, "shipping to consume and commit everything", func() error {
		cs, err := admin.ConsumeStats(actx, addr, "shipping", "Orders")
		if err != nil {
			return err
		}
		if len(cs.OffsetTable) != 4 {
			return fmt.Errorf("%d queues: %v", len(cs.OffsetTable), cs.OffsetTable)
		}
		for mq, w := range cs.OffsetTable {
			if w.BrokerOffset != 6 || w.ConsumerOffset != 6 {
				return fmt.Errorf("queue %d: broker offset %d, shipping's %d, want 6 and 6", mq.QueueID, w.BrokerOffset, w.ConsumerOffset)
			}
		}
		return nil
	})

	// Overview.
	run(t, ctx, "overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible("#brokers", chromedp.ByQuery))
	if s := text(t, ctx, `#brokers tr[data-key="broker-a"]`); !strings.Contains(s, addr) || !strings.Contains(s, "DashCluster") {
		t.Errorf("cluster table row: %q", s)
	}
	info, err := admin.BrokerRuntimeInfo(actx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, ctx, `#info td[data-k="msgPutTotalTodayNow"]`); got != info["msgPutTotalTodayNow"] {
		t.Errorf("msgPutTotalTodayNow: page %s, GET_BROKER_RUNTIME_INFO %s", got, info["msgPutTotalTodayNow"])
	}
	shot(t, ctx, "dashboard-overview.png")

	// Topics: messages per topic against GET_TOPIC_STATS_INFO.
	ts, err := admin.TopicStats(actx, addr, "Orders")
	if err != nil {
		t.Fatal(err)
	}
	var stored int64
	for _, o := range ts.OffsetTable {
		stored += o.MaxOffset - o.MinOffset
	}
	run(t, ctx, "topics", chromedp.Navigate(base+"/topics"), chromedp.WaitVisible("#topics", chromedp.ByQuery))
	if got := number(t, ctx, `#topics tr[data-key="Orders"] td[data-k="messages"]`); got != stored || got != 24 {
		t.Errorf("Orders' messages: page %d, GET_TOPIC_STATS_INFO %d", got, stored)
	}
	if got := number(t, ctx, `#topics tr[data-key="Orders"] td[data-k="backlog"]`); got != 18 {
		t.Errorf("Orders' backlog: page %d, want billing's 18", got)
	}
	shot(t, ctx, "dashboard-topics.png")
	run(t, ctx, "topic", chromedp.Navigate(base+"/topic?t=Orders"), chromedp.WaitVisible("#queues", chromedp.ByQuery))
	for mq, o := range ts.OffsetTable {
		if got := number(t, ctx, fmt.Sprintf(`#queues tr[data-key="%d"] td[data-k="max"]`, mq.QueueID)); got != o.MaxOffset {
			t.Errorf("queue %d max offset: page %d, GET_TOPIC_STATS_INFO %d", mq.QueueID, got, o.MaxOffset)
		}
	}

	// Groups: billing's lag per queue against GET_CONSUME_STATS.
	cs, err := admin.ConsumeStats(actx, addr, "billing", "Orders")
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "group", chromedp.Navigate(base+"/group?g=billing"), chromedp.WaitVisible("#lag-total", chromedp.ByQuery))
	if got := number(t, ctx, "#lag-total"); got != cs.TotalDiff() || got != 18 {
		t.Errorf("billing's lag: page %d, GET_CONSUME_STATS %d", got, cs.TotalDiff())
	}
	for mq, w := range cs.OffsetTable {
		sel := fmt.Sprintf(`tr[data-key="Orders/%d"] td[data-k="lag"]`, mq.QueueID)
		if got := number(t, ctx, sel); got != w.BrokerOffset-w.ConsumerOffset {
			t.Errorf("queue %d lag: page %d, GET_CONSUME_STATS %d", mq.QueueID, got, w.BrokerOffset-w.ConsumerOffset)
		}
	}
	shot(t, ctx, "dashboard-group.png")
	run(t, ctx, "groups", chromedp.Navigate(base+"/groups"), chromedp.WaitVisible("#groups", chromedp.ByQuery))
	if got := number(t, ctx, `#groups tr[data-key="shipping"] td[data-k="members"]`); got != 1 {
		t.Errorf("shipping's members: page %d, want 1", got)
	}

	// The rebalance: shipping's one member holds every queue of Orders, as
	// its own running info (GET_CONSUMER_RUNNING_INFO) says.
	ri, err := admin.ConsumerRunningInfo(actx, addr, "shipping", cons.ClientID(), false)
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "shipping", chromedp.Navigate(base+"/group?g=shipping"), chromedp.WaitVisible("#lag-total", chromedp.ByQuery))
	for q := range int32(4) {
		mq := protocol.MessageQueue{Topic: "Orders", BrokerName: brokerName, QueueID: q}
		if _, ok := ri.MQTable[mq]; !ok {
			t.Fatalf("the consumer's running info lacks %v", mq)
		}
		if got := text(t, ctx, fmt.Sprintf(`tr[data-key="Orders/%d"] td[data-k="holder"]`, q)); got != cons.ClientID() {
			t.Errorf("queue %d held by %q on the page, %q by the running info", q, got, cons.ClientID())
		}
	}

	// Message search by key: properties and (no) retries.
	run(t, ctx, "search", chromedp.Navigate(base+"/messages"),
		chromedp.SetValue(`#search input[name="topic"]`, "Orders", chromedp.ByQuery),
		chromedp.SetValue(`#search input[name="key"]`, "order-7", chromedp.ByQuery),
		chromedp.Submit(`#search`, chromedp.ByQuery),
		chromedp.WaitVisible("#found", chromedp.ByQuery))
	if got := text(t, ctx, "#found"); got != "1 found." {
		t.Fatalf("search: %q", got)
	}
	if got := text(t, ctx, `table.message td[data-k="msgid"]`); got != ids[7] {
		t.Errorf("found message id %q, sent %q", got, ids[7])
	}
	view, err := admin.ViewMessage(actx, ids[7])
	if err != nil {
		t.Fatal(err)
	}
	if got := text(t, ctx, `table.message td[data-k="uniq"]`); got != view.Properties["UNIQ_KEY"] {
		t.Errorf("unique key: page %q, VIEW_MESSAGE_BY_ID %q", got, view.Properties["UNIQ_KEY"])
	}
	run(t, ctx, "open properties", chromedp.Click("details summary", chromedp.ByQuery))
	shot(t, ctx, "dashboard-message.png")

	// Action: create a topic through the confirmation.
	run(t, ctx, "create topic", chromedp.Navigate(base+"/topics"),
		chromedp.SetValue(`#create-topic input[name="topic"]`, "Refunds", chromedp.ByQuery),
		chromedp.SetValue(`#create-topic input[name="queues"]`, "2", chromedp.ByQuery),
		chromedp.Click(`#create-topic button`, chromedp.ByQuery),
		chromedp.WaitVisible("#confirm-button", chromedp.ByQuery))
	if got := text(t, ctx, "#what"); !strings.Contains(got, "Create topic Refunds with 2 read and 2 write queues") {
		t.Errorf("confirmation: %q", got)
	}
	shot(t, ctx, "dashboard-confirm.png")
	run(t, ctx, "confirm", chromedp.Click("#confirm-button", chromedp.ByQuery), chromedp.WaitVisible("#done", chromedp.ByQuery))
	all, err := admin.AllTopicConfig(actx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, ok := all.TopicConfigTable["Refunds"]; !ok || cfg.WriteQueueNums != 2 {
		t.Errorf("Refunds after the action, by GET_ALL_TOPIC_CONFIG: %+v %v", cfg, ok)
	}

	// Action: reset billing to the end of Orders; its lag becomes 0.
	run(t, ctx, "reset", chromedp.Navigate(base+"/group?g=billing"),
		chromedp.SetValue(`#reset-offset input[name="time"]`, "now", chromedp.ByQuery),
		chromedp.Click(`#reset-offset button`, chromedp.ByQuery),
		chromedp.WaitVisible("#confirm-button", chromedp.ByQuery),
		chromedp.Click("#confirm-button", chromedp.ByQuery),
		chromedp.WaitVisible("#done", chromedp.ByQuery))
	if cs, err := admin.ConsumeStats(actx, addr, "billing", "Orders"); err != nil || cs.TotalDiff() != 0 {
		t.Errorf("billing after the reset, by GET_CONSUME_STATS: lag %d, %v", cs.TotalDiff(), err)
	}

	// Action: resend order-3 to the shipping consumer; its listener gets
	// it once more.
	mu.Lock()
	before := seen[`{"order":3,"amount":13.50}`]
	mu.Unlock()
	run(t, ctx, "resend", chromedp.Navigate(base+"/group?g=shipping&msgid="+ids[3]),
		chromedp.WaitVisible("#resend", chromedp.ByQuery),
		chromedp.Click(`#resend button`, chromedp.ByQuery),
		chromedp.WaitVisible("#confirm-button", chromedp.ByQuery),
		chromedp.Click("#confirm-button", chromedp.ByQuery),
		chromedp.WaitVisible("#done", chromedp.ByQuery))
	if got := text(t, ctx, "#done"); !strings.Contains(got, "CR_SUCCESS") {
		t.Errorf("resend result: %q", got)
	}
	mu.Lock()
	after := seen[`{"order":3,"amount":13.50}`]
	mu.Unlock()
	if after != before+1 {
		t.Errorf("the consumer got order 3 %d times after the resend, %d before", after, before)
	}
}

// commitOffsets commits a group's offsets through the broker
// (UPDATE_CONSUMER_OFFSET), as a consumer would.
func commitOffsets(t *testing.T, ctx context.Context, addr, group string, offs map[client.MessageQueue]int64) {
	t.Helper()
	pc, err := client.NewPullConsumer(client.NameServer(addr), client.ConsumerGroup(group), client.AutoCommit(false), client.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	var qs []client.MessageQueue
	for q := range offs {
		qs = append(qs, q)
	}
	if err := pc.Assign(ctx, qs); err != nil {
		t.Fatal(err)
	}
	if err := pc.CommitOffsets(ctx, offs); err != nil {
		t.Fatal(err)
	}
}
