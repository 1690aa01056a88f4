package client

import (
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

// The gate lets one refresh of a topic run at a time, makes the others wait for
// it, and starts at most one per gap; topics are independent.
func TestRefreshGateRateLimit(t *testing.T) {
	g := refreshGate{gap: 500 * time.Millisecond}
	ms := int64(time.Millisecond)
	t0 := int64(1_000_000) * ms

	run, wait := g.begin("a", t0)
	if !run || wait != nil {
		t.Fatalf("first refresh of a: run=%v wait=%v", run, wait)
	}
	run, wait = g.begin("a", t0+ms)
	if run || wait == nil {
		t.Fatalf("while a's refresh runs: run=%v, wait nil=%v; want a wait", run, wait == nil)
	}
	if run, _ := g.begin("b", t0+ms); !run {
		t.Fatal("b is held up by a's refresh")
	}
	select {
	case <-wait:
		t.Fatal("waiter woken before the refresh ended")
	default:
	}
	g.end("a")
	select {
	case <-wait:
	default:
		t.Fatal("waiter not woken when the refresh ended")
	}
	for _, at := range []int64{t0 + 2*ms, t0 + 250*ms, t0 + 499*ms} {
		if run, wait := g.begin("a", at); run || wait != nil {
			t.Fatalf("at +%dms (inside the gap): run=%v wait=%v", (at-t0)/ms, run, wait)
		}
	}
	if run, _ := g.begin("a", t0+500*ms); !run {
		t.Fatal("no refresh once the gap passed")
	}
	g.end("a")
	// The gap counts from the start of the last refresh.
	if run, _ := g.begin("a", t0+999*ms); run {
		t.Fatal("refresh inside the gap of the second refresh")
	}
	if run, _ := g.begin("a", t0+1000*ms); !run {
		t.Fatal("no third refresh")
	}
	g.end("a")
	g.end("b")
	g.end("never") // ending an unknown topic is harmless
}

// Many goroutines failing at once over a simulated second start one refresh per
// gap, never two at a time.
func TestRefreshGateConcurrent(t *testing.T) {
	g := refreshGate{gap: 100 * time.Millisecond}
	var mu sync.Mutex
	var starts []int64
	running := 0
	var wg sync.WaitGroup
	const workers, steps = 8, 200 // 200 steps of 5 ms: one simulated second
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range steps {
				now := int64(s)*int64(5*time.Millisecond) + int64(w)
				run, wait := g.begin("t", now)
				if !run {
					if wait != nil {
						<-wait
					}
					continue
				}
				mu.Lock()
				running++
				if running > 1 {
					t.Errorf("%d refreshes of one topic at once", running)
				}
				starts = append(starts, now)
				mu.Unlock()
				mu.Lock()
				running--
				mu.Unlock()
				g.end("t")
			}
		}()
	}
	wg.Wait()
	for i := 1; i < len(starts); i++ {
		if d := starts[i] - starts[i-1]; d < int64(100*time.Millisecond) {
			t.Fatalf("refreshes %d and %d started %v apart, gap 100ms", i-1, i, time.Duration(d))
		}
	}
	if len(starts) < 5 || len(starts) > 10 {
		t.Fatalf("%d refreshes over a simulated second with a 100ms gap, want 5..10", len(starts))
	}
}

// A route naming another master for a broker name is seen as a move, and every
// other route naming the broker is rebuilt with the new address.
func TestMasterMoveRebuildsRoutes(t *testing.T) {
	known := map[string]map[int64]string{"a": {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}, "b": {0: "10.0.0.3:10911"}}
	moved := &protocol.TopicRouteData{BrokerDatas: []protocol.BrokerData{
		{BrokerName: "a", BrokerAddrs: map[int64]string{0: "10.0.0.2:10911"}},
		{BrokerName: "b", BrokerAddrs: map[int64]string{0: "10.0.0.3:10911"}},
		{BrokerName: "c", BrokerAddrs: map[int64]string{0: "10.0.0.4:10911"}},
	}}
	if got := masterChanges(known, moved); len(got) != 1 || got[0] != "a" {
		t.Fatalf("masterChanges = %v, want [a]", got)
	}
	gone := &protocol.TopicRouteData{BrokerDatas: []protocol.BrokerData{{BrokerName: "a", BrokerAddrs: map[int64]string{1: "10.0.0.2:10911"}}}}
	if got := masterChanges(known, gone); len(got) != 1 {
		t.Fatalf("a master leaving the route is a change: %v", got)
	}

	other := newTopicRoute("other", &protocol.TopicRouteData{
		QueueDatas: []protocol.QueueData{
			{BrokerName: "a", ReadQueueNums: 2, WriteQueueNums: 2, Perm: protocol.PermRead | protocol.PermWrite},
			{BrokerName: "b", ReadQueueNums: 1, WriteQueueNums: 1, Perm: protocol.PermRead | protocol.PermWrite},
		},
		BrokerDatas: []protocol.BrokerData{
			{BrokerName: "a", BrokerAddrs: map[int64]string{0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}},
			{BrokerName: "b", BrokerAddrs: map[int64]string{0: "10.0.0.3:10911"}},
		},
	})
	nr := other.withBrokers(map[string]map[int64]string{"a": {0: "10.0.0.2:10911"}})
	if nr == nil {
		t.Fatal("route naming the moved broker not rebuilt")
	}
	want := []string{"10.0.0.2:10911", "10.0.0.2:10911", "10.0.0.3:10911"}
	if len(nr.publish.addrs) != len(want) {
		t.Fatalf("publish addrs %v, want %v", nr.publish.addrs, want)
	}
	for i := range want {
		if nr.publish.addrs[i] != want[i] {
			t.Fatalf("publish addrs %v, want %v", nr.publish.addrs, want)
		}
	}
	if len(nr.subscribe) != 3 {
		t.Fatalf("subscribe %v", nr.subscribe)
	}
	if other.data.BrokerDatas[0].BrokerAddrs[0] != "10.0.0.1:10911" {
		t.Fatal("the old route was modified in place")
	}
	if other.withBrokers(map[string]map[int64]string{"b": {0: "10.0.0.3:10911"}}) != nil {
		t.Fatal("a route whose addresses did not change was rebuilt")
	}
}
