package namesrv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// kvCall sends one KV request in rocketmq-client-go's shape.
func kvCall(t testing.TB, cl *remoting.Client, code int32, ns, key, value string) *protocol.Command {
	t.Helper()
	ext := map[string]string{"namespace": ns}
	if key != "" {
		ext["key"] = key
	}
	if code == protocol.ReqPutKVConfig {
		ext["value"] = value
	}
	return call(t, cl, gocRequest(code, ext, nil))
}

// kvGet returns a key's value and whether it exists.
func kvGet(t testing.TB, cl *remoting.Client, ns, key string) (string, bool) {
	t.Helper()
	resp := kvCall(t, cl, protocol.ReqGetKVConfig, ns, key, "")
	switch resp.Code {
	case protocol.RespSuccess:
		v, _ := resp.Ext.GetString("value")
		return v, true
	case protocol.RespQueryNotFound:
		return "", false
	}
	t.Fatalf("GET_KV_CONFIG %s/%s: code %d %s", ns, key, resp.Code, resp.Remark)
	return "", false
}

func mustPut(t testing.TB, cl *remoting.Client, ns, key, value string) {
	t.Helper()
	if resp := kvCall(t, cl, protocol.ReqPutKVConfig, ns, key, value); resp.Code != protocol.RespSuccess {
		t.Fatalf("PUT_KV_CONFIG %s/%s: code %d %s", ns, key, resp.Code, resp.Remark)
	}
}

