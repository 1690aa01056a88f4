package broker

import (
	"errors"
	"sync"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// pendingAck is a send stored in sync-flush mode, waiting for the flush that
// makes it durable before it is answered.
type pendingAck struct {
	resp        remoting.Responder
	end         int64 // commit-log offset the flush must reach
	queueID     int32
	queueOffset int64
	msgID, txID []byte
	bytes       int64 // in-flight bytes released once answered
	plain       bool  // answer with the code only (not a send: send-back, end transaction)
}

// syncAcker answers sync-flush sends without holding their connections: the
// send handler stores the messages (without the store waiting), defers the
// request and queues a pendingAck; one goroutine waits for the flush that
// covers everything queued (one wait serves many sends, as the commit log's
// group commit does) and answers them all.
type syncAcker struct {
	b    *Broker
	pool sync.Pool // *pendingAck
	wake chan struct{}

	mu     sync.Mutex
	queue  []*pendingAck
	closed bool
}

func newSyncAcker(b *Broker) *syncAcker {
	return &syncAcker{b: b, wake: make(chan struct{}, 1)}
}

func (a *syncAcker) get() *pendingAck {
	if v := a.pool.Get(); v != nil {
		return v.(*pendingAck)
	}
	return &pendingAck{}
}

// add queues p; after the acker stopped, p is answered on the caller's goroutine.
func (a *syncAcker) add(p *pendingAck) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		a.answer([]*pendingAck{p})
		return
	}
	a.queue = append(a.queue, p)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *syncAcker) loop() {
	defer a.b.wg.Done()
	var batch []*pendingAck
	for {
		select {
		case <-a.b.stop:
			a.mu.Lock()
			a.closed = true
			batch = append(batch[:0], a.queue...)
			a.queue = a.queue[:0]
			a.mu.Unlock()
			a.answer(batch)
			return
		case <-a.wake:
		}
		a.mu.Lock()
		batch = append(batch[:0], a.queue...)
		clear(a.queue)
		a.queue = a.queue[:0]
		a.mu.Unlock()
		a.answer(batch)
		clear(batch)
	}
}

// answer waits for the flush covering every pending send of batch and
// answers them: SUCCESS, FLUSH_DISK_TIMEOUT (10) when the wait timed out
// (the messages are stored all the same), SERVICE_NOT_AVAILABLE (14) when
// the log failed.
func (a *syncAcker) answer(batch []*pendingAck) {
	if len(batch) == 0 {
		return
	}
	var end int64
	for _, p := range batch {
		end = max(end, p.end)
	}
	code, remark := protocol.RespSuccess, ""
	if err := a.b.store.Log().WaitFlushed(end); err != nil {
		if errors.Is(err, commitlog.ErrFlushTimeout) {
			code = protocol.RespFlushDiskTimeout
		} else {
			code, remark = putErrorCode(err)
		}
	}
	var cmd protocol.Command
	for _, p := range batch {
		p.resp.InitResponse(&cmd, code)
		if remark != "" {
			cmd.SetRemark(remark)
		}
		switch {
		case p.plain:
			if code == protocol.RespFlushDiskTimeout {
				cmd.Code = protocol.RespSuccess // stored all the same; these callers know only 0
			}
		case code == protocol.RespSuccess || code == protocol.RespFlushDiskTimeout:
			setSendResponse(&cmd.Ext, p.msgID, p.queueID, p.queueOffset, p.txID)
		}
		_ = p.resp.Reply(&remoting.Response{Cmd: &cmd})
		a.b.inflight.Add(-p.bytes)
		p.resp = remoting.Responder{}
		p.plain, p.bytes = false, 0
		a.pool.Put(p)
	}
}
