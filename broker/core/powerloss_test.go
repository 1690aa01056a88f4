package core

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/delay"
	"github.com/apogeemq/apogee/broker/timerwheel"
	"github.com/apogeemq/apogee/broker/txn"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/crashfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// stateFileNames are the core's state files under DataDir/config.
var stateFileNames = []string{TopicsFile, SubscriptionGroupFile, ConsumerOffsetFile,
	delay.StateFile, timerwheel.StateFile, txn.CheckpointFileName, PopStateFile}

// versions records the writes of each state file (by name): the hash of
// every version in the order its write began, and how many of the first
// ones had returned.
type versions struct {
	mu       sync.Mutex
	hashes   map[string][][32]byte
	returned map[string]int // a write of version i returned: returned >= i+1
}

// writer is Options.WriteConfigFile: writeStateFile on fsys (the default's
// own code) with the versions recorded around it.
func (v *versions) writer(fsys vfs.FS) func(string, []byte) error {
	return func(path string, data []byte) error {
		name := filepath.Base(path)
		v.mu.Lock()
		i := len(v.hashes[name])
		v.hashes[name] = append(v.hashes[name], sha256.Sum256(data))
		v.mu.Unlock()
		if err := writeStateFile(fsys, path, data); err != nil {
			return err
		}
		v.mu.Lock()
		v.returned[name] = max(v.returned[name], i+1)
		v.mu.Unlock()
		return nil
	}
}

func (v *versions) snapshot() (map[string][][32]byte, map[string]int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	h := map[string][][32]byte{}
	for k, s := range v.hashes {
		h[k] = slices.Clone(s)
	}
	r := map[string]int{}
	for k, n := range v.returned {
		r[k] = n
	}
	return h, r
}

// checkClone checks every state file in a clone's config directory: a file
// of which a write had returned before the crash holds that version or a
// later one that had begun by the end of the clone (never an older one, an
// empty or torn one, or none); any other holds a version that had begun or
// is absent; a .bak holds some version written.
func checkClone(cfg string, returned map[string]int, hashes map[string][][32]byte) error {
	for _, name := range stateFileNames {
		hs := hashes[name]
		b, err := os.ReadFile(filepath.Join(cfg, name))
		switch {
		case errors.Is(err, os.ErrNotExist):
			if returned[name] > 0 {
				return fmt.Errorf("%s is missing, but %d writes of it had returned", name, returned[name])
			}
		case err != nil:
			return err
		default:
			i := slices.Index(hs, sha256.Sum256(b))
			if i < 0 {
				return fmt.Errorf("%s holds %d bytes that no write of it wrote (%d written): torn or empty", name, len(b), len(hs))
			}
			// Find the latest matching version (contents repeat).
			for j := len(hs) - 1; j > i; j-- {
				if hs[j] == hs[i] {
					i = j
					break
				}
			}
			if i+1 < returned[name] {
				return fmt.Errorf("%s holds version %d, but version %d's write had returned", name, i+1, returned[name])
			}
		}
		if b, err := os.ReadFile(filepath.Join(cfg, name+BakSuffix)); err == nil && !slices.Contains(hs, sha256.Sum256(b)) {
			return fmt.Errorf("%s holds %d bytes that no write of %s wrote", name+BakSuffix, len(b), name)
		}
	}
	return nil
}

// powerLossOptions are the options of a core that writes its state files
// often: progress every 20 ms, offsets every 20 ms, delays of 30 and 60 ms.
func powerLossOptions(t *testing.T, dir string) Options {
	o := testOptions(t, dir)
	o.Store.SegmentSize, o.Store.ConsumeQueueEntries, o.MaxMessageSize = 1<<20, 1024, 64<<10
	o.OffsetFlushInterval, o.ProgressFlushInterval = 20*time.Millisecond, 20*time.Millisecond
	o.DelayLevels = "30ms 60ms"
	o.TransactionTimeout, o.TransactionCheckInterval = time.Hour, time.Hour
	return o
}

