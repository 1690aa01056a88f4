package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Sizes of TestAbuse's attacks.
const (
	abuseIdleSources  = 5    // source addresses of the idle connections
	abuseIdlePer      = 1000 // idle connections from each (remoting.DefaultMaxConnsPerSource)
	abuseOverSource   = 500  // more from one of them, each refused
	abuseLorises      = 200  // slow-loris connections
	abuseFloodTopics  = 3000 // sends to new topics from one address
	abuseNonReaders   = 20   // connections that never read their answers
	abuseRespBudget   = 64 << 20
	abuseFdsNeeded    = abuseIdleSources*abuseIdlePer + abuseOverSource + abuseLorises + abuseNonReaders + 1024
	abusePerConnBytes = 96 << 10 // what one idle connection may cost the broker: its 64 KiB read buffer, two goroutine stacks, the socket
)

// dialFrom opens a TCP connection to addr from the loopback address src
// (127.0.0.0/8 is all local on Linux: each address is a distinct source).
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// frameOf encodes req as it goes on the wire.
func frameOf(t *testing.T, req *protocol.Command) []byte {
	t.Helper()
	b, err := protocol.AppendFrame(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sendRequest is a SEND_MESSAGE of body to topic (auto-created from TBW102).
func sendRequest(group, topic string, opaque int32, body []byte) *protocol.Command {
	var req protocol.Command
	req.InitRequest(protocol.ReqSendMessage, opaque)
	(&protocol.SendMessageRequest{ProducerGroup: []byte(group), Topic: []byte(topic), DefaultTopic: []byte("TBW102"),
		DefaultTopicQueueNums: 1, QueueID: 0, BornTimestamp: time.Now().UnixMilli()}).Encode(&req.Ext)
	req.Body = body
	return &req
}

// wellBehaved checks that a client on an address of its own (127.0.0.1) is
// served: a send to topic and a pull of what it sent (bounded by
// wait.DefaultTimeout only: a loaded machine slows it down, and how fast it
// is served is the benchmark's to measure).
func wellBehaved(t *testing.T, addr, topic string, n *int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}})
	if err != nil {
		t.Fatalf("a well-behaved client cannot connect: %v", err)
	}
	defer cl.Close()
	body := fmt.Sprintf("still served %d", *n)
	resp, err := cl.Invoke(ctx, sendRequest("good", topic, 0, []byte(body)))
	if err != nil || resp.Code != protocol.RespSuccess {
		t.Fatalf("a well-behaved send: %v %v", err, resp)
	}
	var req protocol.Command
	req.InitRequest(protocol.ReqPullMessage, 0)
	(&protocol.PullMessageRequest{ConsumerGroup: []byte("good"), Topic: []byte(topic), QueueID: 0, QueueOffset: *n,
		MaxMsgNums: 1, SysFlag: protocol.PullFlagSubscription, Subscription: []byte("*"), ExpressionType: []byte("TAG")}).Encode(&req.Ext)
	// The message becomes visible once dispatched to the consume queue.
	wait.For(t, fmt.Sprintf("a well-behaved pull at %d", *n), func() error {
		resp, err = cl.Invoke(ctx, &req)
		if err != nil {
			t.Fatalf("a well-behaved pull at %d: %v", *n, err)
		}
		switch resp.Code {
		case protocol.RespSuccess:
			return nil
		case protocol.RespPullNotFound, protocol.RespPullRetryImmediately:
			return fmt.Errorf("code %d: not dispatched yet", resp.Code)
		}
		t.Fatalf("a well-behaved pull at %d: %v", *n, resp)
		return nil
	})
	if !strings.Contains(string(resp.Body), body) {
		t.Fatalf("a well-behaved pull at %d did not return %q", *n, body)
	}
	*n++
}

// raiseNoFile makes sure this process (and so the broker it starts, which
// inherits the limit) may open need descriptors; false if the hard limit
// is lower and cannot be raised.
func raiseNoFile(need uint64) (bool, string) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return false, err.Error()
	}
	if lim.Cur >= need {
		return true, ""
	}
	want := lim
	want.Cur = max(min(lim.Max, max(need, lim.Cur)), lim.Cur)
	if lim.Max < need {
		want.Cur, want.Max = need, need // root may raise the hard limit
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		return false, fmt.Sprintf("RLIMIT_NOFILE %d/%d, need %d: %v", lim.Cur, lim.Max, need, err)
	}
	return true, ""
}

