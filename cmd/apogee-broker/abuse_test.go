package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// dialFrom opens a TCP connection to addr from the loopback address src
// (127.0.0.0/8 is all local on Linux: each address is a distinct source).
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// frame encodes a request as it goes on the wire.
func frame(t *testing.T, code int32, ext map[string]string, body []byte) []byte {
	t.Helper()
	var req protocol.Command
	req.InitRequest(code, 1)
	for k, v := range ext {
		req.Ext.SetString(k, v)
	}
	req.Body = body
	b, err := protocol.AppendFrame(nil, &req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wellBehaved checks that a client on its own address is served: a send
// and a pull of it, within 5 s.
func wellBehaved(t *testing.T, addr, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}})
	if err != nil {
		t.Fatalf("a well-behaved client cannot connect: %v", err)
	}
	defer cl.Close()
	var req protocol.Command
	req.InitRequest(protocol.ReqSendMessage, 0)
	(&protocol.SendMessageRequest{ProducerGroup: []byte("good"), Topic: []byte(topic), DefaultTopic: []byte("TBW102"),
		DefaultTopicQueueNums: 1, QueueID: 0, BornTimestamp: time.Now().UnixMilli()}).Encode(&req.Ext)
	req.Body = []byte("still served")
	resp, err := cl.Invoke(ctx, &req)
	if err != nil || resp.Code != protocol.RespSuccess {
		t.Fatalf("a well-behaved send: %v %v", err, resp)
	}
	req.InitRequest(protocol.ReqPullMessage, 0)
	(&protocol.PullMessageRequest{ConsumerGroup: []byte("good"), Topic: []byte(topic), QueueID: 0, QueueOffset: 0,
		MaxMsgNums: 1, SysFlag: protocol.PullFlagSubscription, Subscription: []byte("*"), ExpressionType: []byte("TAG")}).Encode(&req.Ext)
	resp, err = cl.Invoke(ctx, &req)
	if err != nil || resp.Code != protocol.RespSuccess && resp.Code != protocol.RespPullNotFound && resp.Code != protocol.RespPullRetryImmediately {
		t.Fatalf("a well-behaved pull: %v %v", err, resp)
	}
}

