package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/store"
)

// writeConf writes lines to a broker.conf in a temporary directory.
func writeConf(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "broker.conf")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestHonouredKeys(t *testing.T) {
	root := t.TempDir()
	conf := writeConf(t,
		"brokerClusterName=C1", "brokerName=b1", "brokerId=0", "brokerRole=ASYNC_MASTER",
		"namesrvAddr=10.0.0.1:9876;10.0.0.2:9876", "brokerIP1=192.0.2.7", "listenPort=10999", "bindAddress=127.0.0.1",
		"autoCreateTopicEnable=false", "defaultTopicQueueNums=4", "maxMessageSize=65536",
		"storePathRootDir="+root, "storePathCommitLog="+root+"/commitlog/", "flushDiskType=SYNC_FLUSH",
		"fileReservedTime=48", "diskMaxUsedSpaceRatio=88", "mappedFileSizeCommitLog=67108864",
		"mappedFileSizeConsumeQueue=600000", "maxHashSlotNum=1000", "maxIndexNum=4000",
		"syncFlushTimeout=2500", "flushIntervalConsumeQueue=700", "flushConsumeQueueThoroughInterval=20000",
		"cleanResourceInterval=3000", "osPageCacheBusyTimeOutMills=900", "flushConsumerOffsetInterval=4000",
		"registerNameServerPeriod=15000", "serverChannelMaxIdleTimeSeconds=60",
		"messageDelayLevel=1s 2s", "timerMaxDelaySec=3600", "transactionTimeOut=3000",
		"transactionCheckInterval=1000", "transactionCheckMax=5", "enablePropertyFilter=false",
		"aclEnable=false", "authenticationEnabled=false", "authorizationEnabled=false",
		"enableControllerMode=false", "enableDLegerCommitLog=false")
	c, err := parseConfig([]string{"-c", conf})
	if err != nil {
		t.Fatal(err)
	}
	want := store.Options{
		FlushMode: mustFlush(t, "sync"), SegmentSize: 64 << 20, ConsumeQueueEntries: 30000,
		IndexSlots: 1000, IndexMaxEntries: 4000, RetentionTime: 48 * time.Hour, DiskUsageRatio: 0.88,
		SyncFlushTimeout: 2500 * time.Millisecond, FlushInterval: 700 * time.Millisecond,
		CheckpointInterval: 20 * time.Second, CleanInterval: 3 * time.Second, ScrubRate: 8 << 20,
		RecycleSegments: 1,
	}
	if !reflect.DeepEqual(c.store, want) {
		t.Fatalf("store options\n got %+v\nwant %+v", c.store, want)
	}
	if c.cluster != "C1" || c.brokerName != "b1" || c.dataDir != root || c.listen != "127.0.0.1:10999" ||
		c.brokerIP != "192.0.2.7" || !slices.Equal(c.namesrvs, []string{"10.0.0.1:9876", "10.0.0.2:9876"}) ||
		c.autoCreate || c.defaultQueues != 4 || c.maxMessageSize != 65536 {
		t.Fatalf("broker settings: %+v", c)
	}
	if c.busyTimeout != 900*time.Millisecond || c.offsetFlush != 4*time.Second || c.registerInterval != 15*time.Second ||
		c.idleTimeout != time.Minute {
		t.Fatalf("tuning: %+v", c)
	}
	if c.delayLevels != "1s 2s" || c.txTimeout != 3*time.Second || c.txCheckInterval != time.Second ||
		c.txCheckMax != 5 || c.propertyFilter || c.timerMaxDelay != time.Hour {
		t.Fatalf("feature keys: %+v", c)
	}
	if len(c.notes) != 0 {
		t.Fatalf("notes for honoured keys: %+v", c.notes)
	}
	// RocketMQ 4's spellings.
	c, err = parseConfig([]string{"--config", writeConf(t, "mapedFileSizeCommitLog=1048576", "mapedFileSizeConsumeQueue=2000")})
	if err != nil || c.store.SegmentSize != 1<<20 || c.store.ConsumeQueueEntries != 100 {
		t.Fatalf("RocketMQ 4 keys: %v %+v", err, c)
	}
}

