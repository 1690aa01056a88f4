package core

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/apogeemq/apogee/filter"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// Caps of one pull, the Java broker's for messages in page cache
// (maxTransferCountOnMessageInMemory, maxTransferBytesOnMessageInMemory).
const (
	MaxPullMessages = 32
	maxPullBytes    = 256 << 10
)

// PullRequest is a consumer's pull of one queue. Its byte slices may alias
// the front end's request buffer: Pull keeps none of them.
type PullRequest struct {
	Group, Topic []byte
	QueueID      int32
	Offset       int64 // the queue offset to read from
	MaxMsgs      int32 // capped to 1..MaxPullMessages
	// OwnSubscription: the pull carries its filter (ExpressionType "TAG",
	// "SQL92" or "" for TAG, and Expression), compiled once per expression.
	// Otherwise the filter is the subscription the group's heartbeats
	// registered for the topic, which must be at least SubVersion.
	OwnSubscription bool
	ExpressionType  []byte
	Expression      []byte
	SubVersion      int64
	// CommitOffset, when HasCommitOffset, is committed for the group before
	// the read.
	HasCommitOffset bool
	CommitOffset    int64
	// Consumer is the consumer's address, for the remark of a refusal.
	Consumer netip.AddrPort
}

// PullStatus is what a pull found.
type PullStatus uint8

const (
	// PullFound: Records holds the messages (SUCCESS).
	PullFound PullStatus = iota
	// PullNoNewMessage: nothing at the offset yet, or an empty queue read
	// at 0 (PULL_NOT_FOUND): the pull may wait for an arrival.
	PullNoNewMessage
	// PullRetryImmediately: the messages scanned did not match the filter,
	// or were being removed; read again from NextOffset
	// (PULL_RETRY_IMMEDIATELY).
	PullRetryImmediately
	// PullOffsetMoved: the offset is outside the queue; continue from
	// NextOffset (PULL_OFFSET_MOVED).
	PullOffsetMoved
)

// PullResult is a pull's outcome. It is the caller's and reusable; after
// Pull returns, Records (when Status is PullFound) are slices of the mapped
// commit log (each a stored record, which is the pull's wire format): they
// stay valid, pinning their segments, until Release. A result must be
// Released before it is reused or dropped.
type PullResult struct {
	Status PullStatus
	// NextOffset is where the consumer reads next; MinOffset and MaxOffset
	// bound the queue.
	NextOffset, MinOffset, MaxOffset int64
	// SuggestBrokerID is the broker to pull from next (0: the master).
	SuggestBrokerID int64
	Records         [][]byte
	// Topic and QueueID are the queue read (Topic is the topic table's
	// string: it outlives the request). Topic is "" when the request was
	// refused before the read: an error with Topic set is the read's (the
	// offsets then hold NextOffset = the offset requested).
	Topic   string
	QueueID int32

	maxMsgs int
	filter  filter.Filter
	get     store.GetResult
	group   string // the group table's string, for the statistics
	// The group's brokerId and whichBrokerWhenConsumeSlowly, for the
	// suggestion (suggestBroker).
	okBrokerID, slowBrokerID int64
}

// Release unpins the records and empties Records; the result may be reused.
func (r *PullResult) Release() {
	r.get.Release()
	clear(r.Records)
	r.Records = r.Records[:0]
}

