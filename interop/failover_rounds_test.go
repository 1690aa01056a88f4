package interop

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/apogeemq/apogee/internal/wait"
)

// failoverRecovery is how soon after a fault of the master each client
// must be served again (issue 28).
const failoverRecovery = 10 * time.Second

// TestFailoverRounds4x: the official 4.x client through rounds of faults
// of a controller-mode group's master (three controllers, a name server,
// three brokers; allAckInSyncStateSet), alternating SIGKILL (the old
// master restarted once the clients are served again: it rejoins as a
// slave) and SIGSTOP (SIGCONT a second after the new master is in the
// route: it wakes, refuses writes and rejoins as a slave). Two producers
// send continuously (the checker: a producer whose sends fail for 300 ms is
// replaced, as an application restarting it, since the client reads routes
// every 30 s); a push consumer consumes, and one that has consumed nothing
// for 2 s while the producers are acknowledged is replaced the same way
// (it too reads the route every 30 s and only at its start otherwise).
//
// Asserted: every SEND_OK of every round is received by the consumer group
// by the end (at least once) and is on the final master, its queues dense;
// in each round the producers get a SEND_OK from the new master and the
// consumer consumes a message the new master stored within 10 s of the
// fault. The gaps are printed per round, and a failure names them.
// APOGEE_FAILOVER_FULL=1 runs ten rounds instead of four. Skipped under
// the race detector: the client's consumer shutdown races with its own
// rebalance (stopApart); scripts/test.sh runs it without.
func TestFailoverRounds4x(t *testing.T) {
	if raceEnabled {
		t.Skip("the official client's consumer shutdown races with its rebalance; run without -race")
	}
	rounds := 4
	if os.Getenv("APOGEE_FAILOVER_FULL") != "" {
		rounds = 10
	}
	g := newFailoverGroup(t, "allAckInSyncStateSet=true", "haMaxTimeSlaveNotCatchup=3000")
	c := newChecker(t, g.ns.Addr, g.topic)
	c.start(2, "r")
	stopped := false
	defer func() {
		if !stopped {
			c.stop()
		}
	}()
	w := newWatchedConsumer(t, g.ns.Addr, g.topic, c)

	var results []roundGaps
	for r := range rounds {
		kind := "SIGKILL"
		if r%2 == 1 {
			kind = "SIGSTOP"
		}
		res := g.faultRound4x(t, c, w, r, kind)
		results = append(results, res)
		t.Logf("%s", res)
	}
	c.stop()
	stopped = true
	final := g.master(t)
	n := c.verify(final.addr, g.queues)
	t.Logf("%d acknowledged over %d rounds, all on the final master %s (%d sends failed)", n, rounds, final.addr, c.failed)
	wait.For(t, "every acknowledged message consumed", func() error { return w.missing(c) })
	t.Logf("every acknowledged message consumed (%d consumer restarts)", w.restarts())

	var slow []string
	for _, res := range results {
		for _, who := range []string{"producers", "consumer"} {
			if gap := res.gaps[who]; gap > failoverRecovery {
				slow = append(slow, fmt.Sprintf("round %d (%s): %s served again after %v", res.n, res.kind, who, gap))
			}
		}
	}
	if len(slow) > 0 {
		var all []string
		for _, res := range results {
			all = append(all, res.String())
		}
		t.Fatalf("clients not served within %v of a fault:\n%s\nall rounds:\n%s", failoverRecovery,
			strings.Join(slow, "\n"), strings.Join(all, "\n"))
	}
}

// roundGaps is what one fault round measured.
type roundGaps struct {
	n             int
	kind          string
	oldM, newM    string
	routed        time.Duration // from the fault to the route naming the new master
	gaps          map[string]time.Duration
	restartsSoFar int
}

func (r roundGaps) String() string {
	return fmt.Sprintf("round %d: master %s %s; route names %s after %v; producers' first SEND_OK from it after %v, consumer's first message from it after %v (consumer restarts so far %d)",
		r.n, r.oldM, r.kind, r.newM, r.routed.Round(time.Millisecond), r.gaps["producers"].Round(time.Millisecond),
		r.gaps["consumer"].Round(time.Millisecond), r.restartsSoFar)
}

