package store

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/internal/crashtest"
	"github.com/apogeemq/apogee/message"
)

const crashEnv = "APOGEE_STORE_CRASH_DIR"

func crashOptions(dir string) Options {
	o := testOptions(dir)
	o.FlushMode = commitlog.FlushSync
	o.SegmentSize = 4 << 20
	o.ConsumeQueueEntries = 256
	o.IndexSlots = 1024
	o.IndexMaxEntries = 4096
	o.FlushInterval = 20 * time.Millisecond
	o.CheckpointInterval = 50 * time.Millisecond
	return o
}

// TestStoreCrashChild puts into 100 topics × 8 queues from 8 goroutines in
// sync mode and prints every acknowledgement until it is killed.
func TestStoreCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("run by TestStoreCrashSIGKILL")
	}
	s, _, err := Open(crashOptions(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	fmt.Println(crashtest.Ready)
	w := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			for i := 0; ; i++ {
				topic := fmt.Sprintf("topic%d", rng.IntN(100))
				q := int32(rng.IntN(8))
				key := fmt.Sprintf("k-%d-%d-%d", g, time.Now().UnixNano(), i)
				body := make([]byte, 1+rng.IntN(1500))
				for j := range body {
					body[j] = byte(rng.Uint32())
				}
				r, err := s.Put(&Message{Topic: topic, QueueID: q, BornHost: born, Body: body, Properties: props(message.PropKeys, key)})
				if err != nil || r.Status != StatusOK {
					fmt.Fprintln(os.Stderr, "put:", err, r.Status)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Fprintf(w, "ack %s %d %d %d %s %d\n", topic, q, r.QueueOffset, r.CommitLogOffset, key, bodyHash(body))
				w.Flush()
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
}

func bodyHash(b []byte) uint64 {
	var h uint64 = 14695981039346656037
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

type storeAck struct {
	topic     string
	queue     int32
	qoff, off int64
	key       string
	hash      uint64
}

func parseAck(line string) (storeAck, bool) {
	f := strings.Fields(line)
	if len(f) != 7 || f[0] != "ack" {
		return storeAck{}, false
	}
	q, _ := strconv.Atoi(f[2])
	qoff, _ := strconv.ParseInt(f[3], 10, 64)
	off, _ := strconv.ParseInt(f[4], 10, 64)
	h, err := strconv.ParseUint(f[6], 10, 64)
	if err != nil {
		return storeAck{}, false
	}
	return storeAck{f[1], int32(q), qoff, off, f[5], h}, true
}

// TestStoreCrashSIGKILL kills a putting process at random moments, then checks
// that every acknowledged message is readable through its consume queue at
// the offset Put returned, that queues are dense, and that the index finds
// every acknowledged key.
func TestStoreCrashSIGKILL(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("child")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(9, uint64(time.Now().UnixNano())))
	var all []storeAck
	for round := 0; round < 20; round++ {
		all = append(all, runStoreChild(t, dir, time.Duration(50+rng.IntN(250))*time.Millisecond)...)
		s, rep, err := Open(crashOptions(dir))
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		verifyAcks(t, s, all, round)
		t.Logf("round %d: %d acks so far; %s", round, len(all), rep)
		s.Close()
	}
	if len(all) == 0 {
		t.Fatal("nothing acknowledged")
	}
}

func verifyAcks(t *testing.T, s *Store, acks []storeAck, round int) {
	t.Helper()
	var res GetResult
	defer res.Release()
	for _, a := range acks {
		if err := s.Get(a.topic, a.queue, a.qoff, 1, 1<<30, nil, &res); err != nil || res.Status != Found {
			t.Fatalf("round %d: acknowledged %s/%d@%d not readable: %v %v", round, a.topic, a.queue, a.qoff, res.Status, err)
		}
		m, err := message.Decode(res.Messages[0].Bytes(), true)
		if err != nil || m.PhysicalOffset() != a.off || bodyHash(m.Body()) != a.hash || m.QueueOffset() != a.qoff {
			t.Fatalf("round %d: %s/%d@%d holds another message (%v)", round, a.topic, a.queue, a.qoff, err)
		}
		views, err := s.QueryByKey(a.topic, a.key, 0, time.Now().UnixMilli()+1000, 4, nil)
		if err != nil || len(views) != 1 {
			t.Fatalf("round %d: key %s found %d times (%v)", round, a.key, len(views), err)
		}
		views[0].Release()
	}
	// Dense: every queue offset in [min, max) holds a message with that queue offset.
	s.Queues(func(topic string, q int32, lo, hi int64) bool {
		for off := lo; off < hi; off = res.NextOffset {
			if err := s.Get(topic, q, off, 32, 1<<30, nil, &res); err != nil || res.Status != Found {
				t.Fatalf("round %d: %s/%d@%d in [%d,%d) unreadable: %v %v", round, topic, q, off, lo, hi, res.Status, err)
			}
			for i, v := range res.Messages {
				m, err := message.Decode(v.Bytes(), true)
				if err != nil || m.QueueOffset() != off+int64(i) || string(m.Topic()) != topic {
					t.Fatalf("round %d: %s/%d@%d not dense or invalid (%v)", round, topic, q, off+int64(i), err)
				}
			}
		}
		return true
	})
}

func runStoreChild(t *testing.T, dir string, after time.Duration) []storeAck {
	t.Helper()
	var acks []storeAck
	crashtest.KillAfter(t, "TestStoreCrashChild", []string{crashEnv + "=" + dir}, after, 60*time.Second, func(line string) {
		if a, ok := parseAck(line); ok {
			acks = append(acks, a)
		}
	})
	return acks
}