func mustFlush(t *testing.T, s string) store.FlushMode {
	t.Helper()
	m, err := store.ParseFlushMode(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestFlagsWin: a flag given on the command line wins over the file.
func TestFlagsWin(t *testing.T) {
	conf := writeConf(t, "brokerName=from-file", "listenPort=10999", "flushDiskType=SYNC_FLUSH",
		"storePathRootDir=/from/file", "storePathCommitLog=/elsewhere/commitlog", "namesrvAddr=10.0.0.1:9876")
	c, err := parseConfig([]string{"--config", conf, "--broker-name", "from-flag", "--listen", "127.0.0.1:0",
		"--flush", "async", "--data-dir", "/from/flag", "--namesrv", "10.0.0.9:9876"})
	if err != nil {
		t.Fatal(err)
	}
	if c.brokerName != "from-flag" || c.listen != "127.0.0.1:0" || c.store.FlushMode.String() != "async" ||
		c.dataDir != "/from/flag" || !slices.Equal(c.namesrvs, []string{"10.0.0.9:9876"}) {
		t.Fatalf("config %+v", c)
	}
}

// TestListenPortAlone: listenPort changes only the port; the host, and so
// the advertised address, are what they are without it.
func TestListenPortAlone(t *testing.T) {
	without, err := parseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	with, err := parseConfig([]string{"-c", writeConf(t, "listenPort=10999")})
	if err != nil {
		t.Fatal(err)
	}
	if with.listen != "0.0.0.0:10999" || without.listen != "0.0.0.0:10911" {
		t.Fatalf("listen: with listenPort %q, without %q", with.listen, without.listen)
	}
	for _, host := range []string{"0.0.0.0", "127.0.0.1"} {
		a1, err1 := advertiseAddr("", "", &net.TCPAddr{IP: net.ParseIP(host), Port: 10911})
		a2, err2 := advertiseAddr("", "", &net.TCPAddr{IP: net.ParseIP(host), Port: 10999})
		h1, _, _ := net.SplitHostPort(a1)
		h2, _, _ := net.SplitHostPort(a2)
		if err1 != nil || err2 != nil || h1 != h2 {
			t.Fatalf("advertised host on %s changes with the port: %q, %q (%v, %v)", host, a1, a2, err1, err2)
		}
	}
	// A loopback listen address is advertised as loopback, port or not.
	if a, _ := advertiseAddr("", "", &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 10999}); a != "127.0.0.1:10999" {
		t.Fatalf("advertised %q for a loopback listener", a)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := parseConfig([]string{"--flush", "sometimes"}); err == nil {
		t.Fatal("bad flush mode accepted")
	}
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{"brokerNmae=typo"}, `line 1: unknown key "brokerNmae" (did you mean "brokerName"?)`},
		{[]string{"# ok", "noSuchKeyAnywhereAtAll=1"}, `line 2: unknown key "noSuchKeyAnywhereAtAll";`},
		{[]string{"brokerRole=SLAVE", "brokerId=0"}, "brokerRole=SLAVE with brokerId=0: a slave's brokerId (--broker-id) must be 1 or more"},
		{[]string{"haListenPort=ha"}, "haListenPort=ha: want a port number"},
		{[]string{"haMasterAddress=nowhere"}, "want host:port"},
		{[]string{"accessMessageInMemoryMaxRatio=0"}, "want a percentage above 0"},
		{[]string{"brokerRole=BOSS"}, "brokerRole=BOSS: want ASYNC_MASTER, SYNC_MASTER or SLAVE"},
		{[]string{"aclEnable=maybe"}, "aclEnable=maybe: strconv.ParseBool"},
		{[]string{"enableControllerMode=true"}, "enableControllerMode=true needs controllerAddr"},
		{[]string{"enableControllerMode=true", "controllerAddr=127.0.0.1:9878", "haMasterAddress=10.0.0.1:10912"}, "the controller names the master"},
		{[]string{"enableControllerMode=true", "controllerAddr=127.0.0.1:9878", "minInSyncReplicas=0"}, "want a positive integer"},
		{[]string{"haMaxTimeSlaveNotCatchup=soon"}, "want a positive number of milliseconds"},
		{[]string{"enableDLegerCommitLog=true"}, "Apogee has no DLedger commit log"},
		{[]string{"storePathRootDir=/a", "storePathCommitLog=/b/commitlog"}, "storePathCommitLog=/b/commitlog: Apogee keeps the commit log in the data directory's commitlog/ (/a/commitlog)"},
		{[]string{"mappedFileSizeConsumeQueue=6000001"}, "want a multiple of 20"},
		{[]string{"fileReservedTime=-1"}, "fileReservedTime=-1: want a positive integer"},
		{[]string{"diskMaxUsedSpaceRatio=101"}, "want a percentage"},
		{[]string{"listenPort=http"}, "want a port number"},
		{[]string{"syncFlushTimeout=0"}, "want a positive number of milliseconds"},
		{[]string{"autoCreateTopicEnable=yes please"}, "autoCreateTopicEnable=yes please"},
	} {
		_, err := parseConfig([]string{"--config", writeConf(t, tc.lines...)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.lines, err, tc.want)
		}
	}
}

