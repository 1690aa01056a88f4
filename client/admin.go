package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// Admin sends the administrative queries of RocketMQ's mqadmin that an
// application needs: messages by key (QUERY_MESSAGE), by unique key, by offset
// message id (VIEW_MESSAGE_BY_ID), and a consumer group's offsets reset to a
// time (INVOKE_BROKER_TO_RESET_OFFSET).
//
// An Admin shares its client instance (connections, route table) with the
// producers and consumers of the same client ID, but registers no group and
// sends no heartbeat of its own. Routes are fetched from the name server on
// every call, so a call sees brokers added since the last one. Its methods are
// safe for concurrent use.
type Admin struct {
	cfg    clientConfig
	in     *instance
	closed atomic.Bool
}

// AdminOpt configures an Admin. Every Opt fits (NameServer, InstanceName,
// RequestTimeout, HeaderEncoding, Logger, ...); producer and consumer options
// do not compile.
type AdminOpt interface {
	applyProducer(*producerConfig)
	applyPush(*pushConfig)
	applyPull(*pullConfig)
}

// MaxQueryMessages is the most messages QueryMessages asks each broker for (an
// Apogee or Java broker caps a query at 64 by default).
const MaxQueryMessages = 64

// ErrMessageNotFound: QueryByUniqueKey or ViewMessage found no such message.
var ErrMessageNotFound = errors.New("client: message not found")

// NewAdmin creates an admin client. A name server is required.
func NewAdmin(opts ...AdminOpt) (*Admin, error) {
	pc := producerConfig{client: defaultClientConfig()}
	for _, o := range opts {
		if o == nil {
			pc.client.errf("nil option")
			continue
		}
		o.applyProducer(&pc)
	}
	pc.client.validate()
	if err := pc.client.err(); err != nil {
		return nil, err
	}
	in, err := acquireInstance(&pc.client)
	if err != nil {
		return nil, err
	}
	return &Admin{cfg: pc.client, in: in}, nil
}

// Close releases the admin's share of the client instance (the last client of
// an instance closes its connections). Closing twice returns ErrClosed.
func (a *Admin) Close(ctx context.Context) error {
	if a.closed.Swap(true) {
		return ErrClosed
	}
	a.in.release()
	return nil
}

// adminBroker is one broker of a topic's route.
type adminBroker struct{ name, addr string }

