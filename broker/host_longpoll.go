package broker

import (
	"sync"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/longpoll"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// heldPull is what the pull holder parks for a long-polling pull (its topic,
// queue and offset are the holder's Position). It owns its Responder and
// pooled pull job, whose core.PullResult remembers the queue, the filter
// (immutable, shared) and the cap; nothing in it aliases the request.
type heldPull struct {
	resp remoting.Responder
	job  *pullJob
}

// pullHost is the pull holder's host: it re-runs held pulls through the
// core (PullAgain) and answers them. Its methods run on the holder's
// goroutine, except the Expire that Park makes on a connection's read
// goroutine once the holder is stopped. The core's OnArrival feeds the
// holder's Arrived.
type pullHost struct {
	b    *Broker
	cmds sync.Pool // *protocol.Command for answers (Expire may run on two goroutines)
}

func newPullHolder(b *Broker) *longpoll.Holder[heldPull] {
	return longpoll.New[heldPull](&pullHost{b: b})
}

// Run re-runs a pull woken by an arrival. After an arrival that brought
// nothing for it (another consumer's tag, or a race with the offset), it
// asks to wait again at the offset the scan reached.
func (h *pullHost) Run(p *heldPull, at longpoll.Position) (int64, bool) {
	err := h.b.core.PullAgain(&p.job.res, at.Offset)
	if st := p.job.res.Status; err == nil && (st == core.PullNoNewMessage || st == core.PullRetryImmediately) {
		p.job.res.Release()
		return p.job.res.NextOffset, true
	}
	h.answer(p, err)
	return 0, false
}

// Expire re-runs a pull whose deadline passed (or that the broker's
// shutdown drops) and answers it with whatever it finds.
func (h *pullHost) Expire(p *heldPull, at longpoll.Position) {
	h.answer(p, h.b.core.PullAgain(&p.job.res, at.Offset))
}

// MaxOffset is the core's: a queue's max is updated before the core's
// OnArrival reports it, as the holder requires.
func (h *pullHost) MaxOffset(topic string, queue int32) int64 {
	return h.b.core.MaxOffset(topic, queue)
}

// answer writes a held pull's response through its Responder; the records
// of a code-0 answer go as zero-copy bodies released with the job.
func (h *pullHost) answer(p *heldPull, err error) {
	cmd, _ := h.cmds.Get().(*protocol.Command)
	if cmd == nil {
		cmd = new(protocol.Command)
	}
	defer h.cmds.Put(cmd)
	p.resp.InitResponse(cmd, protocol.RespSuccess)
	r := remoting.Response{Cmd: cmd}
	fillPullResponse(cmd, &r, p.job, err)
	_ = p.resp.Reply(&r) // a closed connection releases the job itself
}
