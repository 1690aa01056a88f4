package benchmark

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
)

// The matching of master and slave samples: each master sample is paired
// with the first slave sample that covers its offset, a slave seen there
// first counts as the minimum lag, and master samples the slave has not
// reached stay pending.
func TestLagProbeMatching(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	p := &lagProbe{lags: newHistogram()}
	add := func(master bool, ms int, off int64) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if master {
			p.mSamples = append(p.mSamples, lagSample{at(ms), off})
		} else {
			p.sSamples = append(p.sSamples, lagSample{at(ms), off})
		}
		p.matchLocked()
	}
	add(true, 0, 10)   // the slave reaches 10 at 3 ms: 3 ms
	add(true, 2, 20)   // reached at 7 ms (the 3 ms sample has 15 only): 5 ms
	add(false, 3, 15)  //
	add(false, 7, 25)  //
	add(true, 8, 25)   // the slave had 25 at 7 ms, before the master's sample: the minimum
	add(true, 10, 40)  // the slave never gets there
	add(false, 12, 30) //
	lags, pending, errs := p.result()
	if lags.Count != 3 || pending != 1 || errs != 0 {
		t.Fatalf("count %d pending %d errs %d, want 3, 1, 0", lags.Count, pending, errs)
	}
	got := []int64{p.lags.Min(), p.lags.ValueAtQuantile(50), p.lags.Max()}
	want := []int64{minLatencyUs, 3000, 5000}
	for i := range got {
		if d := got[i] - want[i]; d < -want[i]/100 || d > want[i]/100 { // the histogram's precision
			t.Fatalf("lags min/p50/max %v µs, want %v", got, want)
		}
	}
	if len(p.sSamples) != 1 || p.sSamples[0].off != 30 {
		t.Fatalf("slave samples kept: %+v, want the last one only", p.sSamples)
	}
}

// --slave-addr measures produce and e2e runs only.
func TestLagProbeModes(t *testing.T) {
	for _, m := range []Mode{ModeConsume, ModeStore} {
		c := Config{Mode: m, SlaveAddr: "127.0.0.1:1"}
		if _, err := c.withDefaults(); err == nil {
			t.Fatalf("%s with --slave-addr accepted", m)
		}
	}
}

// A produce run against an ASYNC_MASTER and its slave (one process, real
// TCP, the slave pointed at the master's HA listener) reports the slave's
// lag: samples, none left pending, no failed polls. An address that is not
// a slave is refused before the run.
func TestLagProbeAgainstAGroup(t *testing.T) {
	serve := func(o broker.Options) (*broker.Broker, string) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		o.Core.AdvertiseAddr, o.Core.DataDir, o.Core.Logger = l.Addr().String(), t.TempDir(), testlog.New(t, o.Core.Role.String())
		b, err := broker.New(o)
		if err != nil {
			l.Close()
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); b.Serve(l) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b.Shutdown(ctx)
			<-done
		})
		return b, l.Addr().String()
	}
	m, maddr := serve(broker.Options{Core: core.Options{Role: core.RoleAsyncMaster}})
	haln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go m.ServeHA(haln)
	_, saddr := serve(broker.Options{Core: core.Options{Role: core.RoleSlave, BrokerID: 1}, NamesrvAddrs: []string{maddr}, RegisterInterval: 200 * time.Millisecond, SlaveSyncInterval: 100 * time.Millisecond})

	var out bytes.Buffer
	c := short(ModeProduce)
	c.Addr, c.Out, c.Rate = maddr, &out, 2000
	c.SlaveAddr = maddr
	if _, err := Run(context.Background(), c); err == nil {
		t.Fatalf("the master accepted as --slave-addr:\n%s", out.String())
	}
	c.SlaveAddr = saddr
	// The slave learns its master's remoting address from its first
	// registration's answer: until then a run is refused.
	var res *Result
	wait.For(t, "a run with the slave's lag probe", func() error {
		out.Reset()
		if res, err = Run(context.Background(), c); err != nil {
			return fmt.Errorf("%v\n%s", err, out.String())
		}
		return nil
	})
	if res.SlaveLag == nil || res.SlaveLag.Count == 0 || res.SlaveLagPending != 0 || res.SlaveLagErrors != 0 || res.LagIntervalUs != DefaultLagInterval.Microseconds() {
		t.Fatalf("slave lag %+v, pending %d, errors %d, interval %d µs\n%s", res.SlaveLag, res.SlaveLagPending, res.SlaveLagErrors, res.LagIntervalUs, out.String())
	}
	if !bytes.Contains(out.Bytes(), []byte("slave lag")) {
		t.Fatalf("no slave-lag line in the summary:\n%s", out.String())
	}
}