// brokers fetches topic's route and returns its brokers (master address, or
// any address when the master is down), sorted by name.
func (a *Admin) brokers(ctx context.Context, topic string) ([]adminBroker, error) {
	if a.closed.Load() {
		return nil, ErrClosed
	}
	rd, err := a.in.fetchRouteData(ctx, topic)
	if err != nil {
		return nil, err
	}
	a.in.storeBrokers(rd)
	var out []adminBroker
	for _, bd := range rd.BrokerDatas {
		addr := bd.BrokerAddrs[0]
		if addr == "" {
			ids := make([]int64, 0, len(bd.BrokerAddrs))
			for id := range bd.BrokerAddrs {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			for _, id := range ids {
				if addr = bd.BrokerAddrs[id]; addr != "" {
					break
				}
			}
		}
		if addr != "" {
			out = append(out, adminBroker{bd.BrokerName, addr})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: topic %q has no broker address", ErrNoRoute, topic)
	}
	slices.SortFunc(out, func(x, y adminBroker) int { return strings.Compare(x.name, y.name) })
	return out, nil
}

// QueryMessages returns up to max (1..MaxQueryMessages) messages of topic with
// key among their KEYS, stored between begin and end (inclusive, millisecond
// precision), newest first. Every broker of the topic is asked at once; the
// index's candidates are checked again against the key (hashes collide). When a
// broker cannot be asked, the messages the others returned come with an error
// naming it. No match is an empty slice and no error.
func (a *Admin) QueryMessages(ctx context.Context, topic, key string, begin, end time.Time, max int) ([]*MessageExt, error) {
	if max <= 0 || max > MaxQueryMessages {
		return nil, fmt.Errorf("%w: query of %d messages (1..%d)", ErrConfig, max, MaxQueryMessages)
	}
	if topic == "" || key == "" {
		return nil, fmt.Errorf("%w: query needs a topic and a key", ErrConfig)
	}
	return a.query(ctx, topic, key, begin.UnixMilli(), end.UnixMilli(), max, false)
}

// QueryByUniqueKey returns the message of topic whose producer id (UNIQ_KEY,
// SendResult.MsgID) is uniqKey, whenever it was stored. When the id was stored
// more than once (a send retried after a timeout), the earliest stored copy is
// returned. No such message is ErrMessageNotFound.
func (a *Admin) QueryByUniqueKey(ctx context.Context, topic, uniqKey string) (*MessageExt, error) {
	if topic == "" || uniqKey == "" {
		return nil, fmt.Errorf("%w: query needs a topic and a unique key", ErrConfig)
	}
	msgs, err := a.query(ctx, topic, uniqKey, 0, math.MaxInt64, 32, true)
	if len(msgs) == 0 {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s in %s", ErrMessageNotFound, uniqKey, topic)
	}
	first := msgs[0]
	for _, m := range msgs[1:] {
		if m.StoreTimestamp.Before(first.StoreTimestamp) {
			first = m
		}
	}
	return first, nil
}

type queryResult struct {
	msgs []*MessageExt
	err  error
}

func (a *Admin) query(ctx context.Context, topic, key string, beginMs, endMs int64, max int, uniq bool) ([]*MessageExt, error) {
	brokers, err := a.brokers(ctx, topic)
	if err != nil {
		return nil, err
	}
	results := make([]queryResult, len(brokers))
	var wg sync.WaitGroup
	for i, b := range brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs, err := a.queryBroker(ctx, b, topic, key, beginMs, endMs, max, uniq)
			results[i] = queryResult{msgs, err}
		}()
	}
	wg.Wait()
	var out []*MessageExt
	var errs []error
	type seenKey struct {
		broker string
		offset int64
	}
	seen := map[seenKey]bool{}
	for _, r := range results {
		if r.err != nil {
			errs = append(errs, r.err)
		}
		for _, m := range r.msgs {
			k := seenKey{m.Queue.BrokerName, m.CommitLogOffset}
			if !seen[k] {
				seen[k] = true
				out = append(out, m)
			}
		}
	}
	slices.SortStableFunc(out, func(x, y *MessageExt) int { return y.StoreTimestamp.Compare(x.StoreTimestamp) })
	if len(out) > max {
		out = out[:max]
	}
	if out == nil {
		out = []*MessageExt{}
	}
	return out, errors.Join(errs...)
}

// queryBroker sends one QUERY_MESSAGE and keeps the records that really match.
func (a *Admin) queryBroker(ctx context.Context, b adminBroker, topic, key string, beginMs, endMs int64, max int, uniq bool) ([]*MessageExt, error) {
	req := a.in.newRequest(protocol.ReqQueryMessage)
	(&protocol.QueryMessageRequest{Topic: topic, Key: key, MaxNum: int32(max), BeginTimestamp: beginMs,
		EndTimestamp: endMs, UniqueKeyQuery: uniq}).Encode(&req.Ext)
	resp, err := a.in.invoke(ctx, b.addr, req, a.cfg.requestTimeout)
	if err != nil {
		return nil, fmt.Errorf("client: query %s key %q at %s: %w", topic, key, b.name, err)
	}
	switch resp.Code {
	case protocol.RespSuccess:
	case protocol.RespQueryNotFound:
		return nil, nil
	default:
		return nil, fmt.Errorf("client: query %s key %q at %s: %w", topic, key, b.name, brokerError(b.addr, resp))
	}
	var msgs []*MessageExt
	err = message.ForEachRecord(resp.Body, false, func(v message.View) error {
		if string(v.Topic()) != topic {
			return nil
		}
		m, derr := decodeMessage(v, MessageQueue{Topic: topic, BrokerName: b.name, QueueID: v.QueueID()})
		if derr != nil {
			a.in.log.Warn("client: queried message body does not inflate; returned as stored", "broker", b.name, "offset", v.PhysicalOffset(), "err", derr)
		}
		if uniq {
			if m.Properties[message.PropUniqKey] != key {
				return nil
			}
		} else if !slices.Contains(m.Keys, key) {
			return nil
		}
		msgs = append(msgs, m)
		return nil
	})
	if err != nil {
		return msgs, fmt.Errorf("client: query %s key %q at %s: malformed body: %w", topic, key, b.name, err)
	}
	return msgs, nil
}

