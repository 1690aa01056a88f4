package broker

import (
	"sync"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/longpoll"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// heldReq is what the broker's long-poll holder parks: a long-polling pull
// (its pooled pull job, whose core.PullResult remembers the queue, the
// filter and the cap; the holder's Wait has its topic, queue and offset),
// a POP that found nothing (its core.PopResult, which PopAgain runs
// again) or a NOTIFICATION that found nothing (its core.PopLook, which
// LookAgain runs again), with the Responder that answers it. Nothing in it
// aliases the request.
type heldReq struct {
	resp   remoting.Responder
	pull   *pullJob        // a pull, or nil
	pop    *core.PopResult // a POP, or nil
	notify *core.PopLook   // a NOTIFICATION, or nil
	// polled is the POP's key in the broker's count of held pops
	// (POLLING_INFO), released when it is answered.
	polled pollKey
}

// pollHost is the holder's host: it re-runs held pulls (core.PullAgain)
// and pops (core.PopAgain) and answers them; the front end's part is only
// the answer's shape (fillPullResponse, fillPopResponse). Its methods run
// on the holder's goroutine, except the Expire that Park makes on a
// connection's read goroutine once the holder is stopped, and the Run of
// a pull that an arrival woke, which the store's dispatcher makes itself
// (longpoll.Options.InlineArrivals: a pull's Run reads the store and
// queues its answer, it neither blocks nor stores). The core's OnArrival
// feeds the holder's Arrived, its OnRevive the holder's Revived.
//
// Answers are queued (Responder.Queue) and each connection they went to
// is flushed once when the holder's batch of calls ends (Flush): the
// answers of one round to one consumer leave in one write, and, when the
// writer is idle, from the goroutine that made them, without waking it.
type pollHost struct {
	b    *Broker
	cmds sync.Pool // *protocol.Command for answers (Expire may run on two goroutines)

	tmu     sync.Mutex
	touched []*remoting.Conn // connections with queued answers not yet flushed (under tmu)
}

// inlineArrivals is how many of the pulls an arrival wakes the store's
// dispatcher runs itself (longpoll.Options.InlineArrivals): one consumer
// per queue, or a few, is the common case; more go to the holder's
// goroutine, so that the dispatcher is not held up long.
const inlineArrivals = 4

// newHolder returns the broker's long-poll holder, wired to the core's
// arrivals and POP revives (not started).
func newHolder(b *Broker) *longpoll.Holder[heldReq] {
	h := longpoll.New[heldReq](&pollHost{b: b}, longpoll.Options{InlineArrivals: inlineArrivals})
	b.core.OnArrival(h.Arrived)
	b.core.OnRevive(h.Revived)
	return h
}

// Run re-runs a held request woken by an arrival (or, for a POP, a revive
// or its wake-up time). A pull that an arrival brought nothing for
// (another consumer's tag, or a race with the offset) waits again at the
// offset the scan reached; a POP that found nothing waits again until the
// next of its group's messages becomes visible.
func (h *pollHost) Run(p *heldReq, w *longpoll.Wait) bool {
	if p.notify != nil {
		if gone(p) {
			p.resp.Cancel()
			return false
		}
		if !h.b.core.LookAgain(p.notify) {
			w.WakeAt = p.notify.NextVisibleTime()
			return true
		}
		h.answerNotify(p, true)
		return false
	}
	if p.pop != nil {
		if gone(p) {
			h.b.polls.release(p.polled)
			p.resp.Cancel() // nothing to answer, and nothing popped for nobody
			return false
		}
		err := h.b.core.PopAgain(p.pop)
		if err == nil && len(p.pop.Msgs) == 0 {
			w.WakeAt = p.pop.NextVisibleTime()
			return true
		}
		// err: the request was checked when it came (not reached); the
		// answer is what the result holds (nothing).
		h.answerPop(p)
		return false
	}
	err := h.b.core.PullAgain(&p.pull.res, w.Offset)
	if st := p.pull.res.Status; err == nil && (st == core.PullNoNewMessage || st == core.PullRetryImmediately) {
		p.pull.res.Release()
		w.Offset = p.pull.res.NextOffset
		return true
	}
	h.answerPull(p, err)
	return false
}

// Expire re-runs a held request whose deadline passed (or that the
// broker's shutdown drops) once more and answers it with whatever it finds.
func (h *pollHost) Expire(p *heldReq, w *longpoll.Wait) {
	if p.notify != nil {
		if gone(p) {
			p.resp.Cancel()
			return
		}
		h.answerNotify(p, h.b.core.LookAgain(p.notify))
		return
	}
	if p.pop != nil {
		if gone(p) {
			h.b.polls.release(p.polled)
			p.resp.Cancel()
			return
		}
		_ = h.b.core.PopAgain(p.pop) // as in Run
		h.answerPop(p)
		return
	}
	h.answerPull(p, h.b.core.PullAgain(&p.pull.res, w.Offset))
}

// gone reports whether a held pop's connection is closed: it is not run
// again, so that no message is handed out (and made invisible to the rest
// of its group) in an answer nobody reads. RocketMQ's broker skips such a
// channel likewise when it wakes a pop.
func gone(p *heldReq) bool {
	select {
	case <-p.resp.Conn().Done():
		return true
	default:
		return false
	}
}

// MaxOffset is the core's: a queue's max is updated before the core's
// OnArrival reports it, as the holder requires.
func (h *pollHost) MaxOffset(topic string, queue int32) int64 {
	return h.b.core.MaxOffset(topic, queue)
}

// answer queues r through rsp and remembers rsp's connection for Flush.
func (h *pollHost) answer(rsp remoting.Responder, r *remoting.Response) error {
	err := rsp.Queue(r)
	if c := rsp.Conn(); err == nil && c != nil {
		h.tmu.Lock()
		if n := len(h.touched); n == 0 || h.touched[n-1] != c {
			h.touched = append(h.touched, c)
		}
		h.tmu.Unlock()
	}
	return err
}

// Flush sends the answers queued since the last Flush (longpoll.Flusher):
// each connection once. A Flush on one goroutine may send what another is
// still queueing; that one's own Flush sends the rest.
func (h *pollHost) Flush() {
	var batch [16]*remoting.Conn
	for {
		h.tmu.Lock()
		n := len(h.touched)
		k := copy(batch[:], h.touched[max(n-len(batch), 0):])
		clear(h.touched[n-k:])
		h.touched = h.touched[:n-k]
		h.tmu.Unlock()
		if k == 0 {
			return
		}
		for i, c := range batch[:k] {
			c.Flush()
			batch[i] = nil
		}
	}
}

func (h *pollHost) command() *protocol.Command {
	if cmd, _ := h.cmds.Get().(*protocol.Command); cmd != nil {
		return cmd
	}
	return new(protocol.Command)
}

// answerPull writes a held pull's response through its Responder; the
// records of a code-0 answer go as zero-copy bodies released with the job.
func (h *pollHost) answerPull(p *heldReq, err error) {
	cmd := h.command()
	defer h.cmds.Put(cmd)
	p.resp.InitResponse(cmd, protocol.RespSuccess)
	r := remoting.Response{Cmd: cmd}
	fillPullResponse(cmd, &r, p.pull, err)
	_ = h.answer(p.resp, &r) // a closed connection releases the job itself
}

// answerPop writes a held pop's response through its Responder.
func (h *pollHost) answerPop(p *heldReq) {
	h.b.polls.release(p.polled)
	cmd := h.command()
	defer h.cmds.Put(cmd)
	p.resp.InitResponse(cmd, protocol.RespSuccess)
	r := remoting.Response{Cmd: cmd}
	fillPopResponse(cmd, &r, p.pop)
	if err := h.answer(p.resp, &r); err != nil && len(p.pop.Msgs) > 0 {
		h.b.copts.Logger.Debug("broker: held pop answered on a closed connection; its messages become visible after their invisible time",
			"group", p.pop.Group(), "topic", p.pop.Topic(), "err", err)
	}
}

// refuse answers a request the holder refused (too many parked): code and
// remark, no body; a pull's job is released.
func refuse(rsp remoting.Responder, j *pullJob, code int32, remark string) {
	var cmd protocol.Command
	rsp.InitResponse(&cmd, code)
	cmd.SetRemark(remark)
	if j != nil {
		j.Release()
	}
	_ = rsp.Reply(&remoting.Response{Cmd: &cmd})
}

// answerNotify writes a held notification's response: SUCCESS with hasMsg.
func (h *pollHost) answerNotify(p *heldReq, has bool) {
	cmd := h.command()
	defer h.cmds.Put(cmd)
	p.resp.InitResponse(cmd, protocol.RespSuccess)
	(&protocol.NotificationResponse{HasMsg: has}).Encode(&cmd.Ext)
	_ = h.answer(p.resp, &remoting.Response{Cmd: cmd})
}

// pollKey names the held pops POLLING_INFO counts, as RocketMQ's polling
// map keys them: topic, group and the pop's queue id (-1 for a pop of
// any queue).
type pollKey struct {
	topic, group string
	queue        int32
}

// pollCounts counts the pops the holder holds, per pollKey (POLLING_INFO,
// 3447). A pop is counted from just before it is parked until it is
// answered or dropped; the zero key is never counted.
type pollCounts struct {
	mu sync.Mutex
	n  map[pollKey]int32 // guarded by mu; no zero counts
}

func (pc *pollCounts) hold(k pollKey) {
	pc.mu.Lock()
	if pc.n == nil {
		pc.n = make(map[pollKey]int32)
	}
	pc.n[k]++
	pc.mu.Unlock()
}

func (pc *pollCounts) release(k pollKey) {
	if k == (pollKey{}) {
		return
	}
	pc.mu.Lock()
	if pc.n[k] <= 1 {
		delete(pc.n, k)
	} else {
		pc.n[k]--
	}
	pc.mu.Unlock()
}

func (pc *pollCounts) count(k pollKey) int32 {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.n[k]
}
