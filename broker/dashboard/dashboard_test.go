package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/dashboard"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// start runs a broker on loopback and the dashboard over it.
func start(t *testing.T) (*broker.Broker, string, *httptest.Server) {
	t.Helper()
	b, addr := runBroker(t, "")
	return b, addr, serve(t, b, dashboard.Options{})
}

// runBroker runs a broker on loopback (traceTopic: its trace topic, "" for
// none), stopped when the test ends, and returns it and its address.
func runBroker(t *testing.T, traceTopic string) (*broker.Broker, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Options{Core: core.Options{DataDir: t.TempDir(), AdvertiseAddr: l.Addr().String(), Logger: testlog.New(t, "broker"),
		TraceTopic: traceTopic,
		Store:      store.Options{SegmentSize: 8 << 20, ConsumeQueueEntries: 4096, IndexSlots: 1024, IndexMaxEntries: 8192, CleanInterval: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	go b.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.Shutdown(ctx)
	})
	return b, l.Addr().String()
}

// newProducer starts a producer through the name server at addr (opts:
// more options), closed when the test ends.
func newProducer(t *testing.T, addr string, opts ...client.ProducerOpt) *client.Producer {
	t.Helper()
	opts = append([]client.ProducerOpt{client.NameServer(addr), client.Logger(testlog.New(t, "producer"))}, opts...)
	prod, err := client.NewProducer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prod.Close(context.Background()) })
	return prod
}

// waitDispatched waits until every message b has stored is visible to its
// readers: an acknowledged send is stored, but the pages count and search
// what dispatch has written to the consume queues and the index.
func waitDispatched(t *testing.T, b *broker.Broker) {
	t.Helper()
	st := b.Store()
	written := st.WrittenOffset()
	wait.For(t, "dispatch of the stored messages", func() error {
		if d := st.DispatchedOffset(); d < written {
			return fmt.Errorf("dispatched to commit-log offset %d of %d", d, written)
		}
		return nil
	})
}

type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func (br browser) get(path string, want int) string {
	br.t.Helper()
	resp, err := br.c.Get(br.base + path)
	if err != nil {
		br.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		br.t.Fatalf("GET %s: %d, want %d\n%s", path, resp.StatusCode, want, b)
	}
	return string(b)
}