// TestIgnoredKeysAreNoted: a Java key Apogee has no use for is accepted and
// noted once, with a reason; so is a master's brokerId, which becomes 0.
func TestIgnoredKeysAreNoted(t *testing.T) {
	c, err := parseConfig([]string{"-c", writeConf(t, "deleteWhen=04", "sendMessageThreadPoolNums=16",
		"haSendHeartbeatInterval=1000", "brokerRole=SYNC_MASTER", "brokerId=3", "rmqAddressServerDomain=jmenv.tbsite.net")})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range c.notes {
		got = append(got, fmt.Sprint(n.msg, n.attrs))
	}
	want := []string{
		"broker.conf: key ignored[key deleteWhen value 04 why " + ignoredWhy["deleteWhen"] + "]",
		"broker.conf: key ignored[key sendMessageThreadPoolNums value 16 why tunes a thread pool or its queue: Apogee serves requests on goroutines and has no pools to size]",
		"broker.conf: key ignored[key haSendHeartbeatInterval value 1000 why " + ignoredReason("haSendHeartbeatInterval") + "]",
		"broker.conf: key ignored[key rmqAddressServerDomain value jmenv.tbsite.net why " + ignoredWhy["rmqAddressServerDomain"] + "]",
		"brokerId ignored: a master is broker 0, as in RocketMQ[brokerId 3 brokerRole SYNC_MASTER]",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("notes:\n got %q\nwant %q", got, want)
	}
	if c.role != roleSyncMaster || c.brokerID != 0 {
		t.Fatalf("role %s id %d, want SYNC_MASTER 0", c.role, c.brokerID)
	}
}

