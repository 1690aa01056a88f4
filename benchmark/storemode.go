package benchmark

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// storeTarget drives the storage engine directly: producers call PutBatch,
// consumers call Get on their share of the queues and wait for the store's
// arrival notifications when they are caught up.
type storeTarget struct {
	cfg       Config
	s         *store.Store
	dir       string
	removeDir bool
	fromStart atomic.Bool // consumers start at offset 0 (backlog) instead of the tail

	mu      sync.Mutex
	wakeups map[int32]chan struct{} // by queue: the consumer that owns it
}

var benchHost = netip.MustParseAddrPort("127.0.0.1:1")

func openStoreTarget(cfg Config) (*storeTarget, error) {
	t := &storeTarget{cfg: cfg, dir: cfg.DataDir}
	if t.dir == "" {
		d, err := os.MkdirTemp("", "apogee-bench-store-")
		if err != nil {
			return nil, err
		}
		t.dir, t.removeDir = d, true
	}
	mode, err := store.ParseFlushMode(cfg.Flush)
	if err != nil {
		return nil, err
	}
	s, _, err := store.Open(store.Options{Dir: t.dir, FlushMode: mode, OnArrival: t.arrived})
	if err != nil {
		t.close()
		return nil, err
	}
	t.s = s
	return t, nil
}

func (t *storeTarget) arrived(_ string, q int32, _ int64) {
	t.mu.Lock()
	c := t.wakeups[q]
	t.mu.Unlock()
	if c != nil {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

type storeSender struct {
	t     *storeTarget
	msgs  [][]store.Message // per slot
	res   [][]store.PutResult
	queue atomic.Int32
}

func (t *storeTarget) producer(int) (sender, error) {
	s := &storeSender{t: t, msgs: make([][]store.Message, t.cfg.Inflight), res: make([][]store.PutResult, t.cfg.Inflight)}
	return s, nil
}

func (s *storeSender) send(_ context.Context, slot int, bodies [][]byte, done func(error)) {
	done(s.put(slot, bodies))
}

func (s *storeSender) put(slot int, bodies [][]byte) error {
	msgs := s.msgs[slot][:0]
	q := s.queue.Add(1) % int32(s.t.cfg.Queues)
	for _, b := range bodies {
		msgs = append(msgs, store.Message{Topic: s.t.cfg.Topic, QueueID: q, BornHost: benchHost, Body: b})
	}
	s.msgs[slot] = msgs
	res, err := s.t.s.PutBatch(msgs, s.res[slot][:0])
	s.res[slot] = res
	return err
}

type storeReceiver struct {
	t      *storeTarget
	queues []int32
	wake   chan struct{}
}

func (t *storeTarget) consumer(id int) (receiver, error) {
	r := &storeReceiver{t: t, wake: make(chan struct{}, 1)}
	for q := id; q < t.cfg.Queues; q += t.cfg.Consumers {
		r.queues = append(r.queues, int32(q))
	}
	t.mu.Lock()
	if t.wakeups == nil {
		t.wakeups = map[int32]chan struct{}{}
	}
	for _, q := range r.queues {
		t.wakeups[q] = r.wake
	}
	t.mu.Unlock()
	return r, nil
}

func (r *storeReceiver) receive(ctx context.Context, _ int, onMsg func([]byte)) error {
	if len(r.queues) == 0 {
		<-ctx.Done()
		return nil
	}
	topic := r.t.cfg.Topic
	next := make([]int64, len(r.queues))
	for i, q := range r.queues {
		if !r.t.fromStart.Load() {
			next[i] = r.t.s.MaxOffset(topic, q)
		}
	}
	var res store.GetResult
	defer res.Release()
	for ctx.Err() == nil {
		found := false
		for i, q := range r.queues {
			if err := r.t.s.Get(topic, q, next[i], 32, 1<<20, nil, &res); err != nil {
				return err
			}
			switch res.Status {
			case store.Found:
				found = true
				for _, v := range res.Messages {
					m, err := message.Decode(v.Bytes(), false)
					if err != nil {
						return fmt.Errorf("decode: %w", err)
					}
					onMsg(m.Body())
				}
				next[i] = res.NextOffset
			case store.OffsetTooSmall, store.OffsetOverflowBadly, store.NoMatchedMessage:
				next[i] = res.NextOffset
			}
			res.Release()
		}
		if !found {
			select {
			case <-r.wake:
			case <-ctx.Done():
			}
		}
	}
	return nil
}

func (t *storeTarget) close() error {
	var err error
	if t.s != nil {
		err = t.s.Close()
	}
	if t.removeDir {
		os.RemoveAll(t.dir)
	}
	return err
}
