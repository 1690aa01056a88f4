package benchmark

import (
	"context"
	"fmt"
	"sync"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Slave lag (Config.SlaveAddr): how long after a message is visible on the
// master (its queue's max offset covers it) it is visible on the slave, for
// the messages of the workload's queue 0.
//
// Two goroutines poll GET_MAX_OFFSET (30) of that queue every LagInterval,
// one on the master (found through the slave's runtime information,
// masterAddr) and one on the slave, each on a connection of its own. Every
// master sample that saw the queue grow, (t, m), is matched with the first
// slave sample at or after t that saw at least m: the lag is the time
// between them. Each sample may be up to one interval late, so a lag is
// exact to ±LagInterval, and a lag below the interval reads as 0 to one
// interval. It measures replication and the slave's dispatch (a message is
// visible on the slave once its consume queue holds it), not the slave's
// flush; the two brokers share this machine's clock, which the method needs
// (it compares times taken here, not the brokers' timestamps).

// DefaultLagInterval is the polling period of the lag probe.
const DefaultLagInterval = 2 * time.Millisecond

type lagSample struct {
	at  time.Time
	off int64
}

// lagProbe polls the master's and the slave's queue 0 and computes lags.
type lagProbe struct {
	master, slave *remoting.Client
	topic         string
	interval      time.Duration
	measure       func() bool // record only in the measured part of the run

	mu       sync.Mutex
	mSamples []lagSample // master samples where the queue grew, oldest first
	sSamples []lagSample
	lags     *hdr.Histogram
	errs     int
}

// startLagProbe dials the slave at slaveAddr and its master and polls both
// until ctx ends (wg counts the two pollers); result returns the lags of the
// master samples taken while measure held. It fails when slaveAddr is not a
// slave that knows its master's address.
func startLagProbe(ctx context.Context, slaveAddr, topic string, interval time.Duration, measure func() bool, wg *sync.WaitGroup) (*lagProbe, error) {
	dial := func(addr string) (*remoting.Client, error) {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return remoting.Dial(dctx, addr, nil)
	}
	sc, err := dial(slaveAddr)
	if err != nil {
		return nil, fmt.Errorf("benchmark: --slave-addr %s: %w", slaveAddr, err)
	}
	var req protocol.Command
	req.InitRequest(protocol.ReqGetBrokerRuntimeInfo, 0)
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := sc.Invoke(ictx, &req)
	cancel()
	var kv protocol.KVTable
	if err == nil {
		err = kv.Decode(resp.Body)
	}
	if err != nil {
		sc.Close()
		return nil, fmt.Errorf("benchmark: --slave-addr %s: runtime information: %w", slaveAddr, err)
	}
	masterAddr := kv.Table["masterAddr"]
	if kv.Table["brokerRole"] != "SLAVE" || masterAddr == "" {
		sc.Close()
		return nil, fmt.Errorf("benchmark: --slave-addr %s is not a slave that knows its master (brokerRole %q, masterAddr %q)",
			slaveAddr, kv.Table["brokerRole"], masterAddr)
	}
	mc, err := dial(masterAddr)
	if err != nil {
		sc.Close()
		return nil, fmt.Errorf("benchmark: the slave's master %s: %w", masterAddr, err)
	}
	p := &lagProbe{master: mc, slave: sc, topic: topic, interval: interval, measure: measure, lags: newHistogram()}
	wg.Add(2)
	go p.poll(ctx, wg, mc, true)
	go p.poll(ctx, wg, sc, false)
	return p, nil
}

// poll samples one broker's queue 0 every interval until ctx ends.
func (p *lagProbe) poll(ctx context.Context, wg *sync.WaitGroup, c *remoting.Client, master bool) {
	defer wg.Done()
	defer c.Close()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	last := int64(-1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var req protocol.Command
		req.InitRequest(protocol.ReqGetMaxOffset, 0)
		(&protocol.QueueRequest{Topic: []byte(p.topic), QueueID: 0}).Encode(&req.Ext)
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := c.Invoke(rctx, &req)
		cancel()
		at := time.Now()
		var o protocol.OffsetResponse
		if err == nil {
			err = o.Decode(&resp.Ext)
		}
		p.mu.Lock()
		switch {
		case err != nil:
			if ctx.Err() == nil {
				p.errs++
			}
		case master && o.Offset > last:
			if p.measure() {
				p.mSamples = append(p.mSamples, lagSample{at, o.Offset})
				p.matchLocked()
			}
			last = o.Offset
		case !master && o.Offset > last:
			p.sSamples = append(p.sSamples, lagSample{at, o.Offset})
			last = o.Offset
			p.matchLocked()
		}
		p.mu.Unlock()
	}
}

// matchLocked records the lag of every master sample the slave's samples
// now cover: the time from the master's sample to the first slave sample
// that covers its offset (0 when the slave was seen there first: both
// samples are up to one interval late).
func (p *lagProbe) matchLocked() {
	n := 0
	for _, m := range p.mSamples {
		i := 0
		for i < len(p.sSamples) && p.sSamples[i].off < m.off {
			i++
		}
		if i == len(p.sSamples) {
			break // the slave is not there yet
		}
		p.lags.RecordValue(max(p.sSamples[i].at.Sub(m.at).Microseconds(), minLatencyUs))
		n++
	}
	p.mSamples = p.mSamples[n:]
	// Slave samples below every pending master sample can cover none; the
	// last one is kept for the master samples still to come.
	drop := 0
	for drop < len(p.sSamples)-1 && (len(p.mSamples) == 0 || p.sSamples[drop].off < p.mSamples[0].off) {
		drop++
	}
	p.sSamples = p.sSamples[drop:]
}

// result returns the lags recorded and how many master samples the slave
// never covered (still behind when the probe stopped).
func (p *lagProbe) result() (Percentiles, int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()

	return percentiles(p.lags), len(p.mSamples), p.errs
}