// faultRound4x SIGKILLs or SIGSTOPs the master once the SyncStateSet holds
// three and both the producers and the consumer are served, and measures
// the route's change and each client's gap.
func (g *failoverGroup) faultRound4x(t *testing.T, c *checker, w *watchedConsumer, n int, kind string) roundGaps {
	t.Helper()
	g.waitFullSet(t)
	old := g.master(t)
	steady := time.Now()
	wait.For(t, fmt.Sprintf("round %d: the clients served before the fault", n), func() error {
		if c.firstAckOn(old.addr, steady).IsZero() {
			return fmt.Errorf("no SEND_OK from %s since %v", old.addr, steady.Format("15:04:05.000"))
		}
		if w.firstFrom(c, old.addr, steady).IsZero() {
			return fmt.Errorf("nothing stored by %s consumed since %v", old.addr, steady.Format("15:04:05.000"))
		}
		return nil
	})
	switch kind {
	case "SIGKILL":
		old.stop(syscall.SIGKILL) // returns once the process has exited
	case "SIGSTOP":
		if err := old.p.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		old.paused = true
	}
	fault := time.Now()
	res := roundGaps{n: n, kind: kind, oldM: old.addr, gaps: map[string]time.Duration{}}
	wait.For(t, fmt.Sprintf("round %d: a new master in the route", n), func() error {
		nm := masterIn(t, g.ns.Addr, g.topic)
		if nm == "" || nm == old.addr {
			return fmt.Errorf("the route names %q", nm)
		}
		res.newM, res.routed = nm, time.Since(fault)
		return nil
	})
	if kind == "SIGSTOP" {
		// The old master stays paused a second after the route changed:
		// the scenario, not a wait.
		time.Sleep(time.Second)
		if err := old.p.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		old.paused = false
	}
	err := wait.Poll(3*failoverRecovery, func() error {
		var missing []string
		if first := c.firstAckOn(res.newM, fault); first.IsZero() {
			missing = append(missing, "producers")
		} else {
			res.gaps["producers"] = first.Sub(fault)
		}
		if first := w.firstFrom(c, res.newM, fault); first.IsZero() {
			missing = append(missing, "consumer")
		} else {
			res.gaps["consumer"] = first.Sub(fault)
		}
		if len(missing) > 0 {
			return fmt.Errorf("not served by %s since the fault: %s", res.newM, strings.Join(missing, ", "))
		}
		return nil
	})
	res.restartsSoFar = w.restarts()
	if err != nil {
		t.Fatalf("round %d (%s of %s): %v; %s", n, kind, old.addr, err, res)
	}
	if kind == "SIGKILL" {
		old.restart()
	}
	wait.Until(t, fmt.Sprintf("round %d: the old master following the new one", n), func() bool {
		return strings.Count(old.log(), `msg="ctrlmode: following the master"`) > 0
	})
	return res
}

// watchedConsumer is a push consumer of the official client that records
// when it first consumed each body, and a watchdog that replaces it when
// it has consumed nothing for 2 s while the producers are acknowledged.
type watchedConsumer struct {
	t     *testing.T
	ns    string
	topic string
	group string

	mu       sync.Mutex
	consumed map[string]time.Time // body → first consumed
	order    []consumption        // first consumptions, in order
	last     time.Time            // the last consumption
	pc       rocketmq.PushConsumer
	replaced int

	stopWatch chan struct{}
	watchDone chan struct{}
}

func newWatchedConsumer(t *testing.T, ns, topic string, c *checker) *watchedConsumer {
	t.Helper()
	w := &watchedConsumer{t: t, ns: ns, topic: topic, group: uniq("GFailover"), consumed: map[string]time.Time{},
		last: time.Now(), stopWatch: make(chan struct{}), watchDone: make(chan struct{})}
	pc, err := w.start()
	if err != nil {
		t.Fatal(err)
	}
	w.pc = pc
	go w.watch(c)
	t.Cleanup(func() {
		close(w.stopWatch)
		<-w.watchDone
		w.mu.Lock()
		pc := w.pc
		w.mu.Unlock()
		_ = pc.Shutdown()
	})
	return w
}

func (w *watchedConsumer) start() (rocketmq.PushConsumer, error) {
	pc, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{w.ns})),
		consumer.WithGroupName(w.group), consumer.WithInstance(uniq("CF")), consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		return nil, err
	}
	err = pc.Subscribe(w.topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		now := time.Now()
		w.mu.Lock()
		for _, m := range msgs {
			if _, ok := w.consumed[string(m.Body)]; !ok {
				w.consumed[string(m.Body)] = now
				w.order = append(w.order, consumption{string(m.Body), now})
			}
		}
		w.last = now
		w.mu.Unlock()
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return nil, err
	}
	if err := pc.Start(); err != nil {
		return nil, err
	}
	return pc, nil
}

// watch replaces the consumer when it has consumed nothing for 2 s while
// the producers got SEND_OKs (an application's watchdog restarting it: it
// then reads the route at its start).
func (w *watchedConsumer) watch(c *checker) {
	defer close(w.watchDone)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-w.stopWatch:
			return
		case <-tick.C:
		}
		w.mu.Lock()
		idle := time.Since(w.last)
		w.mu.Unlock()
		c.mu.Lock()
		lastAck := c.lastAck
		c.mu.Unlock()
		if idle < 2*time.Second || time.Since(lastAck) > 2*time.Second {
			continue
		}
		w.mu.Lock()
		old := w.pc
		w.mu.Unlock()
		_ = old.Shutdown()
		pc, err := w.start()
		w.mu.Lock()
		if err == nil {
			w.pc = pc
			w.replaced++
		}
		w.last = time.Now() // the new one gets its 2 s
		w.mu.Unlock()
		if err != nil {
			w.t.Errorf("consumer restart: %v", err)
			return
		}
	}
}

func (w *watchedConsumer) restarts() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.replaced
}

// firstFrom is when the consumer first consumed, at or after since, a
// body that host acknowledged (zero: none yet).
func (w *watchedConsumer) firstFrom(c *checker, host string, since time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for i := len(w.order) - 1; i >= 0 && !w.order[i].at.Before(since); i-- {
		if a, ok := c.acked[w.order[i].body]; ok && a.host == host {
			first = w.order[i].at
		}
	}
	return first
}

type consumption struct {
	body string
	at   time.Time
}

// missing reports the acknowledged bodies not consumed yet (nil: none).
func (w *watchedConsumer) missing(c *checker) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	var lack []string
	for body := range c.acked {
		if _, ok := w.consumed[body]; !ok {
			lack = append(lack, body[:min(len(body), 24)])
		}
	}
	if len(lack) == 0 {
		return nil
	}
	slices.Sort(lack)
	return fmt.Errorf("%d of %d acknowledged not consumed, e.g. %s", len(lack), len(c.acked), strings.Join(lack[:min(len(lack), 5)], ", "))
}