func TestKVConfigPersisted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "not-yet", "kvConfig.json") // the directory is created
	s := startServer(t, Options{KVConfigPath: path})
	s.r.RegisterBroker(embeddedA)
	cl := dial(t, s.addr)
	mustPut(t, cl, NamespaceOrderTopicConfig, "T", "broker-a:8")
	mustPut(t, cl, "ns2", "a", "1")
	mustPut(t, cl, "ns2", "b", "2")
	mustPut(t, cl, "ns2", "b", "3") // replaced
	mustPut(t, cl, "gone", "x", "y")
	if resp := kvCall(t, cl, protocol.ReqDeleteKVConfig, "gone", "x", ""); resp.Code != protocol.RespSuccess {
		t.Fatalf("delete: %d %s", resp.Code, resp.Remark)
	}
	// Deleting what does not exist succeeds and writes nothing.
	before, _ := os.ReadFile(path)
	if resp := kvCall(t, cl, protocol.ReqDeleteKVConfig, "nope", "x", ""); resp.Code != protocol.RespSuccess {
		t.Fatalf("delete of a missing key: %d %s", resp.Code, resp.Remark)
	}
	want := `{"configTable":{"ORDER_TOPIC_CONFIG":{"T":"broker-a:8"},"ns2":{"a":"1","b":"3"}}}`
	if got := readFile(t, path); got != want || string(before) != want {
		t.Fatalf("kvConfig.json:\n got %s\nwant %s", got, want)
	}

	// A second registry on the same file (a restart) answers the same.
	s2 := startServer(t, Options{KVConfigPath: path})
	s2.r.RegisterBroker(embeddedA)
	cl2 := dial(t, s2.addr)
	for _, kv := range [][3]string{{NamespaceOrderTopicConfig, "T", "broker-a:8"}, {"ns2", "a", "1"}, {"ns2", "b", "3"}} {
		if v, ok := kvGet(t, cl2, kv[0], kv[1]); !ok || v != kv[2] {
			t.Fatalf("after reopening, %s/%s = %q, %v", kv[0], kv[1], v, ok)
		}
	}
	if _, ok := kvGet(t, cl2, "gone", "x"); ok {
		t.Fatal("a deleted key came back")
	}
	resp := kvCall(t, cl2, protocol.ReqGetKVListByNamespace, "ns2", "", "")
	if resp.Code != protocol.RespSuccess || string(resp.Body) != `{"table":{"a":"1","b":"3"}}` {
		t.Fatalf("list after reopening: %d %s", resp.Code, resp.Body)
	}
	if body := call(t, cl2, routeReq("T")).Body; !bytes.Contains(body, []byte(`"orderTopicConf":"broker-a:8"`)) {
		t.Fatalf("route after reopening lacks orderTopicConf: %s", body)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A kvConfig.json as the Java name server writes it (fastjson, pretty or not) loads;
// empty namespaces are dropped.
func TestKVConfigJavaFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvConfig.json")
	java := "{\n\t\"configTable\":{\n\t\t\"ORDER_TOPIC_CONFIG\":{\n\t\t\t\"TopicTest\":\"broker-a:4;broker-b:4\"\n\t\t},\n\t\t\"empty\":{}\n\t}\n}"
	if err := os.WriteFile(path, []byte(java), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRegistry(Options{KVConfigPath: path, Logger: testlog.New(t, "namesrv")})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.kv[NamespaceOrderTopicConfig]["TopicTest"]; got != "broker-a:4;broker-b:4" {
		t.Fatalf("loaded %v", r.kv)
	}
	if _, ok := r.kv["empty"]; ok || len(r.kv) != 1 {
		t.Fatalf("loaded %v", r.kv)
	}
}

func TestKVConfigFallsBackToBak(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvConfig.json")
	r, err := OpenRegistry(Options{KVConfigPath: path, Logger: testlog.New(t, "namesrv")})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if _, err := r.changeKV("ns", "k", fmt.Sprint(i), false); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	// A torn write of the file (the .bak holds k=1).
	if err := os.WriteFile(path, []byte(`{"configTable":{"ns":{"k":"`), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	r, err = OpenRegistry(Options{KVConfigPath: path, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.kv["ns"]["k"]; got != "1" {
		t.Fatalf("after the fallback k=%q", got)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "state file damaged") {
		t.Fatalf("no WARN for the fallback:\n%s", out)
	}
	// The file is written again from what was loaded; the damaged one is kept aside.
	if got := readFile(t, path); got != `{"configTable":{"ns":{"k":"1"}}}` {
		t.Fatalf("file after the fallback: %s", got)
	}
	if got := readFile(t, path+".damaged"); !strings.HasPrefix(got, `{"configTable":{"ns":{"k":"`) {
		t.Fatalf("damaged copy: %q", got)
	}

	// Neither parses: refused, naming both files.
	for _, p := range []string{path, path + ".bak"} {
		if err := os.WriteFile(p, []byte("garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := OpenRegistry(Options{KVConfigPath: path, Logger: testlog.New(t, "namesrv")}); err == nil ||
		!strings.Contains(err.Error(), "kvConfig.json does not parse") || !strings.Contains(err.Error(), "kvConfig.json.bak") {
		t.Fatalf("open with both files damaged: %v", err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A change that cannot be written is refused with SYSTEM_ERROR and not applied.
func TestKVConfigWriteFailureRefusesChange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kv")
	path := filepath.Join(dir, "kvConfig.json")
	s := startServer(t, Options{KVConfigPath: path})
	cl := dial(t, s.addr)
	mustPut(t, cl, "ns", "k", "1")
	// The directory becomes a file: no temporary file can be created in it.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	resp := kvCall(t, cl, protocol.ReqPutKVConfig, "ns", "k", "2")
	if resp.Code != protocol.RespSystemError || !strings.Contains(string(resp.Remark), "could not be written") {
		t.Fatalf("put that cannot be written: %d %q", resp.Code, resp.Remark)
	}
	if v, _ := kvGet(t, cl, "ns", "k"); v != "1" {
		t.Fatalf("a change that was not written was applied: k=%q", v)
	}
	resp = kvCall(t, cl, protocol.ReqDeleteKVConfig, "ns", "k", "")
	if resp.Code != protocol.RespSystemError {
		t.Fatalf("delete that cannot be written: %d %q", resp.Code, resp.Remark)
	}
	if _, ok := kvGet(t, cl, "ns", "k"); !ok {
		t.Fatal("a delete that was not written was applied")
	}
	_, err := s.r.changeKV("ns", "k", "3", false)
	if !errors.Is(err, errKVNotPersisted) {
		t.Fatalf("changeKV error %v does not wrap errKVNotPersisted", err)
	}
}

func TestNewRegistryRefusesKVConfigPath(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewRegistry accepted a KVConfigPath it would not load")
		}
	}()
	NewRegistry(Options{KVConfigPath: filepath.Join(t.TempDir(), "kv.json"), Logger: testlog.New(t, "namesrv")})
}

// Concurrent changes from several connections are all written; readers run meanwhile.
func TestKVConfigConcurrentChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvConfig.json")
	s := startServer(t, Options{KVConfigPath: path})
	s.r.RegisterBroker(embeddedA)
	const writers, each = 4, 10
	// invoke is call without t.Fatal, for the writers' goroutines.
	invoke := func(cl *remoting.Client, code int32, ns, key string) error {
		ext := map[string]string{"namespace": ns, "key": key}
		if code == protocol.ReqPutKVConfig {
			ext["value"] = "v"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cl.Invoke(ctx, gocRequest(code, ext, nil))
		if err == nil && resp.Code != protocol.RespSuccess {
			err = fmt.Errorf("%s %s/%s: code %d %s", protocol.RequestCodeName(code), ns, key, resp.Code, resp.Remark)
		}
		return err
	}
	var wg sync.WaitGroup
	for w := range writers {
		cl := dial(t, s.addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns := fmt.Sprintf("ns%d", w%2)
			for i := range each {
				key := fmt.Sprintf("w%d-%d", w, i)
				if err := invoke(cl, protocol.ReqPutKVConfig, ns, key); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					if err := invoke(cl, protocol.ReqDeleteKVConfig, ns, key); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	rc := dial(t, s.addr)
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err1 := rc.Invoke(ctx, routeReq("T"))
			_, err2 := rc.Invoke(ctx, gocRequest(protocol.ReqGetKVListByNamespace, map[string]string{"namespace": "ns0"}, nil))
			cancel()
			if err := errors.Join(err1, err2); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-readerDone

	r2, err := OpenRegistry(Options{KVConfigPath: path, Logger: testlog.New(t, "namesrv")})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	n := 0
	for w := range writers {
		for i := range each {
			_, ok := r2.kv[fmt.Sprintf("ns%d", w%2)][fmt.Sprintf("w%d-%d", w, i)]
			if ok != (i%3 != 0) {
				t.Errorf("w%d-%d present=%v after reopening", w, i, ok)
			}
			if ok {
				n++
			}
		}
	}
	if n != writers*(each-4) {
		t.Fatalf("%d keys after reopening", n)
	}
}
