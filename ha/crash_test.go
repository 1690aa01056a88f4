package ha

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/crashtest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

const crashEnv = "APOGEE_HA_CRASH_DIR"

// crashMasterOptions: a SYNC_MASTER with sync flush.
func crashMasterOptions(dir string) store.Options {
	o := storeOptions(dir)
	o.SegmentSize = 4 << 20
	o.FlushMode = store.FlushSync
	o.SyncReplicas = 1
	o.SyncFlushTimeout = 5 * time.Second
	return o
}

func bodyHash(b []byte) uint64 {
	var h uint64 = 14695981039346656037
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// TestMasterCrashChild is a SYNC_MASTER process: it prints its HA address,
// waits for its slave, prints crashtest.Ready and then one line per
// acknowledged message (status OK: the slave acknowledged it) until it is
// killed.
func TestMasterCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("run by TestMasterCrashSIGKILL")
	}
	st, _, err := store.Open(crashMasterOptions(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	m, err := NewMaster(st, MasterOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	go m.Serve(ln)
	fmt.Println("listen", ln.Addr())
	if err := wait.Poll(wait.DefaultTimeout, func() error {
		if len(st.Replicas()) == 0 {
			return errors.New("no slave connected")
		}
		return nil
	}); err != nil {
		fmt.Fprintln(os.Stderr, err)
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
				body := make([]byte, 1+rng.IntN(2000))
				for j := range body {
					body[j] = byte(rng.Uint32())
				}
				r, err := st.Put(&store.Message{Topic: fmt.Sprintf("t%d", rng.IntN(20)), QueueID: int32(rng.IntN(4)), BornHost: born, Body: body})
				if err != nil {
					fmt.Fprintln(os.Stderr, "put:", err)
					os.Exit(3)
				}
				if r.Status != store.StatusOK {
					continue // not acknowledged: nothing promised
				}
				mu.Lock()
				fmt.Fprintf(w, "ack %d %d %d\n", r.CommitLogOffset, r.Size, bodyHash(body))
				w.Flush()
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
}

type crashAck struct {
	off  int64
	size int32
	hash uint64
}

// TestMasterCrashSIGKILL kills a SYNC_MASTER process at random moments
// while it stores from 8 goroutines. After each kill every message it
// acknowledged is read from the slave (which keeps running, and reconnects
// to each new master process) with its body intact. At the end the
// master's recovered log and the slave's agree byte for byte.
func TestMasterCrashSIGKILL(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("child")
	}
	mdir := t.TempDir()
	ro := crashMasterOptions(t.TempDir())
	ro.SyncReplicas = 0
	ro.Replica = true
	replica := openStore(t, ro)
	defer replica.Close()
	s := startSlave(t, replica, "", SlaveOptions{})
	defer s.Close()
	rng := rand.New(rand.NewPCG(17, uint64(time.Now().UnixNano())))
	total := 0
	for round := 0; round < 10; round++ {
		var acks []crashAck
		after := time.Duration(50+rng.IntN(200)) * time.Millisecond
		crashtest.KillAfter(t, "TestMasterCrashChild", []string{crashEnv + "=" + mdir}, after, 30*time.Second, func(line string) {
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "listen":
				s.SetMasterAddr(f[1])
			case len(f) == 4 && f[0] == "ack":
				off, _ := strconv.ParseInt(f[1], 10, 64)
				size, _ := strconv.ParseInt(f[2], 10, 32)
				h, _ := strconv.ParseUint(f[3], 10, 64)
				acks = append(acks, crashAck{off, int32(size), h})
			}
		})
		if len(acks) == 0 {
			t.Logf("round %d: killed after %v before any acknowledgement", round, after)
		}
		for _, a := range acks {
			v, err := replica.ReadMessage(a.off)
			if err != nil {
				t.Fatalf("round %d: acknowledged message at %d not on the slave (slave end %d): %v", round, a.off, replica.WrittenOffset(), err)
			}
			mv, err := message.Decode(v.Bytes(), true)
			if err != nil || int32(mv.TotalSize()) != a.size || bodyHash(mv.Body()) != a.hash {
				t.Fatalf("round %d: message at %d differs on the slave: %v", round, a.off, err)
			}
			v.Release()
		}
		total += len(acks)
	}
	if total == 0 {
		t.Fatal("no message was acknowledged in any round")
	}
	// The master's recovered log holds everything the slave has, identically.
	s.Close()
	master := openStore(t, crashMasterOptions(mdir))
	defer master.Close()
	end := replica.WrittenOffset()
	if master.WrittenOffset() < end {
		t.Fatalf("the recovered master ends at %d, before the slave's %d", master.WrittenOffset(), end)
	}
	sameLog(t, master, replica, 0, end)
	t.Logf("%d acknowledged messages checked over 10 kills; slave end %d, master end %d", total, end, master.WrittenOffset())
}