// TestReplicationKeys: the keys and flags of a group, and flags winning
// over the file.
func TestReplicationKeys(t *testing.T) {
	conf := writeConf(t, "brokerRole=SLAVE", "brokerId=2", "haListenPort=30912", "brokerIP2=10.0.0.9",
		"haMasterAddress=10.0.0.1:10912", "slaveReadEnable=true", "accessMessageInMemoryMaxRatio=0.5",
		"haMaxGapNotInSync=1048576")
	c, err := parseConfig([]string{"-c", conf})
	if err != nil {
		t.Fatal(err)
	}
	if c.role != roleSlave || c.brokerID != 2 || c.haListen != ":30912" || c.brokerIP2 != "10.0.0.9" ||
		c.haMasterAddr != "10.0.0.1:10912" || !c.slaveReadEnable || c.memoryRatio != 0.5 || c.store.MaxReplicaGap != 1<<20 {
		t.Fatalf("config %+v", c)
	}
	c, err = parseConfig([]string{"-c", conf, "--broker-role", "sync_master", "--broker-id", "0", "--ha-listen", "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if c.role != roleSyncMaster || c.brokerID != 0 || c.haListen != "127.0.0.1:0" {
		t.Fatalf("flags did not win: %+v", c)
	}
	if _, err := parseConfig([]string{"--broker-role", "SLAVE"}); err == nil || !strings.Contains(err.Error(), "must be 1 or more") {
		t.Fatalf("a slave without an id: %v", err)
	}
	if _, err := parseConfig([]string{"--broker-role", "BOSS"}); err == nil || !strings.Contains(err.Error(), "want ASYNC_MASTER, SYNC_MASTER or SLAVE") {
		t.Fatalf("an unknown role: %v", err)
	}
	for _, tc := range []struct{ flag, listenFlag, bound, want string }{
		{"", "0.0.0.0:10911", "0.0.0.0:10911", ":10912"},
		{"", "127.0.0.1:0", "127.0.0.1:40000", "127.0.0.1:0"},
		{":30912", "127.0.0.1:10911", "127.0.0.1:10911", "127.0.0.1:30912"},
		{"10.1.1.1:5", "127.0.0.1:10911", "127.0.0.1:10911", "10.1.1.1:5"},
	} {
		bound, _ := net.ResolveTCPAddr("tcp", tc.bound)
		got, err := haListenAddr(tc.flag, tc.listenFlag, bound)
		if err != nil || got != tc.want {
			t.Errorf("haListenAddr(%q, %q, %s) = %q, %v; want %q", tc.flag, tc.listenFlag, tc.bound, got, err, tc.want)
		}
	}
}

// TestKeyLists keeps the lists consistent: every honoured key and every key
// with its own reason is a key of the Java broker, and every Java key gets a
// reason or a mapping.
func TestKeyLists(t *testing.T) {
	for k := range honoured {
		if _, ok := javaKeyClass[k]; !ok {
			t.Errorf("honoured key %q is not a key of the Java broker", k)
		}
	}
	for k := range ignoredWhy {
		if _, ok := javaKeyClass[k]; !ok {
			t.Errorf("ignoredWhy names %q, not a key of the Java broker", k)
		}
		if _, ok := honoured[k]; ok {
			t.Errorf("%q is both honoured and ignored", k)
		}
	}
	if n := len(javaKeyClass); n < 450 {
		t.Fatalf("only %d Java keys listed", n)
	}
	for _, c := range javaKeys {
		if !slices.IsSorted(c.keys) {
			t.Errorf("the keys of %s are not sorted", c.name)
		}
	}
}

var update = flag.Bool("update", false, "rewrite the broker.conf key table in docs/operations.md")

// TestKeyTableInDocs: docs/operations.md's table of broker.conf keys is the
// one keyTable renders from the lists above, so the two cannot drift.
// `go test ./cmd/apogee-broker -run TestKeyTableInDocs -update` rewrites it.
func TestKeyTableInDocs(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "operations.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q and %q", path, tableBegin, tableEnd)
	}
	want := doc[:i] + tableBegin + "\n" + keyTable() + tableEnd + doc[j+len(tableEnd):]
	if want == doc {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s's key table differs from the code's lists; run go test ./cmd/apogee-broker -run TestKeyTableInDocs -update", path)
}