// Pull reads a queue for a consumer group (PULL_MESSAGE, 11): it checks the
// topic (readable) and queue, creates the group on first use, resolves the
// filter (the request's own or the group's registered subscription), commits
// the offset the request carries, and reads up to MaxMsgs records as
// zero-copy views. A pull that finds nothing new (PullNoNewMessage) may be
// held by the caller and read again with PullAgain. It does not allocate
// once the filter is compiled.
func (c *Core) Pull(r *PullRequest, res *PullResult) error {
	c.stats.pullRequests.Add(1)
	c.rstats.Pulled()
	res.Release()
	res.Topic = ""
	t := c.topics.get(r.Topic)
	if t == nil && c.slave.Load() {
		t = c.adoptOnSlave(string(r.Topic), r.QueueID)
	}
	if t == nil {
		return newError(ReasonTopicNotExist, "topic["+string(r.Topic)+"] not exist, apply first please!")
	}
	if !t.readable() {
		return newError(ReasonTopicPermission, "the topic["+t.name+"] pulling message is forbidden")
	}
	if r.QueueID < 0 || r.QueueID >= t.cfg.ReadQueueNums {
		return newError(ReasonQueueIllegal, fmt.Sprintf("queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d] consumer:[%s]",
			r.QueueID, t.name, t.cfg.ReadQueueNums, r.Consumer))
	}
	g, err := c.groupForConsumer(r.Group, r.Consumer.Addr().Unmap())
	if err != nil {
		return err
	}
	res.group = g.GroupName
	res.okBrokerID, res.slowBrokerID = g.BrokerID, g.WhichBrokerWhenConsumeSlowly

	var f filter.Filter
	if r.OwnSubscription {
		var err error
		if f, err = c.filters.get(r.ExpressionType, r.Expression); err != nil {
			return wrapError(ReasonSubscriptionParseFailed, "parse the consumer's subscription failed: "+err.Error(), err)
		}
	} else {
		sub, known := c.clients.subscriptionOf(r.Group, r.Topic)
		switch {
		case !known:
			return newError(ReasonSubscriptionNotExist, "the consumer's group info not exist")
		case sub == nil:
			return newError(ReasonSubscriptionNotExist, "the consumer's subscription not exist")
		case sub.subVersion < r.SubVersion:
			return newError(ReasonSubscriptionNotLatest, "the consumer's subscription not latest")
		case sub.err != nil:
			return wrapError(ReasonSubscriptionParseFailed, "parse the consumer's subscription failed: "+sub.err.Error(), sub.err)
		}
		f = sub.filter
	}

	if _, isSQL := f.(*filter.SQL); isSQL {
		if c.opts.DisablePropertyFilter {
			return newError(ReasonFilterTypeUnsupported, "The broker does not support consumer to filter message by SQL92")
		}
		if isRetryTopic(t.name) {
			// Retried messages passed the filter when first consumed: retry
			// topics are read unfiltered (RocketMQ's filterSupportRetry=false).
			f = nil
		}
	}
	if r.HasCommitOffset && !c.slave.Load() { // a slave ignores it, as RocketMQ's does
		c.offsets.commit(r.Topic, r.Group, r.QueueID, r.CommitOffset)
	}
	res.Topic, res.QueueID = t.name, r.QueueID
	res.maxMsgs = int(min(max(r.MaxMsgs, 1), MaxPullMessages))
	res.filter = f
	return c.read(res, r.Offset)
}

// PullAgain reads the queue of an earlier Pull again from offset, with the
// same filter and cap (a held pull that an arrival woke, or whose time is
// up). res must be that Pull's result, released since or not.
func (c *Core) PullAgain(res *PullResult, offset int64) error {
	res.Release()
	return c.read(res, offset)
}

// read reads res's queue from offset and maps the store's status to a
// PullStatus and the next offset (rocketmq-protocol.md §2.6).
func (c *Core) read(res *PullResult, offset int64) error {
	var sf store.Filter
	if res.filter != nil {
		sf = res.filter
	}
	res.SuggestBrokerID = 0
	if err := c.store.Get(res.Topic, res.QueueID, offset, res.maxMsgs, maxPullBytes, sf, &res.get); err != nil {
		res.NextOffset, res.MinOffset, res.MaxOffset = offset, 0, 0
		e := storeError(err)
		if e.Code == protocol.RespMessageIllegal {
			e.Code = protocol.RespSystemError
		}
		return e
	}
	g := &res.get
	res.MinOffset, res.MaxOffset, res.NextOffset = g.MinOffset, g.MaxOffset, g.NextOffset
	switch g.Status {
	case store.Found:
		res.Status = PullFound
		for i := range g.Messages {
			res.Records = append(res.Records, g.Messages[i].Bytes())
		}
		c.stats.pullFound.Add(1)
		c.stats.pullMessages.Add(int64(len(res.Records)))
		c.countGet(res, g)
	case store.NoMatchedMessage, store.MessageWasRemoving:
		res.Status = PullRetryImmediately
	case store.NoMessageInQueue, store.NoMatchedLogicQueue:
		res.NextOffset = 0
		res.Status = PullNoNewMessage
		if offset != 0 {
			res.Status = PullOffsetMoved
		}
	case store.OffsetOverflowOne:
		res.Status = PullNoNewMessage
		res.NextOffset = offset
	case store.OffsetTooSmall, store.OffsetOverflowBadly:
		res.Status = PullOffsetMoved
	default:
		return newError(ReasonSystemError, "unexpected store status "+g.Status.String())
	}
	c.suggestBroker(res, offset)
	return nil
}

// filterCache holds compiled subscriptions that pulls and pops carry
// themselves, by expression, so that each is compiled once.
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
