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
		a.answerAll([]*pendingAck{p}, a.b.store.Log().WaitFlushed(p.end))
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
	var pending []*pendingAck
	for {
		if len(pending) == 0 {
			select {
			case <-a.b.stop:
				a.mu.Lock()
				a.closed = true
				pending = append(pending, a.queue...)
				clear(a.queue)
				a.queue = a.queue[:0]
				a.mu.Unlock()
				a.answerAll(pending, a.b.store.Log().WaitFlushed(maxEnd(pending)))
				return
			case <-a.wake:
			}
		}
		a.mu.Lock()
		pending = append(pending, a.queue...)
		clear(a.queue)
		a.queue = a.queue[:0]
		a.mu.Unlock()
		pending = a.answerFlushed(pending)
	}
}

// answerFlushed waits until the flush covers the earliest-ending pending send
// and answers every send the flushed offset covers by then; it returns the
// rest, which wait for a later flush. Waiting for the earliest rather than
// the latest end answers each send after the first flush that covers it,
// not one flush later.
func (a *syncAcker) answerFlushed(pending []*pendingAck) []*pendingAck {
	if len(pending) == 0 {
		return pending
	}
	first := pending[0].end
	for _, p := range pending {
		first = min(first, p.end)
	}
	log := a.b.store.Log()
	if err := log.WaitFlushed(first); err != nil {
		a.answerAll(pending, err)
		clear(pending)
		return pending[:0]
	}
	flushed := log.FlushedOffset()
	rest := pending[:0]
	var cmd protocol.Command
	for _, p := range pending {
		if p.end <= flushed {
			a.reply(p, &cmd, protocol.RespSuccess, "")
		} else {
			rest = append(rest, p)
		}
	}
	clear(pending[len(rest):])
	return rest
}

func maxEnd(batch []*pendingAck) int64 {
	var end int64
	for _, p := range batch {
		end = max(end, p.end)
	}
	return end
}

// answerAll answers every send of batch after a wait that returned err:
// SUCCESS when err is nil, FLUSH_DISK_TIMEOUT (10) when the wait timed out
// (the messages are stored all the same), SERVICE_NOT_AVAILABLE (14) when
// the log failed.
func (a *syncAcker) answerAll(batch []*pendingAck, err error) {
	code, remark := protocol.RespSuccess, ""
	if err != nil {
		if errors.Is(err, commitlog.ErrFlushTimeout) {
			code = protocol.RespFlushDiskTimeout
		} else {
			code, remark = putErrorCode(err)
		}
	}
	a.answer(batch, code, remark)
}

// answer replies to every send of batch with code.
func (a *syncAcker) answer(batch []*pendingAck, code int32, remark string) {
	var cmd protocol.Command
	for _, p := range batch {
		a.reply(p, &cmd, code, remark)
	}
}

// reply answers one send with code and returns p to the pool.
func (a *syncAcker) reply(p *pendingAck, cmd *protocol.Command, code int32, remark string) {
	p.resp.InitResponse(cmd, code)
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
	_ = p.resp.Reply(&remoting.Response{Cmd: cmd})
	a.b.inflight.Add(-p.bytes)
	p.resp = remoting.Responder{}
	p.plain, p.bytes = false, 0
	a.pool.Put(p)
}
