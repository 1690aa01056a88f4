package namesrv

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// TestMain fails the run if goroutines running this package's code outlive the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitGoroutines(); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "goroutine leak: %d left\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// ourGoroutines returns the stacks of the goroutines, other than the caller's, that
// run code of this package or of remoting.
func ourGoroutines() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i > 0 && (strings.Contains(g, "apogee/namesrv.") || strings.Contains(g, "apogee/remoting.")) {
			out = append(out, g)
		}
	}
	return out
}

// waitGoroutines waits for ourGoroutines to end and returns those that do not.
func waitGoroutines() []string {
	var g []string
	wait.Poll(wait.DefaultTimeout, func() error {
		if g = ourGoroutines(); len(g) > 0 {
			return fmt.Errorf("%d goroutines", len(g))
		}
		return nil
	})
	return g
}

// registrarGoroutines returns the stacks of the goroutines that run a
// Registrar's code.
func registrarGoroutines() []string {
	var out []string
	for _, g := range ourGoroutines() {
		if strings.Contains(g, "namesrv.(*Registrar)") {
			out = append(out, g)
		}
	}
	return out
}

// quietLogger is the benchmarks' and fuzz targets' logger.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// testServer is a Registry served standalone on 127.0.0.1:0.
type testServer struct {
	r    *Registry
	addr string
}

// startServer serves a new registry (OpenRegistry: opts.KVConfigPath is loaded) with
// Serve until the test ends.
func startServer(t testing.TB, opts Options) *testServer {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testlog.New(t, "namesrv")
	}
	r, err := OpenRegistry(opts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, r, &remoting.Options{Logger: opts.Logger}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(wait.DefaultTimeout):
			t.Error("Serve did not return")
		}
		r.Close()
	})
	return &testServer{r: r, addr: l.Addr().String()}
}

// dial connects a client that is closed when the test ends.
func dial(t testing.TB, addr string) *remoting.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, &remoting.ClientOptions{Options: remoting.Options{Logger: testlog.New(t, "client")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); <-cl.Done() })
	return cl
}

// gocRequest builds a request as rocketmq-client-go sends it: JSON header, language
// GO, version 317, every ext value a string.
func gocRequest(code int32, ext map[string]string, body []byte) *protocol.Command {
	var c protocol.Command
	c.InitRequest(code, 0)
	c.Language = protocol.LangGo
	c.Version = protocol.VersionV4_5_2
	c.SerializeType = protocol.SerializeJSON
	for _, k := range sortedKeys(ext) {
		c.Ext.SetString(k, ext[k])
	}
	c.Body = body
	return &c
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

func crcOf(b []byte) int32 { return int32(crc32.ChecksumIEEE(b) & 0x7FFFFFFF) }

// call sends req and returns the response, failing the test on transport errors.
func call(t testing.TB, cl *remoting.Client, req *protocol.Command) *protocol.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cl.Invoke(ctx, req)
	if err != nil {
		t.Fatalf("invoke %s: %v", protocol.RequestCodeName(req.Code), err)
	}
	return resp
}

// routeReq is GoC's GET_ROUTEINFO_BY_TOPIC.
func routeReq(topic string) *protocol.Command {
	return gocRequest(protocol.ReqGetRouteInfoByTopic, map[string]string{"topic": topic}, nil)
}

// registerReq builds a REGISTER_BROKER request as a Java broker sends it, with a
// correct bodyCrc32 unless crc is given.
func registerReq(t testing.TB, reg BrokerRegistration, extra map[string]string) *protocol.Command {
	t.Helper()
	body, err := encodeRegistration(&reg)
	if err != nil {
		t.Fatal(err)
	}
	h := protocol.RegisterBrokerRequest{BrokerName: reg.BrokerName, BrokerAddr: reg.BrokerAddr,
		ClusterName: reg.ClusterName, HAServerAddr: reg.HAServerAddr, BrokerID: reg.BrokerID,
		BodyCRC32: crcOf(body)}
	var c protocol.Command
	c.InitRequest(protocol.ReqRegisterBroker, 0)
	c.Language = protocol.LangJava
	c.Version = protocol.VersionV5_3_3
	h.Encode(&c.Ext)
	for _, k := range sortedKeys(extra) {
		c.Ext.SetString(k, extra[k])
	}
	c.Body = body
	return &c
}