// rssOf reads VmRSS of /proc/PID/status in bytes.
func rssOf(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS line")
}

// TestAbuse attacks a broker as clients on the same network could, each
// attacker from loopback addresses of its own, while a well-behaved client
// (127.0.0.1) keeps being served between the attacks, and checks that the
// limits trip, count and log, and that the broker's memory stays bounded:
//
//   - 5,000 idle connections, 1,000 from each of five addresses (the
//     per-source default), then 500 more from one of them, each refused;
//   - 200 slow-loris connections, each sending the first bytes of a frame
//     and then a byte every 2 s: the slow-sender rule closes them;
//   - a flood of 3,000 sends to new topics from one address: the
//     per-source auto-creation cap (1,000 an hour) creates 1,000 and
//     refuses the rest with TOPIC_NOT_EXIST;
//   - 20 connections that request the whole topic table (~200 KB an
//     answer once the flood made it large) again and again and never read
//     the answers: the response budget (64 MiB here; 20 connections could
//     otherwise queue 20 × 64 MiB) stops them reading.
//
// The RSS bound is generous: the RSS at rest, what the idle connections
// may cost (96 KiB each), twice the response budget (what is queued, and
// as much again left to the garbage collector) and twice the receive
// budget (128 MiB, the same reasoning): about 870 MiB; without the limits
// the unread answers alone reach 1.28 GB and the topics grow with the
// flood. It measured a peak of ~350 MiB from ~20 MiB at rest on a shared
// 2-core VM, within 16 s (docs/benchmarks.md).
func TestAbuse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary; opens 6,000 connections")
	}
	if runtime.GOOS != "linux" {
		t.Skip("binds 127.0.0.x source addresses and reads /proc/PID/status")
	}
	if ok, why := raiseNoFile(abuseFdsNeeded); !ok {
		t.Skipf("cannot open %d descriptors: %s", abuseFdsNeeded, why)
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	p := start(t, bin, "--namesrv-listen", "", "--data-dir", filepath.Join(dir, "data"),
		"--response-budget", strconv.Itoa(abuseRespBudget))
	addr := p.addr
	pid := p.PID()
	var served int64
	wellBehaved(t, addr, "Good", &served)
	rest, err := rssOf(pid)
	if err != nil {
		t.Fatal(err)
	}

	// The RSS is sampled every 50 ms for the whole attack (a measurement's
	// pace, not a wait: the sampler stops when told).
	var peak atomic.Int64
	peak.Store(rest)
	sampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if rss, err := rssOf(pid); err == nil && rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-sampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()

	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	keep := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	stopLoris := make(chan struct{})
	var lorisDone sync.WaitGroup
	var stopped bool
	cleanup := func() {
		if stopped {
			return
		}
		stopped = true
		close(stopLoris)
		lorisDone.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		close(sampling)
		<-sampled
	}
	t.Cleanup(cleanup) // before the process is killed (proctest), if the test ends early
	start := time.Now()
	phase := func(what string) {
		t.Logf("%5.1fs %s; RSS %d MiB", time.Since(start).Seconds(), what, peak.Load()>>20)
	}

	// 5,000 idle connections from five addresses.
	var wg sync.WaitGroup
	var dialErrs atomic.Int64
	var firstErr atomic.Value
	for s := 0; s < abuseIdleSources; s++ {
		src := fmt.Sprintf("127.0.0.%d", 2+s)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < abuseIdlePer/4; i++ {
					c, err := dialFrom(src, addr)
					if err != nil {
						dialErrs.Add(1)
						firstErr.CompareAndSwap(nil, err)
						continue
					}
					keep(c)
				}
			}()
		}
	}
	wg.Wait()
	if n := dialErrs.Load(); n > 0 {
		t.Fatalf("%d of %d connections failed to dial: %v", n, abuseIdleSources*abuseIdlePer, firstErr.Load())
	}
	wait.Value(t, "5,000 connections open", infoAt(t, addr), func(m map[string]string) bool {
		return atoi(m["remotingConnections"]) >= abuseIdleSources*abuseIdlePer
	})
	// 500 more from the first address: accepted by the kernel, closed by the
	// broker before it reads anything.
	for i := 0; i < abuseOverSource; i++ {
		c, err := dialFrom("127.0.0.2", addr)
		if err == nil {
			keep(c)
		}
	}
	wait.Value(t, "the 500 over the per-source bound refused", infoAt(t, addr), func(m map[string]string) bool {
		return atoi(m["remotingConnectionsRefusedPerSource"]) >= abuseOverSource
	})
	info := runtimeInfo(t, addr)
	if n := atoi(info["remotingConnections"]); n > abuseIdleSources*abuseIdlePer+2 {
		t.Errorf("%d connections open, want the 5,000 (and the test's own)", n)
	}
	wellBehaved(t, addr, "Good", &served)
	phase("5,000 idle connections open, 500 refused")

	// Slow loris: connections that trickle the first bytes of a frame.
	hdr := frameOf(t, sendRequest("loris", "Loris", 0, make([]byte, 1024)))
	lorises := make([]net.Conn, 0, abuseLorises)
	for i := 0; i < abuseLorises; i++ {
		c, err := dialFrom("127.0.0.7", addr)
		if err != nil {
			t.Fatal(err)
		}
		keep(c)
		if _, err := c.Write(hdr[:10]); err != nil {
			t.Fatal(err)
		}
		lorises = append(lorises, c)
	}
	lorisDone.Add(1)
	go func() {
		defer lorisDone.Done()
		for k := 10; k < len(hdr); k++ {
			select {
			case <-stopLoris:
				return
			case <-time.After(2 * time.Second): // the attack: one byte every 2 s
			}
			for _, c := range lorises {
				c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
				c.Write(hdr[k : k+1]) // fails once the broker closed it
			}
		}
	}()

	// A flood of sends to new topics from one address, pipelined on one
	// connection; every answer is read.
	topicsBefore := atoi(runtimeInfo(t, addr)["topics"])
	nc, err := dialFrom("127.0.0.8", addr)
	if err != nil {
		t.Fatal(err)
	}
	keep(nc)
	writeErr := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(nc, 64<<10)
		for i := 0; i < abuseFloodTopics; i++ {
			f, err := protocol.AppendFrame(nil, sendRequest("flood", fmt.Sprintf("Flood%05d", i), int32(i+1), []byte("x")))
			if err == nil {
				_, err = w.Write(f)
			}
			if err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- w.Flush()
	}()
	nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReaderSize(nc, 64<<10)
	var buf []byte
	var resp protocol.Command
	codes := map[int32]int{}
	for i := 0; i < abuseFloodTopics; i++ {
		buf, err = protocol.ReadFrame(r, buf, 0)
		if err == nil {
			err = protocol.DecodeFrame(buf, &resp)
		}
		if err != nil {
			t.Fatalf("the flood's answer %d: %v", i, err)
		}
		codes[resp.Code]++
		if resp.Code == protocol.RespTopicNotExist && codes[resp.Code] == 1 && !strings.Contains(string(resp.Remark), "maxAutoCreatePerSource") {
			t.Errorf("the refusal's remark does not name the cap: %q", resp.Remark)
		}
	}
	if err := <-writeErr; err != nil {
		t.Fatalf("the flood's writes: %v", err)
	}
	info = runtimeInfo(t, addr)
	created := atoi(info["topics"]) - topicsBefore
	// The bucket refills 1,000 an hour: a few more may pass during the flood.
	if codes[protocol.RespSuccess] < 1000 || codes[protocol.RespSuccess] > 1010 ||
		codes[protocol.RespTopicNotExist] != abuseFloodTopics-codes[protocol.RespSuccess] {
		t.Errorf("the flood's answers by code: %v, want ~1,000 SUCCESS and the rest TOPIC_NOT_EXIST", codes)
	}
	if created < 1000 || created > 1010 || atoi(info["autoCreateRefusedPerSource"]) != int64(codes[protocol.RespTopicNotExist]) {
		t.Errorf("the flood created %d topics and %s were refused, want ~1,000 and the rest", created, info["autoCreateRefusedPerSource"])
	}
	wellBehaved(t, addr, "Good", &served)
	phase(fmt.Sprintf("flood of %d new topics: %d created", abuseFloodTopics, created))

	// Connections that never read: each writes requests for the topic table
	// until the broker stops reading it (its writes then time out).
	var tableReq protocol.Command
	tableReq.InitRequest(protocol.ReqGetAllTopicConfig, 0)
	tableFrame := frameOf(t, &tableReq)
	var nonReaders sync.WaitGroup
	var written atomic.Int64
	for i := 0; i < abuseNonReaders; i++ {
		c, err := dialFrom("127.0.0.9", addr)
		if err != nil {
			t.Fatal(err)
		}
		keep(c)
		nonReaders.Add(1)
		go func() {
			defer nonReaders.Done()
			batch := make([]byte, 0, 64*len(tableFrame))
			for range 64 {
				batch = append(batch, tableFrame...)
			}
			for j := 0; j < 2000/64; j++ {
				c.SetWriteDeadline(time.Now().Add(2 * time.Second))
				n, err := c.Write(batch)
				written.Add(int64(n))
				if err != nil {
					return // the broker stopped reading: the point
				}
			}
		}()
	}
	nonReaders.Wait()
	// Their answers fill the sockets' buffers, then the budget.
	wait.Value(t, "the response budget spent", infoAt(t, addr), func(m map[string]string) bool {
		return atoi(m["remotingResponseBudgetStalls"]) > 0 && atoi(m["remotingResponseBudgetInUse"]) >= abuseRespBudget
	})
	info = runtimeInfo(t, addr)
	stalls, queued, qpeak := atoi(info["remotingResponseBudgetStalls"]), atoi(info["remotingResponseBudgetInUse"]), atoi(info["remotingResponseBudgetPeak"])
	// Each of the 20 may go on past the budget by what it owed under 256 KiB
	// and the answer it was computing.
	if qpeak > abuseRespBudget+abuseNonReaders*(1<<20) {
		t.Errorf("answers queued peaked at %d MiB with a %d MiB budget", qpeak>>20, abuseRespBudget>>20)
	}
	wellBehaved(t, addr, "Good", &served)
	phase(fmt.Sprintf("%d connections not reading: %d KiB of requests sent, %d MiB of answers queued (peak %d MiB), %d stalls",
		abuseNonReaders, written.Load()>>10, queued>>20, qpeak>>20, stalls))

	// The slow-loris connections are gone by now (5 s grace + what they sent
	// at 64 KiB/s).
	wait.Value(t, "the slow senders closed", infoAt(t, addr), func(m map[string]string) bool {
		return atoi(m["remotingSlowSenders"]) >= abuseLorises
	})
	wellBehaved(t, addr, "Good", &served)
	phase("slow-loris connections closed")

	bound := rest + abuseIdleSources*abuseIdlePer*abusePerConnBytes + 2*abuseRespBudget + 2*remoting.DefaultReceiveBudget
	t.Logf("broker RSS at rest %d MiB, peak %d MiB under attack (bound %d MiB); %d sends and pulls of a well-behaved client served meanwhile",
		rest>>20, peak.Load()>>20, bound>>20, served)
	if peak.Load() > bound {
		t.Errorf("broker RSS peaked at %d MiB, over the %d MiB bound", peak.Load()>>20, bound>>20)
	}

	// The attackers leave; the broker answers, logs each limit once, and
	// stops cleanly.
	cleanup()
	wait.Value(t, "the attackers' connections closed", infoAt(t, addr), func(m map[string]string) bool {
		return atoi(m["remotingConnections"]) <= 1 && atoi(m["remotingResponseBudgetInUse"]) == 0
	})
	wellBehaved(t, addr, "Good", &served)
	logs := p.stop(t, syscall.SIGTERM)
	for _, want := range []string{"connection refused: too many connections from one source", "auto-creation refused",
		"exceed the response budget"} {
		if n := strings.Count(logs, want); n != 1 {
			t.Errorf("%d log lines with %q, want 1 (further ones within a minute are counted)", n, want)
		}
	}
	phase("stopped")
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// infoAt reads the broker's runtime information at addr, for wait.Value.
func infoAt(t *testing.T, addr string) func() map[string]string {
	return func() map[string]string { return runtimeInfo(t, addr) }
}
