package interop

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
)

// namesrvStartLine matches apogee-namesrv's one start-up line.
var namesrvStartLine = regexp.MustCompile(`^apogee-namesrv listening on (\S+), data (.+), version (.+)$`)

// NameServer is one apogee-namesrv process owned by one test (package
// proctest: its address from its ready file, its log printed if the test
// fails).
type NameServer struct {
	t    testing.TB
	Addr string // its bound address
	p    *proctest.Proc
}

// startNamesrv starts a standalone name server for t on a loopback port
// from :0 with its data in a fresh temporary directory. It is stopped with
// SIGTERM when the test ends (and must exit 0).
func startNamesrv(t testing.TB, extra ...string) *NameServer {
	t.Helper()
	args := append([]string{"--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "namesrv")}, extra...)
	n := &NameServer{t: t, p: proctest.New(t, "apogee-namesrv", namesrvBin)}
	t.Cleanup(n.Stop)
	n.p.Run(args...)
	n.Addr = n.p.Ready.Listen
	if m := namesrvStartLine.FindStringSubmatch(n.p.Line()); m == nil || m[1] != n.Addr {
		t.Fatalf("name server start line %q, ready file %+v", n.p.Line(), n.p.Ready)
	}
	return n
}

// Stop sends SIGTERM and waits for a clean exit (status 0, "stopped cleanly").
func (n *NameServer) Stop() {
	n.t.Helper()
	if !n.p.Running() {
		return
	}
	if err := n.p.Stop(syscall.SIGTERM); err != nil {
		n.t.Errorf("name server exit after SIGTERM: %v", err)
	} else if !strings.Contains(n.p.RunLog(), `msg="stopped cleanly"`) {
		n.t.Errorf("name server exited without a \"stopped cleanly\" line")
	}
}

// routeAt asks the name server at addr for topic's route over a raw
// connection and returns the response code.
func routeAt(t testing.TB, addr, topic string) int {
	t.Helper()
	rc := dialRaw(t, addr)
	defer rc.Close()
	return rc.Invoke(t, request(105, map[string]string{"topic": topic}, nil)).Code
}

// A broker without its embedded name server's listener registers with two
// standalone name servers; the official client produces through one and
// consumes through the other. Stopping the first, the producer's next sends
// still arrive (it keeps the route it has), and the second name server
// still routes to the broker.
func TestStandaloneNamesrvs(t *testing.T) {
	ns1, ns2 := startNamesrv(t), startNamesrv(t)
	b := startBrokerWithNamesrvs(t, []string{ns1.Addr, ns2.Addr})
	if !strings.Contains(b.Line, "name server on disabled") {
		t.Fatalf("broker start line %q: its own name-server listener is not disabled", b.Line)
	}
	// The broker registers at start; TBW102 (auto-create) is what lets the
	// client send to a topic that does not exist yet.
	for _, ns := range []*NameServer{ns1, ns2} {
		wait.Until(t, "the broker's registration at "+ns.Addr, func() bool {
			return routeAt(t, ns.Addr, "TBW102") == 0
		})
	}

	topic := uniq("TNamesrv")
	p := newProducer(t, b, producer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns1.Addr})))
	send := func(prefix string, n int) []string {
		want := bodies(prefix, n)
		for i, body := range want {
			res, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(body)))
			if err != nil || res.Status != primitive.SendOK {
				t.Fatalf("send %d: %v %v", i, res, err)
			}
		}
		return want
	}
	want := send("before", 100)
	// The auto-created topic reaches both name servers (the broker registers
	// it at once, with REGISTER_TOPIC_IN_NAMESRV).
	for _, ns := range []*NameServer{ns1, ns2} {
		wait.Until(t, topic+"'s route at "+ns.Addr, func() bool {
			return routeAt(t, ns.Addr, topic) == 0
		})
	}

	rec := newRecorder()
	startPush(t, b, uniq("CG"), topic, all, rec,
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns2.Addr})))
	wait.Until(t, "the first 100 messages through the second name server", func() bool {
		return rec.distinct() >= len(want)
	})
	if m := missing(rec, want); m != "" {
		t.Fatalf("not received: %s", m)
	}

	ns1.Stop()
	more := send("after", 50)
	wait.Until(t, "the messages sent after the first name server stopped", func() bool {
		return rec.distinct() >= len(want)+len(more)
	})
	if m := missing(rec, more); m != "" {
		t.Fatalf("not received after the first name server stopped: %s", m)
	}
	if code := routeAt(t, ns2.Addr, topic); code != 0 {
		t.Fatalf("route at the second name server: code %d", code)
	}
	// Nothing is received twice: the consumer stayed alone in its group.
	for body, n := range rec.snapshot() {
		if n != 1 {
			t.Errorf("%q received %d times", body, n)
		}
	}
}