// gocRoute is a route as rocketmq-client-go's hand parser reads it.
type gocRoute struct {
	Queues  []gocQueueData
	Brokers []gocBrokerData
}

type gocQueueData struct {
	BrokerName     string `json:"brokerName"`
	ReadQueueNums  int    `json:"readQueueNums"`
	WriteQueueNums int    `json:"writeQueueNums"`
	Perm           int    `json:"perm"`
	TopicSynFlag   int    `json:"topicSynFlag"` // sic: GoC reads the misspelt key
}

type gocBrokerData struct {
	Cluster, BrokerName string
	Addrs               map[int64]string
}

// gocParseRoute mimics rocketmq-client-go's TopicRouteData.decode: queueDatas through
// encoding/json, each brokerData's "cluster" and "brokerName" as gjson finds them, and
// brokerAddrs by hand: the object's raw text without its first and last bytes, split
// on ',', each piece split at its first ':', the key parsed as int64 (unparsable: 0)
// and every '"' removed from the address. Newer client versions also remove quotes
// from the key (stripKeyQuotes).
func gocParseRoute(t testing.TB, body []byte, stripKeyQuotes bool) gocRoute {
	t.Helper()
	s := string(body)
	var out gocRoute
	qs := rawValue(t, s, `"queueDatas":`)
	if err := json.Unmarshal([]byte(qs), &out.Queues); err != nil {
		t.Fatalf("GoC would fail on queueDatas %q: %v", qs, err)
	}
	bds := rawValue(t, s, `"brokerDatas":`)
	for _, bd := range splitObjects(t, bds) {
		b := gocBrokerData{Cluster: stringField(bd, `"cluster":`), BrokerName: stringField(bd, `"brokerName":`),
			Addrs: map[int64]string{}}
		addrs := rawValue(t, bd, `"brokerAddrs":`)
		if len(addrs) < 2 {
			t.Fatalf("GoC would panic on brokerAddrs %q", addrs)
		}
		for _, piece := range strings.Split(addrs[1:len(addrs)-1], ",") {
			i := strings.Index(piece, ":")
			if i < 0 {
				continue
			}
			k := piece[:i]
			if stripKeyQuotes {
				k = strings.ReplaceAll(k, `"`, "")
			}
			id, _ := strconv.ParseInt(k, 10, 64)
			b.Addrs[id] = strings.ReplaceAll(piece[i+1:], `"`, "")
		}
		out.Brokers = append(out.Brokers, b)
	}
	return out
}

// rawValue returns the raw text of the value (object, array or string) after key.
func rawValue(t testing.TB, s, key string) string {
	t.Helper()
	i := strings.Index(s, key)
	if i < 0 {
		t.Fatalf("no %s in %s", key, s)
	}
	s = s[i+len(key):]
	depth, inStr := 0, false
	for j := 0; j < len(s); j++ {
		c := s[j]
		switch {
		case inStr && c == '\\':
			j++
		case c == '"':
			inStr = !inStr
			if !inStr && depth == 0 {
				return s[:j+1]
			}
		case inStr:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return s[:j+1]
			}
		}
	}
	t.Fatalf("unterminated value after %s", key)
	return ""
}

// splitObjects splits a JSON array of objects into the objects' raw texts.
func splitObjects(t testing.TB, arr string) []string {
	var out []string
	depth, start, inStr := 0, 0, false
	for j := 1; j < len(arr)-1; j++ {
		c := arr[j]
		switch {
		case inStr && c == '\\':
			j++
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{':
			if depth == 0 {
				start = j
			}
			depth++
		case c == '}':
			depth--
			if depth == 0 {
				out = append(out, arr[start:j+1])
			}
		}
	}
	return out
}

func stringField(obj, key string) string {
	i := strings.Index(obj, key)
	if i < 0 {
		return ""
	}
	v := obj[i+len(key):]
	if len(v) == 0 || v[0] != '"' {
		return ""
	}
	end := strings.IndexByte(v[1:], '"')
	return v[1 : end+1]
}

func topicConf(name string, queues, perm int32) protocol.TopicConfig {
	return protocol.TopicConfig{TopicName: name, ReadQueueNums: queues, WriteQueueNums: queues, Perm: perm,
		TopicFilterType: "SINGLE_TAG"}
}

func hasRoute(r *Registry, topic string) bool {
	_, ok := r.Route(topic)
	return ok
}
