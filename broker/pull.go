package broker

import (
	"errors"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/longpoll"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// pullJob is the pooled state of one pull: the core's result, whose
// records (views of the commit log) are the response body as they are. It
// is the response's Releaser: the views are released once written.
type pullJob struct {
	b   *Broker
	res core.PullResult
}

// Release implements remoting.Releaser: it unpins the views and recycles the job.
func (j *pullJob) Release() {
	j.res.Release()
	j.b.pullPool.Put(j)
}

func (b *Broker) getPullJob() *pullJob {
	if v := b.pullPool.Get(); v != nil {
		return v.(*pullJob)
	}
	return &pullJob{b: b}
}

// handlePull serves PULL_MESSAGE (11): the header is decoded as views,
// core.Pull reads the queue, and the answer carries the four offset
// headers and, for SUCCESS, the records as zero-copy body slices written
// with the header in one writev. A pull that finds nothing new with the
// suspend flag is parked in the long-poll holder (host_longpoll.go) until
// an arrival in its queue or its deadline. On success it does not allocate.
func (b *Broker) handlePull(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.PullMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	r := core.PullRequest{
		Group: h.ConsumerGroup, Topic: h.Topic, QueueID: h.QueueID, Offset: h.QueueOffset, MaxMsgs: h.MaxMsgNums,
		OwnSubscription: h.SysFlag&protocol.PullFlagSubscription != 0, ExpressionType: h.ExpressionType,
		Expression: h.Subscription, SubVersion: h.SubVersion,
		HasCommitOffset: h.SysFlag&protocol.PullFlagCommitOffset != 0, CommitOffset: h.CommitOffset,
		Consumer: peerAddr(c),
	}
	j := b.getPullJob()
	err := b.core.Pull(&r, &j.res)
	if err == nil && j.res.Status == core.PullNoNewMessage && h.SysFlag&protocol.PullFlagSuspend != 0 &&
		h.SuspendTimeoutMillis > 0 && c != nil && !b.closing.Load() {
		hold := time.Duration(h.SuspendTimeoutMillis) * time.Millisecond
		if hold > b.copts.LongPollMax || hold < 0 {
			hold = b.copts.LongPollMax
		}
		rsp := c.Defer(req)
		// Once the holder is stopped, Park answers at once (Expire).
		_, err := b.holds.Park(longpoll.Wait{Topic: j.res.Topic, Queue: j.res.QueueID, Offset: j.res.NextOffset, Owner: c},
			time.Now().Add(hold), heldReq{resp: rsp, pull: j})
		if errors.Is(err, longpoll.ErrFull) || errors.Is(err, longpoll.ErrOwnerFull) {
			// RocketMQ's clients pull again after a pause on SYSTEM_BUSY.
			refuse(rsp, j, protocol.RespSystemBusy, "the broker holds too many pulls: "+err.Error())
		}
		return remoting.Deferred
	}
	fillPullResponse(resp.Cmd, resp, j, err)
	return remoting.Reply
}

// pullCode is the response code of a pull's status (rocketmq-protocol.md §2.6).
func pullCode(s core.PullStatus) int32 {
	switch s {
	case core.PullFound:
		return protocol.RespSuccess
	case core.PullNoNewMessage:
		return protocol.RespPullNotFound
	case core.PullRetryImmediately:
		return protocol.RespPullRetryImmediately
	default:
		return protocol.RespPullOffsetMoved
	}
}

// fillPullResponse sets a pull's answer in cmd (resp's): the code and the
// four offset headers (also for an error of the read itself), and, for
// SUCCESS, the records as zero-copy body slices released with the job.
// Otherwise the job is released at once.
func fillPullResponse(cmd *protocol.Command, resp *remoting.Response, j *pullJob, err error) {
	res := &j.res
	if err != nil {
		cmd.Code = core.Code(err)
		cmd.SetRemark(core.Remark(err))
		if res.Topic == "" { // refused before the read: no offsets to report
			j.Release()
			return
		}
	} else {
		cmd.Code = pullCode(res.Status)
	}
	hdr := protocol.PullMessageResponse{SuggestWhichBrokerID: res.SuggestBrokerID, NextBeginOffset: res.NextOffset,
		MinOffset: res.MinOffset, MaxOffset: res.MaxOffset}
	hdr.Encode(&cmd.Ext)
	if err == nil && res.Status == core.PullFound {
		resp.Body = res.Records
		resp.Release = j
		return
	}
	j.Release()
}

// registerPull registers PULL_MESSAGE.
func (b *Broker) registerPull(t *handlerTable) { t.add(b.handlePull, protocol.ReqPullMessage) }