func (br browser) post(v url.Values, origin string, want int) string {
	br.t.Helper()
	req, _ := http.NewRequest("POST", br.base+"/do", strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := br.c.Do(req)
	if err != nil {
		br.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		br.t.Fatalf("POST /do %v: %d, want %d\n%s", v, resp.StatusCode, want, b)
	}
	return string(b)
}

var (
	hidden      = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	confirmPart = regexp.MustCompile(`(?s)<form method="post" action="/do" id="confirm">.*?</form>`)
)

// confirmForm reads the confirmation page's form fields.
func confirmForm(t *testing.T, page string) url.Values {
	t.Helper()
	v := url.Values{}
	for _, m := range hidden.FindAllStringSubmatch(confirmPart.FindString(page), -1) {
		v.Set(m[1], htmlUnescape(m[2]))
	}
	if v.Get("token") == "" {
		t.Fatalf("no token on the confirmation page:\n%s", page)
	}
	return v
}

func htmlUnescape(s string) string {
	return strings.NewReplacer("&amp;", "&", "&#43;", "+", "&#34;", `"`, "&#39;", "'", "&lt;", "<", "&gt;", ">").Replace(s)
}

func TestPagesAndActions(t *testing.T) {
	b, addr, srv := start(t)
	jar, _ := cookiejar.New(nil)
	br := browser{t: t, base: srv.URL, c: &http.Client{Jar: jar, Timeout: 10 * time.Second}}

	// Messages with keys, and a group that consumes some of them.
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	prod := newProducer(t, addr, client.Selector(client.ManualSelector()))
	var ids []string
	for i := range 12 {
		q := client.MessageQueue{Topic: "DashTopic", BrokerName: core.DefaultBrokerName, QueueID: int32(i % 4)}
		res, err := prod.SendSync(ctx, &client.Message{Topic: "DashTopic", Queue: &q, Keys: []string{"order-" + string(rune('a'+i))}, Tags: "T", Body: []byte("hello")})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.OffsetMsgID())
	}
	waitDispatched(t, b)
	off, _, err := b.ResetConsumerOffset("DashTopic", "dash-group", 0, true, -1, -1)
	if err != nil || len(off) != 4 {
		t.Fatalf("reset to earliest: %v %v", off, err)
	}

	// Pages load and say what the core says.
	if p := br.get("/", 200); !strings.Contains(p, core.DefaultBrokerName) || !strings.Contains(p, `id="brokers"`) {
		t.Fatalf("overview:\n%s", p)
	}
	if p := br.get("/topics", 200); !regexp.MustCompile(`data-key="DashTopic">.*\n.*data-k="messages">12<`).MatchString(p) {
		t.Fatalf("topics page lacks DashTopic's 12 messages:\n%s", p)
	}
	if p := br.get("/topic?t=DashTopic", 200); !strings.Contains(p, `data-k="max">3<`) {
		t.Fatalf("topic page:\n%s", p)
	}
	br.get("/topic?t=NoSuch", 400)
	if p := br.get("/group?g=dash-group", 200); !strings.Contains(p, `id="lag-total">12<`) {
		t.Fatalf("group page lacks a lag of 12:\n%s", p)
	}
	if p := br.get("/groups", 200); !strings.Contains(p, `data-key="dash-group"`) {
		t.Fatalf("groups page:\n%s", p)
	}
	if p := br.get("/messages?topic=DashTopic&key=order-c", 200); !strings.Contains(p, "1 found") || !strings.Contains(p, ids[2]) {
		t.Fatalf("key search:\n%s", p)
	}
	if p := br.get("/messages?id="+ids[5], 200); !strings.Contains(p, "1 found") || !strings.Contains(p, "order-f") {
		t.Fatalf("id search:\n%s", p)
	}

	// The retry trace: message 4 sent back once (waiting in the schedule
	// topic for its delay level) and message 6 straight to the DLQ.
	if err := b.Core().Admin().UpdateSubscriptionGroup(protocol.DefaultSubscriptionGroupConfig("dash-group")); err != nil {
		t.Fatal(err)
	}
	for i, level := range map[int]int32{4: 0, 6: -1} {
		_, off, err := parseOffsetID(ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Core().SendBack(&core.SendBackRequest{Group: "dash-group", Offset: off, DelayLevel: level}); err != nil {
			t.Fatalf("send back %d: %v", i, err)
		}
	}
	waitTrace := func(id, want string) {
		t.Helper()
		wait.For(t, "the trace of "+id, func() error {
			if p := br.get("/messages?id="+id, 200); !strings.Contains(p, want) {
				return fmt.Errorf("the page lacks %q:\n%s", want, p)
			}
			return nil
		})
	}
	waitTrace(ids[4], `data-k="topic">SCHEDULE_TOPIC_XXXX → %RETRY%dash-group<`)
	waitTrace(ids[6], `data-k="topic">%DLQ%dash-group<`)

	// Create a topic: confirmation, then the POST with its token.
	page := br.get("/confirm?action=create-topic&topic=MadeHere&queues=3&perm=6&order=false", 200)
	if !strings.Contains(page, "Create topic MadeHere with 3 read and 3 write queues") {
		t.Fatalf("confirmation:\n%s", page)
	}
	form := confirmForm(t, page)
	if _, ok := b.Core().TopicConfig("MadeHere"); ok {
		t.Fatal("the topic exists before the confirmation")
	}
	// Refused: no token, a token of another action, another site's Origin.
	noTok := url.Values{"action": {"create-topic"}, "topic": {"MadeHere"}}
	br.post(noTok, "", http.StatusForbidden)
	other := confirmForm(t, br.get("/confirm?action=reset-offset&group=dash-group&topic=DashTopic&time=now", 200))
	forged := url.Values{"action": {"create-topic"}, "topic": {"MadeHere"}, "token": {other.Get("token")}}
	br.post(forged, "", http.StatusForbidden)
	br.post(form, "http://evil.example", http.StatusForbidden)
	if _, ok := b.Core().TopicConfig("MadeHere"); ok {
		t.Fatal("a refused POST created the topic")
	}
	if p := br.post(form, srv.URL, http.StatusOK); !strings.Contains(p, "Topic MadeHere has 3 queues") {
		t.Fatalf("result:\n%s", p)
	}
	if cfg, ok := b.Core().TopicConfig("MadeHere"); !ok || cfg.WriteQueueNums != 3 {
		t.Fatalf("topic after the action: %+v %v", cfg, ok)
	}

	// Reset the group to the end: its lag drops to 0.
	br.post(other, "", http.StatusOK)
	if p := br.get("/group?g=dash-group", 200); !strings.Contains(p, `id="lag-total">0<`) {
		t.Fatalf("group page after the reset:\n%s", p)
	}
	// A resend to a client that is not connected fails at confirmation.
	if p := br.get("/confirm?action=resend&group=dash-group&client=nobody&msgid="+ids[0], 400); !strings.Contains(p, "not online") {
		t.Fatalf("resend to nobody:\n%s", p)
	}
}

func parseOffsetID(id string) (netip.AddrPort, int64, error) { return message.ParseOffsetMsgID(id) }

// TestResendAndHolders: with a live push consumer, the group page names it
// as the holder of every queue, and a confirmed resend reaches its
// listener once more.
func TestResendAndHolders(t *testing.T) {
	_, addr, srv := start(t)
	br := browser{t: t, base: srv.URL, c: &http.Client{Timeout: 10 * time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	prod := newProducer(t, addr)
	res, err := prod.SendSync(ctx, &client.Message{Topic: "PushTopic", Body: []byte("again")})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 10)
	cons, err := client.NewPushConsumer(client.NameServer(addr), client.ConsumerGroup("push-group"), client.Subscribe("PushTopic", "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.Logger(testlog.New(t, "consumer")),
		client.WithConcurrentListener(func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			for _, m := range msgs {
				got <- string(m.Body)
			}
			return client.ConsumeSuccess
		}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer cons.Close(context.Background())
	select {
	case <-got:
	case <-ctx.Done():
		t.Fatal("the consumer got nothing")
	}

	holder := regexp.MustCompile(`data-k="holder">([^<]*)<`)
	wait.For(t, cons.ClientID()+" named as every queue's holder", func() error {
		page := br.get("/group?g=push-group", 200)
		hs := holder.FindAllStringSubmatch(page, -1)
		all := len(hs) > 0
		for _, h := range hs {
			all = all && h[1] == cons.ClientID()
		}
		if !all {
			return fmt.Errorf("the group page:\n%s", page)
		}
		return nil
	})

	page := br.get("/confirm?action=resend&group=push-group&client="+url.QueryEscape(cons.ClientID())+"&msgid="+res.OffsetMsgID(), 200)
	if p := br.post(confirmForm(t, page), "", http.StatusOK); !strings.Contains(p, "CR_SUCCESS") {
		t.Fatalf("resend result:\n%s", p)
	}
	select {
	case body := <-got:
		if body != "again" {
			t.Fatalf("the listener got %q", body)
		}
	case <-ctx.Done():
		t.Fatal("the resent message did not reach the listener")
	}
}
