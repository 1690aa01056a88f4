package benchmark

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// storedCounter is a target that can say how many messages its topic holds:
// the sum of the max offsets (the next logical offset) of its queues.
type storedCounter interface {
	// topicCount returns that sum and how it was read, for the summary.
	topicCount(ctx context.Context) (n int64, how string, err error)
}

// storeCount sums the max offsets of the topic's queues in s, once s has
// dispatched what it wrote: a queue's max offset grows only when the
// message is dispatched to it, a little after the put returned.
func storeCount(s *store.Store, topic string, queues int) (int64, error) {
	err := poll(10*time.Second, func() error {
		if d, w := s.DispatchedOffset(), s.WrittenOffset(); d < w {
			return fmt.Errorf("the store dispatched up to %d of %d", d, w)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	var n int64
	for q := 0; q < queues; q++ {
		n += s.MaxOffset(topic, int32(q))
	}
	return n, nil
}

func (t *storeTarget) topicCount(context.Context) (int64, string, error) {
	n, err := storeCount(t.s, t.cfg.Topic, t.cfg.Queues)
	return n, "the store's max offsets", err
}

// topicCount reads the embedded broker's store, or asks the broker at
// --addr (or the brokers the name server there routes the topic to, each
// master) for the topic's max offsets with GET_TOPIC_STATS_INFO (202), as
// mqadmin topicStatus does.
func (t *brokerTarget) topicCount(ctx context.Context) (int64, string, error) {
	if t.b != nil {
		n, err := storeCount(t.b.Store(), t.cfg.Topic, t.cfg.Queues)
		return n, "the embedded broker's store: max offsets", err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	opts := []client.AdminOpt{client.NameServer(t.addr), client.InstanceName("bench-count"), client.Logger(t.quietLogger())}
	for _, o := range t.clientOpts() {
		opts = append(opts, o)
	}
	a, err := client.NewAdmin(opts...)
	if err != nil {
		return 0, "", err
	}
	defer a.Close(ctx)
	route, err := a.TopicRoute(ctx, t.cfg.Topic)
	if err != nil {
		return 0, "", fmt.Errorf("route of %q: %w", t.cfg.Topic, err)
	}
	// A queue's max offset grows as the broker dispatches what it wrote:
	// wait until each master reports nothing left to dispatch (the runtime
	// information's dispatchBehindBytes, as RocketMQ's brokers report it).
	err = poll(10*time.Second, func() error {
		for _, b := range route.BrokerDatas {
			addr := b.BrokerAddrs[0]
			if addr == "" {
				continue // brokersCount says so
			}
			info, err := a.BrokerRuntimeInfo(ctx, addr)
			if err != nil {
				return fmt.Errorf("runtime information of %s: %w", addr, err)
			}
			if behind := info["dispatchBehindBytes"]; behind != "" && behind != "0" {
				return fmt.Errorf("%s has %s bytes to dispatch", addr, behind)
			}
		}
		return nil
	})
	if err != nil {
		return 0, "", err
	}
	n, err := brokersCount(ctx, a, route.BrokerDatas, t.cfg.Topic)
	return n, "the brokers' max offsets (GET_TOPIC_STATS_INFO)", err
}

// brokersCount sums the topic's max offsets on the masters of brokers.
func brokersCount(ctx context.Context, a *client.Admin, brokers []protocol.BrokerData, topic string) (int64, error) {
	var n int64
	for _, b := range brokers {
		addr, ok := b.BrokerAddrs[0]
		if !ok {
			return 0, fmt.Errorf("broker %s has no master in the route of %q", b.BrokerName, topic)
		}
		stats, err := a.TopicStats(ctx, addr, topic)
		if err != nil {
			return 0, fmt.Errorf("topic stats of %q at %s: %w", topic, addr, err)
		}
		for _, o := range stats.OffsetTable {
			n += o.MaxOffset
		}
	}
	return n, nil
}

func (t *grpcTarget) topicCount(ctx context.Context) (int64, string, error) {
	if t.embedded != nil {
		return t.embedded.topicCount(ctx)
	}
	return 0, "", errGRPCNoCount
}

var (
	errGRPCNoCount = errors.New("--addr is a gRPC endpoint, and the remoting admin requests that read a topic's offsets go to the broker's remoting port")
	errNoCount     = errors.New("this target does not report how many messages its topic holds")
)

// storedBase is the topic's count before a run, or why it could not be
// read (then fillStored says so in the result).
type storedBase struct {
	n   int64
	err error
}

func countBefore(ctx context.Context, t target) storedBase {
	sc, ok := t.(storedCounter)
	if !ok {
		return storedBase{err: errNoCount}
	}
	n, _, err := sc.topicCount(ctx)
	return storedBase{n: n, err: err}
}

// fillStored sets res.Stored to what the topic gained since base.
func fillStored(ctx context.Context, t target, base storedBase, res *Result) {
	if base.err != nil {
		res.StoredNote = "not counted: " + base.err.Error()
		return
	}
	n, how, err := t.(storedCounter).topicCount(ctx)
	if err != nil {
		res.StoredNote = "not counted: " + err.Error()
		return
	}
	d := n - base.n
	res.Stored, res.StoredNote = &d, how
}

// storedLine is the summary's line on the stored count.
func storedLine(r *Result) string {
	if r.Stored == nil {
		if r.StoredNote == "" {
			return ""
		}
		return "stored: " + r.StoredNote
	}
	return fmt.Sprintf("stored %d messages in the topic during the run (%s, after less before)", *r.Stored, r.StoredNote)
}

// poll calls cond every 20 ms until it returns nil or d has passed, and
// returns cond's last error then.
func poll(d time.Duration, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