// load drives a core's state files: topics and groups created (each
// answered once its file holds it), offsets committed, delay and timer
// messages delivered, transactions prepared and ended, messages popped
// and acked. It runs until stop closes and returns the first error.
func load(c *Core, stop <-chan struct{}) error {
	for _, topic := range []string{"D", "P", "X"} {
		if err := c.Admin().CreateTopic(&TopicRequest{Topic: topic, ReadQueueNums: 2, WriteQueueNums: 2, Perm: protocol.PermRead | protocol.PermWrite}); err != nil {
			return err
		}
	}
	var res SendResult
	send := func(topic string, sysFlag int32, props []byte) error {
		return c.Send(&SendRequest{ProducerGroup: []byte("pg"), Topic: []byte(topic), QueueID: -1, SysFlag: sysFlag,
			BornTimestamp: time.Now().UnixMilli(), Properties: props, Body: []byte("body")}, &res)
	}
	var pr PopResult
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		var err error
		switch i % 7 {
		case 0:
			err = c.Admin().CreateTopic(&TopicRequest{Topic: fmt.Sprintf("T%04d", i), ReadQueueNums: 1, WriteQueueNums: 1, Perm: protocol.PermRead | protocol.PermWrite})
		case 1:
			err = c.Admin().UpdateSubscriptionGroup(protocol.SubscriptionGroupConfig{GroupName: fmt.Sprintf("G%04d", i), ConsumeEnable: true})
		case 2:
			err = c.UpdateConsumerOffset([]byte("X"), []byte("cg"), int32(i/7%2), int64(i))
		case 3:
			err = send("D", 0, message.AppendProperty(nil, message.PropDelay, strconv.Itoa(1+i/7%2)))
			if err == nil {
				err = send("X", 0, message.AppendProperty(nil, message.PropTimerDeliverMS, strconv.FormatInt(time.Now().Add(40*time.Millisecond).UnixMilli(), 10)))
			}
		case 4:
			props := message.AppendProperty(message.AppendProperty(nil, message.PropTranMsg, "true"), message.PropProducerGroup, "pg")
			if err = send("X", message.TxPreparedType, props); err != nil {
				break
			}
			var off int64
			if _, off, err = message.ParseOffsetMsgID(string(res.MsgID)); err != nil {
				break
			}
			_, err = c.EndTransaction(&EndTransactionRequest{ProducerGroup: "pg", TranStateTableOffset: res.QueueOffset,
				CommitLogOffset: off, CommitOrRollback: protocol.TransactionCommitType})
		case 5:
			err = send("P", 0, nil)
		case 6:
			err = c.Pop(&PopRequest{Group: []byte("popg"), Topic: []byte("P"), QueueID: -1, MaxMsgs: 4, InvisibleTime: 50, FromFirst: true}, &pr)
			for j, m := range pr.Msgs {
				if err == nil && j%2 == 0 {
					if aerr := c.Ack([]byte("popg"), []byte("P"), m.QueueID, m.Offset, Receipt{QueueID: m.QueueID, PopTime: pr.PopTime}); Code(aerr) != protocol.RespSuccess && Code(aerr) != protocol.RespNoMessage {
						err = aerr
					}
				}
			}
		}
		if err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// The broker's state files under power loss: while a core under load
// writes every one of them (topics.json, subscriptionGroup.json,
// consumerOffset.json, delayOffset.json, timerCheckpoint.json,
// transactionCheckpoint.json, popState.json), crash clones of its data
// directory (the store's files included: one Options.FS carries them all)
// are taken at random moments. Each holds, for every state file, the
// version of the last write that returned before the crash or of one in
// flight, never an older, empty or torn one; and a core opened on the
// clone loads those files as they are (no fallback to a .bak) and serves
// what they hold.
func TestStateFilesPowerLoss(t *testing.T) {
	root := t.TempDir()
	fsys, err := crashfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	v := &versions{hashes: map[string][][32]byte{}, returned: map[string]int{}}
	o := powerLossOptions(t, filepath.Join(root, "broker"))
	o.FS, o.WriteConfigFile = fsys, v.writer(fsys)
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- load(c, stop) }()
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			<-done
		}
		c.Shutdown()
	}()

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	lost, inflight := 0, 0
	for i := range 16 {
		time.Sleep(time.Duration(20+rng.IntN(100)) * time.Millisecond)
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("load: %v", err)
		default:
		}
		co := crashfs.CloneOptions{Mode: crashfs.Mode(i % 2), Seed: rng.Uint64()}
		_, returned := v.snapshot()
		clone := filepath.Join(t.TempDir(), "clone")
		st, err := fsys.CrashClone(clone, co)
		if err != nil {
			t.Fatal(err)
		}
		hashes, _ := v.snapshot()
		if st.UnsyncedEntries > 0 {
			lost++
		}
		for name, hs := range hashes {
			if len(hs) > returned[name] {
				inflight++ // a write of name began before the clone ended and had not returned when it began
				break
			}
		}
		where := fmt.Sprintf("test seed %d, clone %d (%s, seed %d; %v)", seed, i, co.Mode, co.Seed, st)
		dir := filepath.Join(clone, "broker")
		if err := checkClone(filepath.Join(dir, ConfigDir), returned, hashes); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		reopen(t, where, dir)
	}
	close(stop)
	stopped = true
	if err := <-done; err != nil {
		t.Fatalf("load: %v", err)
	}
	_, returned := v.snapshot()
	t.Logf("test seed %d: of 16 clones, %d lost unsynced directory entries, %d caught a state file's write in flight; writes returned: %v",
		seed, lost, inflight, returned)
	for _, name := range stateFileNames {
		if returned[name] < 2 {
			t.Errorf("%s was written %d times: the load did not exercise it", name, returned[name])
		}
	}
	if lost == 0 {
		t.Fatalf("test seed %d: no clone had an unsynced directory entry to lose: the test did not crash a write", seed)
	}
}