// TestAbuse attacks a broker as a client on the same network could, each
// attacker from addresses of its own, while a well-behaved client keeps
// being served, and checks the broker's memory stays bounded:
//
//   - 5,000 idle connections (1,000 from each of five addresses, the
//     per-source default), and 500 more from one of them, refused;
//   - 200 slow-loris connections, each sending a few bytes of a frame and
//     then a byte every few seconds;
//   - 20 connections that send requests with large answers and never read
//     them (the response budget, 64 MiB here, stops them);
//   - a flood of sends to new topics from one address (the per-source
//     auto-creation cap, 1,000 an hour).
//
// The RSS bound is generous (768 MiB): what matters is that it does not
// grow with the attack (without the caps the unread answers alone hold
// 20 × 64 MiB, and the topics grow without end).
func TestAbuse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary; opens 6,000 connections")
	}
	if runtime.GOOS != "linux" {
		t.Skip("binds 127.0.0.x source addresses and reads /proc/PID/status")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	p := start(t, bin, "--listen", "127.0.0.1:0", "--namesrv-listen", "", "--data-dir", filepath.Join(dir, "data"),
		"--response-budget", strconv.Itoa(64<<20))
	addr := p.addr
	pid := p.cmd.Process.Pid
	wellBehaved(t, addr, "Good")
	rest := procStatus(t, pid, "VmRSS")

	var conns []net.Conn
	var mu sync.Mutex
	keep := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		p.stop(t, syscall.SIGTERM)
	}()

	// 5,000 idle connections from five addresses, 500 more refused.
	var wg sync.WaitGroup
	var dialErrs atomic.Int64
	for s := 2; s <= 6; s++ {
		src := fmt.Sprintf("127.0.0.%d", s)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 250; i++ {
					c, err := dialFrom(src, addr)
					if err != nil {
						dialErrs.Add(1)
						continue
					}
					keep(c)
				}
			}()
		}
	}
	wg.Wait()
	if n := dialErrs.Load(); n > 0 {
		t.Fatalf("%d of 5,000 connections failed to dial", n)
	}
	waitInfo(t, addr, "5,000 connections open", func(m map[string]string) bool { return atoi(m["remotingConnections"]) >= 5000 })
	for i := 0; i < 500; i++ {
		c, err := dialFrom("127.0.0.2", addr)
		if err == nil {
			keep(c)
		}
	}
	waitInfo(t, addr, "the 500 over the per-source bound refused", func(m map[string]string) bool {
		return atoi(m["remotingConnectionsRefusedPerSource"]) >= 500
	})
	wellBehaved(t, addr, "Good")

	// Slow loris: 200 connections that trickle a frame.
	hdr := frame(t, protocol.ReqSendMessage, map[string]string{"topic": "Loris", "producerGroup": "loris"}, make([]byte, 1024))
	var lorises []net.Conn
	for i := 0; i < 200; i++ {
		c, err := dialFrom("127.0.0.7", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(hdr[:10])
		lorises = append(lorises, c)
		keep(c)
	}
	stopLoris := make(chan struct{})
	go func() {
		for k := 10; ; k++ {
			select {
			case <-stopLoris:
				return
			case <-time.After(2 * time.Second):
			}
			for _, c := range lorises {
				c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
				c.Write(hdr[k : k+1])
			}
		}
	}()
	defer close(stopLoris)

	// Readers that never read: large answers (the topic table, once the
	// flood below made it large), requested again and again.
	var floodErrs atomic.Int64
	flood := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 8)}}
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		// Raw sends: each to a new topic, answers read in bulk and ignored.
		go func() {
			buf := make([]byte, 1<<20)
			for {
				if _, err := nc.Read(buf); err != nil {
					return
				}
			}
		}()
		for i := 0; i < 3000; i++ {
			f := frame(t, protocol.ReqSendMessage, map[string]string{"topic": fmt.Sprintf("Flood%05d", i), "producerGroup": "flood",
				"defaultTopic": "TBW102", "defaultTopicQueueNums": "1", "queueId": "0", "sysFlag": "0", "bornTimestamp": "1",
				"flag": "0", "reconsumeTimes": "0"}, []byte("x"))
			if _, err := nc.Write(f); err != nil {
				floodErrs.Add(1)
				return
			}
		}
	}
	flood()
	waitInfo(t, addr, "the flood's auto-creations capped at 1,000", func(m map[string]string) bool {
		return atoi(m["autoCreateRefusedPerSource"]) >= 1900
	})
	info := runtimeInfo(t, addr)
	if n := atoi(info["topics"]); n > 1100 {
		t.Errorf("%d topics after a flood of 3,000 new ones from one address, want at most ~1,000 more than the system topics", n)
	}

	topicsReq := frame(t, protocol.ReqGetAllTopicConfig, nil, nil)
	for i := 0; i < 20; i++ {
		c, err := dialFrom("127.0.0.9", addr)
		if err != nil {
			t.Fatal(err)
		}
		keep(c)
		go func() {
			for j := 0; j < 2000; j++ {
				c.SetWriteDeadline(time.Now().Add(3 * time.Second))
				if _, err := c.Write(topicsReq); err != nil {
					return // the broker stopped reading: the point
				}
			}
		}()
	}
	time.Sleep(3 * time.Second)
	wellBehaved(t, addr, "Good")
	info = runtimeInfo(t, addr)
	if atoi(info["remotingResponseBudgetStalls"]) == 0 {
		t.Errorf("the response budget never stopped a connection: %v", info["remotingResponseBudgetPeak"])
	}
	peakAnswers := atoi(info["remotingResponseBudgetPeak"])
	rss := procStatus(t, pid, "VmRSS")
	t.Logf("RSS at rest %d MiB, under attack %d MiB; answers queued at most %d MiB; %s connections, %s refused per source, %s slow senders closed",
		rest>>20, rss>>20, peakAnswers>>20, info["remotingConnections"], info["remotingConnectionsRefusedPerSource"], info["remotingSlowSenders"])
	if rss > 768<<20 {
		t.Errorf("RSS %d MiB under attack, want under 768 MiB", rss>>20)
	}
	if peakAnswers > 64<<20+64<<20 {
		t.Errorf("answers queued peaked at %d MiB with a 64 MiB budget", peakAnswers>>20)
	}
	// The slow-loris connections go once past the slow-sender rule.
	waitInfo(t, addr, "the slow senders closed", func(m map[string]string) bool { return atoi(m["remotingSlowSenders"]) >= 200 })
	wellBehaved(t, addr, "Good")
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// waitInfo polls the broker's runtime information until cond holds (30 s).
func waitInfo(t *testing.T, addr, what string, cond func(map[string]string) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := runtimeInfo(t, addr)
		if cond(m) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, m)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