func TestReachesSelf(t *testing.T) {
	own := []*net.TCPAddr{
		{IP: net.ParseIP("0.0.0.0"), Port: 9876},    // the embedded name server on every interface
		{IP: net.ParseIP("127.0.0.1"), Port: 10911}, // the broker on loopback only
	}
	local := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("192.0.2.10")}
	for addr, want := range map[string]bool{
		"127.0.0.1:9876":   true,
		"localhost:9876":   true,
		"0.0.0.0:9876":     true,
		"[::1]:9876":       true,
		"192.0.2.10:9876":  true,
		"127.0.0.1:10911":  true,
		"192.0.2.10:10911": false, // the broker listens on loopback only
		"192.0.2.99:9876":  false, // another host
		"127.0.0.1:9877":   false,
		"not-an-address":   false,
	} {
		if got := reachesSelf(addr, own, local); got != want {
			t.Errorf("reachesSelf(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestReservationRefusesUntilListen: a reserved address refuses connections
// (so a client does not wait on a broker whose store is still opening), a
// second listener cannot take it once it listens, and then it accepts.
func TestReservationRefusesUntilListen(t *testing.T) {
	r, err := reserve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	addr := r.Addr().String()
	if r.Addr().Port == 0 {
		t.Fatalf("reserved %s: no port", addr)
	}
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatal("a connection to a reserved, not yet listening address was accepted")
	}
	l, err := r.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l2, err := net.Listen("tcp", addr); err == nil {
		l2.Close()
		t.Fatal("a second listener took the broker's address")
	}
	done := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial after Listen: %v", err)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatalf("accept: %v", err)
	}
	// A wildcard reservation reports the wildcard it was given.
	w, err := reserve("0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.Addr().IP.IsUnspecified() || w.Addr().IP.To4() == nil {
		t.Fatalf("0.0.0.0 reserved as %s", w.Addr())
	}
}

func TestIntegrityFlags(t *testing.T) {
	c, err := parseConfig([]string{"--recover-accept-loss", "--scrub-rate", "0", "--receive-budget", "1048576"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.store.AcceptLoss || c.store.ScrubRate != -1 || c.receiveBudget != 1<<20 {
		t.Fatalf("accept loss %v, scrub rate %d, receive budget %d", c.store.AcceptLoss, c.store.ScrubRate, c.receiveBudget)
	}
	if c, err = parseConfig(nil); err != nil || c.store.AcceptLoss || c.store.ScrubRate != 8<<20 {
		t.Fatalf("defaults: %+v %v", c.store, err)
	}
	if _, err := parseConfig([]string{"--receive-budget", "-1"}); err == nil {
		t.Fatal("a negative receive budget was accepted")
	}
	for args, want := range map[string]int{"": 1, "--recycle-segments=0": -1, "--recycle-segments=3": 3} {
		c, err := parseConfig(strings.Fields(args))
		if err != nil || c.store.RecycleSegments != want {
			t.Errorf("%q: recycle segments %v (%v), want %d", args, c, err, want)
		}
	}
	if _, err := parseConfig([]string{"--recycle-segments", "-1"}); err == nil {
		t.Fatal("a negative --recycle-segments was accepted")
	}
}

// TestControllerModeKeys: controller mode's keys and flags; the role and
// id checks of a group are the controller's then.
func TestControllerModeKeys(t *testing.T) {
	conf := writeConf(t, "enableControllerMode=true", "controllerAddr=127.0.0.1:9878;127.0.0.1:9879",
		"brokerRole=SLAVE", "brokerId=0", "inSyncReplicas=2", "minInSyncReplicas=2", "allAckInSyncStateSet=true",
		"haMaxTimeSlaveNotCatchup=5000", "controllerHeartBeatTimeoutMills=4000", "brokerHeartbeatInterval=500")
	c, err := parseConfig([]string{"-c", conf})
	if err != nil {
		t.Fatal(err)
	}
	if !c.controllerMode || strings.Join(c.controllerAddrs, ";") != "127.0.0.1:9878;127.0.0.1:9879" ||
		c.inSyncReplicas != 2 || c.minInSyncReplicas != 2 || !c.allAckInSyncStateSet ||
		c.maxTimeSlaveNotCatchup != 5*time.Second || c.controllerHeartbeatTimeout != 4*time.Second ||
		c.controllerHeartbeatInterval != 500*time.Millisecond {
		t.Fatalf("config %+v", c)
	}
	c, err = parseConfig([]string{"-c", conf, "--controller-addr", "10.0.0.1:9878"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.controllerAddrs, ";") != "10.0.0.1:9878" {
		t.Fatalf("--controller-addr did not win: %v", c.controllerAddrs)
	}
	c, err = parseConfig([]string{"--enable-controller-mode", "--controller-addr", "127.0.0.1:1;127.0.0.1:2"})
	if err != nil || !c.controllerMode || len(c.controllerAddrs) != 2 {
		t.Fatalf("flags: %+v %v", c, err)
	}
}
