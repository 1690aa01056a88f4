package broker

import (
	"fmt"
	"sync"
	"time"

	"github.com/apogeemq/apogee/broker/longpoll"
	"github.com/apogeemq/apogee/filter"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// Caps of one pull, the Java broker's for messages in page cache
// (maxTransferCountOnMessageInMemory, maxTransferBytesOnMessageInMemory).
const (
	maxPullMessages = 32
	maxPullBytes    = 256 << 10
)

// pullJob is the pooled state of one pull: the store's result (whose views
// pin commit-log segments) and the body slices handed to the connection. It
// is the response's Releaser: the views are released once written.
type pullJob struct {
	b      *Broker
	res    store.GetResult
	bodies [][]byte
}

// Release implements remoting.Releaser: it unpins the views and recycles the job.
func (j *pullJob) Release() {
	j.res.Release()
	clear(j.bodies)
	j.bodies = j.bodies[:0]
	j.b.pullPool.Put(j)
}

func (b *Broker) getPullJob() *pullJob {
	if v := b.pullPool.Get(); v != nil {
		return v.(*pullJob)
	}
	return &pullJob{b: b}
}

// handlePull serves PULL_MESSAGE (11). Every answer carries the four offset
// headers; a pull that finds nothing new may be held (long polling).
func (b *Broker) handlePull(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	b.stats.pullRequests.Add(1)
	var h protocol.PullMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	t := b.topics.get(h.Topic)
	if t == nil {
		return fail(resp, protocol.RespTopicNotExist, "topic["+string(h.Topic)+"] not exist, apply first please!")
	}
	if !t.readable() {
		return fail(resp, protocol.RespNoPermission, "the topic["+t.name+"] pulling message is forbidden")
	}
	if h.QueueID < 0 || h.QueueID >= t.cfg.ReadQueueNums {
		return fail(resp, protocol.RespSystemError, fmt.Sprintf("queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d] consumer:[%s]",
			h.QueueID, t.name, t.cfg.ReadQueueNums, bornHost(c)))
	}
	g := b.groups.get(h.ConsumerGroup)
	if g == nil {
		if !validGroupName(h.ConsumerGroup) {
			return fail(resp, protocol.RespSubscriptionGroupNotExist,
				"subscription group ["+string(h.ConsumerGroup)+"] does not exist and its name is illegal, allowing only ^[%|a-zA-Z0-9_-]+$ up to 255 characters")
		}
		var created bool
		if g, created = b.groups.ensure(h.ConsumerGroup); created {
			b.groupsChanged(false)
		}
	}
	if !g.ConsumeEnable {
		return fail(resp, protocol.RespNoPermission, "subscription group no permission, "+g.GroupName)
	}

	var f filter.Filter
	if h.SysFlag&protocol.PullFlagSubscription != 0 {
		var err error
		if f, err = b.filters.get(h.ExpressionType, h.Subscription); err != nil {
			return fail(resp, protocol.RespSubscriptionParseFailed, "parse the consumer's subscription failed: "+err.Error())
		}
	} else {
		sub, known := b.clients.subscriptionOf(h.ConsumerGroup, h.Topic)
		switch {
		case !known:
			return fail(resp, protocol.RespSubscriptionNotExist, "the consumer's group info not exist")
		case sub == nil:
			return fail(resp, protocol.RespSubscriptionNotExist, "the consumer's subscription not exist")
		case sub.subVersion < h.SubVersion:
			return fail(resp, protocol.RespSubscriptionNotLatest, "the consumer's subscription not latest")
		case sub.err != nil:
			return fail(resp, protocol.RespSubscriptionParseFailed, "parse the consumer's subscription failed: "+sub.err.Error())
		}
		f = sub.filter
	}

	if _, isSQL := f.(*filter.SQL); isSQL {
		if b.opts.DisablePropertyFilter {
			return fail(resp, protocol.RespSystemError, "The broker does not support consumer to filter message by SQL92")
		}
		if isRetryTopic(t.name) {
			// Retried messages passed the filter when first consumed: retry
			// topics are read unfiltered (RocketMQ's filterSupportRetry=false).
			f = nil
		}
	}
	if h.SysFlag&protocol.PullFlagCommitOffset != 0 {
		b.offsets.commit(h.Topic, h.ConsumerGroup, h.QueueID, h.CommitOffset)
	}
	maxMsgs := int(min(max(h.MaxMsgNums, 1), maxPullMessages))
	j := b.getPullJob()
	code, hdr, remark := b.runPull(t.name, h.QueueID, h.QueueOffset, maxMsgs, f, j)

	if code == protocol.RespPullNotFound && h.SysFlag&protocol.PullFlagSuspend != 0 &&
		h.SuspendTimeoutMillis > 0 && c != nil && !b.closing.Load() {
		hold := time.Duration(h.SuspendTimeoutMillis) * time.Millisecond
		if hold > b.opts.LongPollMax || hold < 0 {
			hold = b.opts.LongPollMax
		}
		// Once the holder is stopped, Park answers at once (Expire).
		b.holds.Park(longpoll.Position{Topic: t.name, Queue: h.QueueID, Offset: hdr.NextBeginOffset}, time.Now().Add(hold),
			heldPull{resp: c.Defer(req), maxMsgs: maxMsgs, filter: f, job: j})
		return remoting.Deferred
	}
	b.fillPullResponse(resp, code, &hdr, remark, j)
	return remoting.Reply
}

// fillPullResponse sets a pull's answer: code, the four offset headers and,
// for code 0, the records as zero-copy body slices released with the job.
func (b *Broker) fillPullResponse(resp *remoting.Response, code int32, hdr *protocol.PullMessageResponse, remark string, j *pullJob) {
	resp.Cmd.Code = code
	if remark != "" {
		resp.Cmd.SetRemark(remark)
	}
	hdr.Encode(&resp.Cmd.Ext)
	if code == protocol.RespSuccess {
		b.stats.pullFound.Add(1)
		b.stats.pullMessages.Add(int64(len(j.bodies)))
		resp.Body = j.bodies
		resp.Release = j
		return
	}
	j.Release()
}

// runPull reads the queue and maps the store's status to a pull response
// code and headers (rocketmq-protocol.md §2.6). j.bodies holds the records
// when the code is 0.
func (b *Broker) runPull(topic string, queueID int32, offset int64, maxMsgs int, f filter.Filter, j *pullJob) (int32, protocol.PullMessageResponse, string) {
	var sf store.Filter
	if f != nil {
		sf = f
	}
	var hdr protocol.PullMessageResponse
	if err := b.store.Get(topic, queueID, offset, maxMsgs, maxPullBytes, sf, &j.res); err != nil {
		hdr.NextBeginOffset = offset
		code, remark := putErrorCode(err)
		if code == protocol.RespMessageIllegal {
			code = protocol.RespSystemError
		}
		return code, hdr, remark
	}
	r := &j.res
	hdr.MinOffset, hdr.MaxOffset, hdr.NextBeginOffset = r.MinOffset, r.MaxOffset, r.NextOffset
	var code int32
	switch r.Status {
	case store.Found:
		code = protocol.RespSuccess
		j.bodies = j.bodies[:0]
		for i := range r.Messages {
			j.bodies = append(j.bodies, r.Messages[i].Bytes())
		}
	case store.NoMatchedMessage, store.MessageWasRemoving:
		code = protocol.RespPullRetryImmediately
	case store.NoMessageInQueue, store.NoMatchedLogicQueue:
		hdr.NextBeginOffset = 0
		code = protocol.RespPullNotFound
		if offset != 0 {
			code = protocol.RespPullOffsetMoved
		}
	case store.OffsetOverflowOne:
		code = protocol.RespPullNotFound
		hdr.NextBeginOffset = offset
	case store.OffsetTooSmall, store.OffsetOverflowBadly:
		code = protocol.RespPullOffsetMoved
	default:
		code = protocol.RespSystemError
		return code, hdr, "unexpected store status " + r.Status.String()
	}
	return code, hdr, ""
}

// filterCache holds compiled subscriptions that pulls carry themselves
// (sysFlag bit 2), by expression, so that each is compiled once.
type filterCache struct {
	mu   sync.RWMutex
	tags map[string]filterResult
	sql  map[string]filterResult
}

type filterResult struct {
	f   filter.Filter
	err error
}

// maxCachedFilters bounds each map of the cache; a full map is emptied.
const maxCachedFilters = 4096

// get returns the compiled filter (nil when it accepts everything). It does
// not allocate once the expression is cached.
func (fc *filterCache) get(exprType, expr []byte) (filter.Filter, error) {
	sql := false
	switch string(exprType) {
	case "", filter.TypeTag:
	case filter.TypeSQL92:
		sql = true
	default:
		return nil, fmt.Errorf("unknown expression type %q", exprType)
	}
	fc.mu.RLock()
	m := fc.tags
	if sql {
		m = fc.sql
	}
	r, ok := m[string(expr)]
	fc.mu.RUnlock()
	if ok {
		return r.f, r.err
	}
	typ := filter.TypeTag
	if sql {
		typ = filter.TypeSQL92
	}
	r.f, r.err = compileFilter(typ, string(expr))
	fc.mu.Lock()
	if fc.tags == nil {
		fc.tags, fc.sql = make(map[string]filterResult), make(map[string]filterResult)
	}
	m = fc.tags
	if sql {
		m = fc.sql
	}
	if len(m) >= maxCachedFilters {
		clear(m)
	}
	m[string(expr)] = r
	fc.mu.Unlock()
	return r.f, r.err
}

// registerPull registers PULL_MESSAGE.
func (b *Broker) registerPull(t *handlerTable) { t.add(b.handlePull, protocol.ReqPullMessage) }