// reopen opens a core on a crash clone's data directory and checks that it
// loaded every state file as it is and serves what topics.json,
// subscriptionGroup.json and consumerOffset.json hold.
func reopen(t *testing.T, where, dir string) {
	t.Helper()
	logs := &logCounter{}
	o := powerLossOptions(t, dir)
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	cfg := filepath.Join(dir, ConfigDir)
	// What the files hold, read before the core may write them again.
	var topics protocol.TopicConfigSerializeWrapper
	var groups protocol.SubscriptionGroupWrapper
	var offsets protocol.ConsumerOffsetSerializeWrapper
	for name, w := range map[string]interface{ Decode([]byte) error }{TopicsFile: &topics, SubscriptionGroupFile: &groups, ConsumerOffsetFile: &offsets} {
		if b, err := os.ReadFile(filepath.Join(cfg, name)); err == nil {
			if err := w.Decode(b); err != nil {
				t.Fatalf("%s: %s does not decode: %v", where, name, err)
			}
		}
	}
	c, err := New(o)
	if err != nil {
		t.Fatalf("%s: the core does not open on the clone: %v", where, err)
	}
	defer c.Shutdown()
	if n := logs.count("previous version"); n > 0 {
		t.Fatalf("%s: a state file fell back to its .bak (%d times): %q", where, n, logs.lines)
	}
	for name := range topics.TopicConfigTable {
		if _, ok := c.TopicConfig(name); !ok {
			t.Fatalf("%s: topic %s is in topics.json but the core does not have it", where, name)
		}
	}
	for name := range groups.SubscriptionGroupTable {
		if _, err := c.SubscriptionGroup([]byte(name)); err != nil {
			t.Fatalf("%s: group %s is in subscriptionGroup.json but the core does not have it: %v", where, name, err)
		}
	}
	for key, qs := range offsets.OffsetTable {
		topic, group, _ := cutKey(key)
		for q, off := range qs {
			if got, ok := c.CommittedOffset(topic, group, q); !ok || got != off {
				t.Fatalf("%s: %s queue %d: the core has offset %d (%v), consumerOffset.json %d", where, key, q, got, ok, off)
			}
		}
	}
}

func cutKey(key string) (topic, group string, ok bool) {
	i := strings.LastIndexByte(key, '@')
	if i < 0 {
		return key, "", false
	}
	return key[:i], key[i+1:], true
}

// Every file operation on the state files (their loads at New, new and
// existing, the writes of an admin change and of Shutdown: every state
// file) failed in turn, the store on a file system of its own: an
// operation that fails returns the injected error (New refuses to start,
// an admin change is answered SYSTEM_ERROR); a change answered SUCCESS is
// there after a restart; and the state files on disk always load (the
// previous durable version is never lost).
func TestStateFilesFaults(t *testing.T) {
	errorfs.Walk(t, vfs.Default, []errorfs.Mode{errorfs.Once, errorfs.Stop}, func(t *testing.T, fsys *errorfs.FS, root string) {
		injected := func(what string, err error) bool {
			if err != nil && !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("%s: %v, not the injected failure", what, err)
			}
			return err != nil
		}
		dir := filepath.Join(root, "broker")
		o := powerLossOptions(t, dir)
		o.FS, o.Store.FS = fsys, vfs.Default
		o.OffsetFlushInterval, o.ProgressFlushInterval = time.Hour, time.Hour // written at Shutdown, in order
		c, err := New(o)
		if injected("New", err) {
			return
		}
		c.Start()
		var created []string
		for _, name := range []string{"A", "B"} {
			if !injected("create "+name, c.Admin().CreateTopic(&TopicRequest{Topic: name, ReadQueueNums: 1, WriteQueueNums: 1, Perm: protocol.PermRead | protocol.PermWrite})) {
				created = append(created, name)
			}
		}
		groupOK := !injected("group", c.Admin().UpdateSubscriptionGroup(protocol.SubscriptionGroupConfig{GroupName: "G", ConsumeEnable: true}))
		if err := c.UpdateConsumerOffset([]byte("A"), []byte("G"), 0, 7); err != nil {
			t.Fatal(err)
		}
		shutdownOK := !injected("Shutdown", c.Shutdown())
		// Started again on the faults: the loads of existing files.
		if c, err = New(o); !injected("New again", err) {
			c.Start()
			injected("Shutdown again", c.Shutdown()) // a failed write keeps the previous version
		}

		o = powerLossOptions(t, dir)
		c, err = New(o)
		if err != nil {
			t.Fatalf("after the faults the core does not open: %v", err)
		}
		defer c.Shutdown()
		for _, name := range created {
			if _, ok := c.TopicConfig(name); !ok {
				t.Fatalf("topic %s was created (answered SUCCESS) but is gone after a restart", name)
			}
		}
		if _, err := c.SubscriptionGroup([]byte("G")); groupOK && err != nil {
			t.Fatalf("group G was created (answered SUCCESS) but is gone after a restart: %v", err)
		}
		if off, ok := c.CommittedOffset("A", "G", 0); shutdownOK && (!ok || off != 7) {
			t.Fatalf("after a clean Shutdown the offset is %d (%v), want 7", off, ok)
		}
	})
}
