package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/namesrv"
)

// writeConf writes lines to a namesrv.properties in a temporary directory.
func writeConf(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "namesrv.properties")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDefaults(t *testing.T) {
	c, err := parseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != "0.0.0.0:9876" || c.dataDir != "./apogee-namesrv-data" ||
		c.kvPath != filepath.Join("apogee-namesrv-data", "kvConfig.json") ||
		c.brokerTimeout != namesrv.DefaultBrokerTimeout || c.scanInterval != namesrv.DefaultScanInterval ||
		c.idleTimeout != 0 || c.logLevel != "info" {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestHonouredKeys(t *testing.T) {
	kv := filepath.Join(t.TempDir(), "ns", "kv.json")
	c, err := parseConfig([]string{"-c", writeConf(t,
		"bindAddress=10.1.2.3", "listenPort=9977", "kvConfigPath="+kv, "scanNotActiveBrokerInterval=2500",
		"serverChannelMaxIdleTimeSeconds=60", "enableControllerInNamesrv=false")})
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != "10.1.2.3:9977" || c.kvPath != kv || c.dataDir != filepath.Dir(kv) ||
		c.scanInterval != 2500*time.Millisecond || c.idleTimeout != time.Minute || len(c.notes) != 0 {
		t.Fatalf("config: %+v", c)
	}
	// listenPort alone keeps the default host.
	c, err = parseConfig([]string{"-c", writeConf(t, "listenPort=9988")})
	if err != nil || c.listen != "0.0.0.0:9988" {
		t.Fatalf("listenPort alone: %v %+v", err, c)
	}
}

func TestFlagsWinOverFile(t *testing.T) {
	dir := t.TempDir()
	c, err := parseConfig([]string{"-c", writeConf(t, "listenPort=9977", "kvConfigPath=/elsewhere/kv.json",
		"scanNotActiveBrokerInterval=2500"), "--listen", "127.0.0.1:1234", "--data-dir", dir, "--scan-interval", "1s"})
	if err != nil {
		t.Fatal(err)
	}
	if c.listen != "127.0.0.1:1234" || c.dataDir != dir || c.kvPath != filepath.Join(dir, "kvConfig.json") ||
		c.scanInterval != time.Second {
		t.Fatalf("config: %+v", c)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{"listenPort=http"}, "line 1: listenPort=http: want a port number"},
		{[]string{"# c", "bindAddress=a b"}, "line 2: bindAddress=a b: want a host"},
		{[]string{"scanNotActiveBrokerInterval=-5"}, "want a positive number of milliseconds"},
		{[]string{"serverChannelMaxIdleTimeSeconds=0"}, "want a positive number of seconds"},
		{[]string{"enableControllerInNamesrv=true"}, "controller mode is not implemented"},
		{[]string{"enableControllerInNamesrv=maybe"}, "invalid syntax"},
		{[]string{"kvConfigPath=/dir/"}, "want a file path"},
		{[]string{"kvConfigPat=/x"}, `unknown key "kvConfigPat" (did you mean "kvConfigPath"?)`},
		{[]string{"completelyUnknown=1"}, `unknown key "completelyUnknown"; the keys`},
		{[]string{"brokerName=broker-a"}, `unknown key "brokerName"`}, // a broker.conf given by mistake
	} {
		_, err := parseConfig([]string{"-c", writeConf(t, tc.lines...)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.lines, err, tc.want)
		}
	}
	if _, err := parseConfig([]string{"-c", filepath.Join(t.TempDir(), "missing")}); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("missing file: %v", err)
	}
	for _, args := range [][]string{{"--broker-timeout", "0s"}, {"--scan-interval", "-1s"}, {"stray"}} {
		if _, err := parseConfig(args); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

// Every key of the Java name server's classes is honoured or ignored with a
// reason; the lists hold no duplicates within a class, and the keys the
// honoured table applies are keys of those classes.
func TestKeyLists(t *testing.T) {
	for name, keys := range map[string][]string{"NamesrvConfig": namesrvConfigKeys, "NettyServerConfig": nettyServerKeys, "NettyClientConfig": nettyClientKeys} {
		if !slices.IsSorted(keys) {
			t.Errorf("%s keys are not sorted", name)
		}
		if len(slices.Compact(slices.Clone(keys))) != len(keys) {
			t.Errorf("%s keys repeat", name)
		}
		for _, k := range keys {
			_, honouredKey := honoured[k]
			why, ok := ignored(k)
			if honouredKey == ok {
				t.Errorf("%s.%s: honoured=%v ignored=%v", name, k, honouredKey, ok)
			}
			if ok && why == "" {
				t.Errorf("%s.%s: ignored without a reason", name, k)
			}
		}
	}
	all := allKeys()
	for k := range honoured {
		if !slices.Contains(all, k) {
			t.Errorf("honoured key %s is in no Java class", k)
		}
	}
	for k := range ignoredWhy {
		if !slices.Contains(namesrvConfigKeys, k) {
			t.Errorf("reason given for %s, which is not a NamesrvConfig key", k)
		}
	}
	// The thread-pool reason covers exactly the pool keys.
	for _, k := range namesrvConfigKeys {
		why, _ := ignored(k)
		if strings.Contains(why, "thread pool") != strings.Contains(k, "ThreadPool") {
			t.Errorf("%s: reason %q", k, why)
		}
	}
}

func TestIgnoredKeysAreNoted(t *testing.T) {
	c, err := parseConfig([]string{"-c", writeConf(t, "rocketmqHome=/opt/rocketmq", "serverWorkerThreads=8",
		"defaultThreadPoolNums=16", "connectTimeoutMillis=3000", "listenPort=9876")})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, n := range c.notes {
		keys = append(keys, n.attrs[1].(string))
	}
	if !slices.Equal(keys, []string{"rocketmqHome", "serverWorkerThreads", "defaultThreadPoolNums", "connectTimeoutMillis"}) {
		t.Fatalf("notes for %v", keys)
	}
}

// The table of honoured keys in docs/operations.md lists exactly the keys
// this command applies.
func TestHonouredKeysInDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "### namesrv.properties")
	if start < 0 {
		t.Fatal("docs/operations.md has no namesrv.properties section")
	}
	section := doc[start:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	var listed []string
	for _, line := range strings.Split(section, "\n") {
		if k, ok := strings.CutPrefix(line, "| `"); ok {
			if i := strings.Index(k, "`"); i > 0 {
				listed = append(listed, k[:i])
			}
		}
	}
	var want []string
	for k := range honoured {
		want = append(want, k)
	}
	slices.Sort(want)
	slices.Sort(listed)
	if !slices.Equal(listed, want) {
		t.Fatalf("docs list %v; the command honours %v", listed, want)
	}
}
