package broker

import (
	"sync"

	"github.com/apogeemq/apogee/broker/longpoll"
	"github.com/apogeemq/apogee/filter"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// heldPull is what the pull holder parks for a long-polling pull (its topic,
// queue and offset are the holder's Position). It owns its Responder and
// pooled pull job; nothing in it aliases the request (the filter is
// immutable and shared).
type heldPull struct {
	resp    remoting.Responder
	maxMsgs int
	filter  filter.Filter
	job     *pullJob
}

// pullHost is the pull holder's host: it re-runs held pulls and answers
// them. Its methods run on the holder's goroutine, except the Expire that
// Park makes on a connection's read goroutine once the holder is stopped.
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
	code, hdr, remark := h.b.runPull(at.Topic, at.Queue, at.Offset, p.maxMsgs, p.filter, p.job)
	if code == protocol.RespPullNotFound || code == protocol.RespPullRetryImmediately {
		p.job.res.Release()
		return hdr.NextBeginOffset, true
	}
	h.answer(p, code, &hdr, remark)
	return 0, false
}

// Expire re-runs a pull whose deadline passed (or that the broker's
// shutdown drops) and answers it with whatever it finds.
func (h *pullHost) Expire(p *heldPull, at longpoll.Position) {
	code, hdr, remark := h.b.runPull(at.Topic, at.Queue, at.Offset, p.maxMsgs, p.filter, p.job)
	h.answer(p, code, &hdr, remark)
}

// MaxOffset is the store's: a queue's max is updated before the
// dispatcher's OnArrival reports it, as the holder requires.
func (h *pullHost) MaxOffset(topic string, queue int32) int64 {
	return h.b.store.MaxOffset(topic, queue)
}

// answer writes a held pull's response through its Responder; the records
// of a code-0 answer go as zero-copy bodies released with the job.
func (h *pullHost) answer(p *heldPull, code int32, hdr *protocol.PullMessageResponse, remark string) {
	b, j := h.b, p.job
	cmd, _ := h.cmds.Get().(*protocol.Command)
	if cmd == nil {
		cmd = new(protocol.Command)
	}
	defer h.cmds.Put(cmd)
	p.resp.InitResponse(cmd, code)
	if remark != "" {
		cmd.SetRemark(remark)
	}
	hdr.Encode(&cmd.Ext)
	r := remoting.Response{Cmd: cmd}
	if code == protocol.RespSuccess {
		b.stats.pullFound.Add(1)
		b.stats.pullMessages.Add(int64(len(j.bodies)))
		r.Body, r.Release = j.bodies, j
	} else {
		j.Release()
	}
	_ = p.resp.Reply(&r) // a closed connection releases the job itself
}