// ViewMessage returns the message an offset message id (SendResult.OffsetMsgID,
// MessageExt.OffsetMsgID) names, asking the broker whose store address the id
// holds (VIEW_MESSAGE_BY_ID). An id that does not parse is ErrConfig; an offset
// the broker says it has no message at is ErrMessageNotFound (wrapping the
// broker's answer, a *BrokerError).
func (a *Admin) ViewMessage(ctx context.Context, offsetMsgID string) (*MessageExt, error) {
	if a.closed.Load() {
		return nil, ErrClosed
	}
	host, offset, err := message.ParseOffsetMsgID(offsetMsgID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	addr := host.String()
	req := a.in.newRequest(protocol.ReqViewMessageByID)
	(&protocol.ViewMessageByIDRequest{Offset: offset}).Encode(&req.Ext)
	resp, err := a.in.invoke(ctx, addr, req, a.cfg.requestTimeout)
	if err != nil {
		return nil, fmt.Errorf("client: view message %s at %s: %w", offsetMsgID, addr, err)
	}
	if resp.Code != protocol.RespSuccess {
		err := fmt.Errorf("client: view message %s: %w", offsetMsgID, brokerError(addr, resp))
		// Java's VIEW_MESSAGE_BY_ID answers SYSTEM_ERROR when no message
		// can be read at the offset (its only refusal), Apogee's too.
		if resp.Code == protocol.RespQueryNotFound || resp.Code == protocol.RespSystemError {
			err = fmt.Errorf("%w: %w", ErrMessageNotFound, err)
		}
		return nil, err
	}
	v, err := message.Decode(resp.Body, false)
	if err != nil {
		return nil, fmt.Errorf("client: view message %s at %s: %w", offsetMsgID, addr, err)
	}
	if v.PhysicalOffset() != offset {
		return nil, fmt.Errorf("client: view message %s at %s: the broker answered the record at %d", offsetMsgID, addr, v.PhysicalOffset())
	}
	m, derr := decodeMessage(v, MessageQueue{BrokerName: a.brokerNameOf(addr), QueueID: v.QueueID()})
	if derr != nil {
		a.in.log.Warn("client: viewed message body does not inflate; returned as stored", "id", offsetMsgID, "err", derr)
	}
	return m, nil
}

// brokerNameOf returns the name of the broker at addr among those the instance
// knows, or "".
func (a *Admin) brokerNameOf(addr string) string {
	a.in.mu.Lock()
	defer a.in.mu.Unlock()
	for name, addrs := range a.in.brokers {
		for _, x := range addrs {
			if x == addr {
				return name
			}
		}
	}
	return ""
}

// ResetOffsetByTime moves group's committed offsets of every queue of topic, on
// every broker of the topic, to the first message stored at or after ts, in
// either direction (mqadmin resetOffsetByTime with force). A time after the
// last message moves each offset to the end of its queue. Each broker commits
// the new offsets and tells the group's live consumers (RESET_CONSUMER_CLIENT_OFFSET);
// consumers that do not act on that notice (this package's push consumer, for
// one) keep their own positions and commit them over the reset, so stop the
// group's consumers first and start them after.
//
// It returns the new offsets the brokers reported. When some broker fails, the
// offsets of the others come with an error naming it.
func (a *Admin) ResetOffsetByTime(ctx context.Context, group, topic string, ts time.Time) (map[MessageQueue]int64, error) {
	if group == "" || topic == "" {
		return nil, fmt.Errorf("%w: reset needs a group and a topic", ErrConfig)
	}
	brokers, err := a.brokers(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[MessageQueue]int64{}
	var errs []error
	for _, b := range brokers {
		req := a.in.newRequest(protocol.ReqInvokeBrokerToResetOffset)
		(&protocol.ResetOffsetRequest{Topic: topic, Group: group, Timestamp: ts.UnixMilli(), IsForce: true,
			QueueID: -1, Offset: -1}).Encode(&req.Ext)
		resp, err := a.in.invoke(ctx, b.addr, req, a.cfg.requestTimeout)
		if err == nil && resp.Code != protocol.RespSuccess {
			err = brokerError(b.addr, resp)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("client: reset offsets of %s on %s at %s: %w", group, topic, b.name, err))
			continue
		}
		table, err := parseResetOffsetBody(resp.Body)
		if err != nil {
			errs = append(errs, fmt.Errorf("client: reset offsets of %s on %s at %s: %w", group, topic, b.name, err))
			continue
		}
		for mq, off := range table {
			if mq.Topic == "" {
				mq.Topic = topic
			}
			if mq.BrokerName == "" {
				mq.BrokerName = b.name
			}
			out[mq] = off
		}
	}
	return out, errors.Join(errs...)
}

// parseResetOffsetBody reads ResetOffsetBody as Java brokers (fastjson) and
// Apogee write it, with message-queue objects as keys, which is not JSON:
// {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5,...}}. An empty
// body is an empty table.
func parseResetOffsetBody(b []byte) (map[MessageQueue]int64, error) {
	out := map[MessageQueue]int64{}
	if len(bytes.TrimSpace(b)) == 0 {
		return out, nil
	}
	bad := func(pos int, what string) error {
		return fmt.Errorf("client: reset-offset body at byte %d: %s", pos, what)
	}
	i := bytes.Index(b, []byte(`"offsetTable"`))
	if i < 0 {
		return out, nil
	}
	i += len(`"offsetTable"`)
	skip := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	skip()
	if i >= len(b) || b[i] != ':' {
		return nil, bad(i, "':' expected")
	}
	i++
	skip()
	if i < len(b) && b[i] == 'n' && bytes.HasPrefix(b[i:], []byte("null")) {
		return out, nil
	}
	if i >= len(b) || b[i] != '{' {
		return nil, bad(i, "'{' expected")
	}
	i++
	for {
		skip()
		if i >= len(b) {
			return nil, bad(i, "unterminated offset table")
		}
		switch b[i] {
		case '}':
			return out, nil
		case ',':
			i++
			continue
		case '{':
		default:
			return nil, bad(i, "'{' expected")
		}
		// The key: a flat object; find its end outside strings.
		start, inStr, esc := i, false, false
		for i++; i < len(b); i++ {
			c := b[i]
			if inStr {
				switch {
				case esc:
					esc = false
				case c == '\\':
					esc = true
				case c == '"':
					inStr = false
				}
				continue
			}
			if c == '"' {
				inStr = true
			} else if c == '}' {
				break
			} else if c == '{' {
				return nil, bad(i, "nested object in a queue key")
			}
		}
		if i >= len(b) {
			return nil, bad(start, "unterminated queue key")
		}
		i++
		var k struct {
			Topic      string `json:"topic"`
			BrokerName string `json:"brokerName"`
			QueueID    int32  `json:"queueId"`
		}
		if err := json.Unmarshal(b[start:i], &k); err != nil {
			return nil, bad(start, err.Error())
		}
		skip()
		if i >= len(b) || b[i] != ':' {
			return nil, bad(i, "':' expected")
		}
		i++
		skip()
		numStart := i
		if i < len(b) && b[i] == '-' {
			i++
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		off, err := strconv.ParseInt(string(b[numStart:i]), 10, 64)
		if err != nil {
			return nil, bad(numStart, "offset: "+err.Error())
		}
		out[MessageQueue{Topic: k.Topic, BrokerName: k.BrokerName, QueueID: k.QueueID}] = off
	}
}
