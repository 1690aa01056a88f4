package store

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/crashtest"
	"github.com/apogeemq/apogee/message"
)

const liteCrashEnv = "APOGEE_STORE_LITE_CRASH_DIR"

// TestLiteCrashChild puts lite messages (sync flush) to 500 lite topics of
// two parents from 4 goroutines, commits a lite offset now and then, and
// prints every acknowledgement until it is killed.
func TestLiteCrashChild(t *testing.T) {
	dir := os.Getenv(liteCrashEnv)
	if dir == "" {
		t.Skip("run by TestLiteCrashSIGKILL")
	}
	o := crashOptions(dir)
	o.LiteFileSize = 64 << 10 // 128 blocks: many files
	s, _, err := Open(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	fmt.Println(crashtest.Ready)
	w := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			for i := 0; ; i++ {
				parent := fmt.Sprintf("P%d", rng.IntN(2))
				lite := fmt.Sprintf("s%d", rng.IntN(500))
				body := fmt.Sprintf("%d-%d-%d", g, time.Now().UnixNano(), i)
				r, err := s.Put(&Message{Topic: parent, QueueID: int32(rng.IntN(4)), BornHost: born, Body: []byte(body),
					Properties: props(message.PropertyLiteTopic, lite)})
				if err != nil || r.Status != StatusOK {
					fmt.Fprintln(os.Stderr, "put:", err, r.Status)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Fprintf(w, "lite %s %s %s\n", parent, lite, body)
				w.Flush()
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
}

// TestLiteCrashSIGKILL kills a process putting lite messages at random
// moments, then checks after each reopen that every lite topic is dense
// (every offset in [min, max) readable), holds only its own messages, each
// once, and holds every acknowledged message, in the order of its
// acknowledgements per writer.
func TestLiteCrashSIGKILL(t *testing.T) {
	if os.Getenv(liteCrashEnv) != "" {
		t.Skip("child")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(11, uint64(time.Now().UnixNano())))
	acked := map[string][]string{} // parent/lite → bodies
	for round := range 10 {
		crashtest.KillAfter(t, "TestLiteCrashChild", []string{liteCrashEnv + "=" + dir}, time.Duration(50+rng.IntN(250))*time.Millisecond, 60*time.Second,
			func(line string) {
				if f := strings.Fields(line); len(f) == 4 && f[0] == "lite" {
					k := f[1] + "/" + f[2]
					acked[k] = append(acked[k], f[3])
				}
			})
		o := crashOptions(dir)
		o.LiteFileSize = 64 << 10
		s, _, err := Open(o)
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		n := 0
		for k, bodies := range acked {
			parent, lite, _ := strings.Cut(k, "/")
			got := readLiteChecked(t, s, parent, lite, round)
			seen := map[string]bool{}
			for _, b := range got {
				if seen[b] {
					t.Fatalf("round %d: %s holds %s twice", round, k, b)
				}
				seen[b] = true
			}
			for _, b := range bodies {
				if !seen[b] {
					t.Fatalf("round %d: %s lost acknowledged %s (%d held, %d acked)", round, k, b, len(got), len(bodies))
				}
			}
			n += len(bodies)
		}
		t.Logf("round %d: %d acknowledged lite messages in %d lite topics, %d lite topics in the store", round, n, len(acked), s.LiteCount())
		s.Close()
	}
}

// readLiteChecked reads a lite topic whole, checking density and that every
// record carries the lite topic and the parent.
func readLiteChecked(t *testing.T, s *Store, parent, lite string, round int) []string {
	t.Helper()
	mn, mx, ok := s.LiteOffsets(parent, lite)
	if !ok {
		return nil
	}
	var res GetResult
	defer res.Release()
	var out []string
	for off := mn; off < mx; off = res.NextOffset {
		if err := s.GetLite(parent, lite, off, 32, 0, &res); err != nil || res.Status != Found {
			t.Fatalf("round %d: %s/%s@%d in [%d,%d): %v %v", round, parent, lite, off, mn, mx, res.Status, err)
		}
		if res.NextOffset != off+int64(len(res.Messages)) {
			t.Fatalf("round %d: %s/%s@%d: %d messages, next %d: not dense", round, parent, lite, off, len(res.Messages), res.NextOffset)
		}
		for _, v := range res.Messages {
			m, err := message.Decode(v.Bytes(), true)
			if l, _ := message.LookupProperty(m.Properties(), message.PropertyLiteTopic); err != nil || string(m.Topic()) != parent || string(l) != lite {
				t.Fatalf("round %d: %s/%s@%d holds a record of %s/%s (%v)", round, parent, lite, off, m.Topic(), l, err)
			}
			out = append(out, string(m.Body()))
		}
	}
	return out
}
