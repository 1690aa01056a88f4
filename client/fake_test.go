package client_test

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// fakeBroker is an in-memory broker and name server on one address, built on
// remoting.NewServer: routes, heartbeats, sends (single, batch, transaction half
// messages), long-polling pulls with tag filtering, offsets, send-back to retry and
// dead-letter topics, consumer lists with NOTIFY_CONSUMER_IDS_CHANGED, queue locks.
type fakeBroker struct {
	t         testing.TB
	srv       *remoting.Server
	addr      string
	host      netip.AddrPort
	name      string
	queueNums int32
	// peers are other fake brokers listed in this one's routes (a two-broker cluster
	// whose name server is this broker).
	peers []*fakeBroker

	// hook, when set, sees every request first; handled=true answers it with code.
	hook atomic.Pointer[func(req *protocol.Command) (code int32, handled bool)]

	mu          sync.Mutex
	topics      map[string]int32 // topic → queues; unknown topics are auto-created if autoCreate
	autoCreate  bool
	queues      map[string][][]byte // "topic/qid" → records
	byOffset    map[int64][]byte    // commit-log offset → record
	half        map[int64][]byte    // half messages by commit-log offset
	nextOffset  int64
	offsets     map[string]int64 // "group/topic/qid"
	clients     map[string]*fakeClient
	groups      map[string]map[string]bool // group → client IDs
	subs        map[string]protocol.SubscriptionData
	locks       map[string]fakeLock
	parked      map[string][]*parkedPull
	ends        []protocol.EndTransactionRequest
	unregisters []protocol.UnregisterClientRequest
	heartbeats  int
	sendBacks   int
	encodings   map[protocol.SerializeType]int
	codes       map[int32]int
}

type fakeClient struct {
	id      string
	conn    *remoting.Conn
	groups  map[string]bool
	pgroups map[string]bool
}

type fakeLock struct {
	client string
	at     time.Time
}

type parkedPull struct {
	r      remoting.Responder
	group  string
	topic  string
	qid    int32
	offset int64
	max    int32
	timer  *time.Timer
	done   bool
}

func newFakeBroker(t testing.TB, configure ...func(*fakeBroker)) *fakeBroker {
	t.Helper()
	b := &fakeBroker{
		t: t, name: "broker-a", queueNums: 4, autoCreate: true,
		topics: map[string]int32{"TBW102": 8}, queues: map[string][][]byte{}, byOffset: map[int64][]byte{},
		half: map[int64][]byte{}, offsets: map[string]int64{}, clients: map[string]*fakeClient{},
		groups: map[string]map[string]bool{}, subs: map[string]protocol.SubscriptionData{},
		locks: map[string]fakeLock{}, parked: map[string][]*parkedPull{},
		encodings: map[protocol.SerializeType]int{}, codes: map[int32]int{},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = l.Addr().String()
	b.host = netip.MustParseAddrPort(b.addr)
	for _, fn := range configure {
		fn(b)
	}
	b.srv = remoting.NewServer(b, &remoting.Options{IdleTimeout: -1})
	b.srv.OnClose(b.connClosed)
	go b.srv.Serve(l)
	t.Cleanup(func() { b.close() })
	return b
}

func (b *fakeBroker) close() {
	b.mu.Lock()
	for _, ps := range b.parked {
		for _, p := range ps {
			if !p.done {
				p.done = true
				p.timer.Stop()
				p.r.Cancel()
			}
		}
	}
	b.parked = map[string][]*parkedPull{}
	b.mu.Unlock()
	b.srv.Close()
}

func (b *fakeBroker) setHook(fn func(req *protocol.Command) (int32, bool)) { b.hook.Store(&fn) }

func qkey(topic string, qid int32) string { return fmt.Sprintf("%s/%d", topic, qid) }

// ServeRemoting serves one request.
func (b *fakeBroker) ServeRemoting(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	b.mu.Lock()
	b.encodings[req.SerializeType]++
	b.codes[req.Code]++
	b.mu.Unlock()
	if h := b.hook.Load(); h != nil {
		if code, handled := (*h)(req); handled {
			if code < 0 {
				return remoting.NoReply
			}
			resp.Cmd.Code = code
			resp.Cmd.SetRemark("injected")
			return remoting.Reply
		}
	}
	switch req.Code {
	case protocol.ReqGetRouteInfoByTopic:
		return b.route(req, resp)
	case protocol.ReqHeartBeat:
		return b.heartbeat(c, req, resp)
	case protocol.ReqUnregisterClient:
		var h protocol.UnregisterClientRequest
		h.Decode(&req.Ext)
		b.mu.Lock()
		b.unregisters = append(b.unregisters, h)
		if cl := b.clients[h.ClientID]; cl != nil && h.ConsumerGroup != "" {
			delete(cl.groups, h.ConsumerGroup)
			if b.groups[h.ConsumerGroup] != nil {
				delete(b.groups[h.ConsumerGroup], h.ClientID)
			}
			b.notifyLocked(h.ConsumerGroup)
		}
		b.mu.Unlock()
		return remoting.Reply
	case protocol.ReqSendMessage, protocol.ReqSendMessageV2, protocol.ReqSendBatchMessage:
		return b.send(c, req, resp)
	case protocol.ReqEndTransaction:
		var h protocol.EndTransactionRequest
		if err := h.Decode(&req.Ext); err != nil {
			resp.Cmd.Code = protocol.RespSystemError
			return remoting.Reply
		}
		b.mu.Lock()
		b.ends = append(b.ends, h)
		rec := b.half[h.CommitLogOffset]
		if rec != nil && h.CommitOrRollback != protocol.TransactionNotType {
			delete(b.half, h.CommitLogOffset)
			if h.CommitOrRollback == protocol.TransactionCommitType {
				v, _ := message.Decode(rec, false)
				topic, _ := v.Property(message.PropRealTopic)
				b.storeLocked(string(topic), 0, v.Flag(), message.SetTxType(v.SysFlag(), message.TxCommitType), v.BornTimestamp(), v.BornHost(), 0, v.Body(), v.Properties())
			}
		}
		b.mu.Unlock()
		return remoting.Reply
	case protocol.ReqPullMessage:
		return b.pull(c, req, resp)
	case protocol.ReqQueryConsumerOffset:
		var h protocol.QueryConsumerOffsetRequest
		h.Decode(&req.Ext)
		b.mu.Lock()
		off, ok := b.offsets[string(h.ConsumerGroup)+"/"+qkey(string(h.Topic), h.QueueID)]
		b.mu.Unlock()
		if !ok {
			resp.Cmd.Code = protocol.RespQueryNotFound
			return remoting.Reply
		}
		resp.Cmd.Ext.SetInt("offset", off)
		return remoting.Reply
	case protocol.ReqUpdateConsumerOffset:
		var h protocol.UpdateConsumerOffsetRequest
		h.Decode(&req.Ext)
		b.mu.Lock()
		b.offsets[string(h.ConsumerGroup)+"/"+qkey(string(h.Topic), h.QueueID)] = h.CommitOffset
		b.mu.Unlock()
		return remoting.Reply
	case protocol.ReqGetMaxOffset, protocol.ReqGetMinOffset:
		var h protocol.QueueRequest
		h.Decode(&req.Ext)
		b.mu.Lock()
		n := len(b.queues[qkey(string(h.Topic), h.QueueID)])
		b.mu.Unlock()
		if req.Code == protocol.ReqGetMinOffset {
			n = 0
		}
		resp.Cmd.Ext.SetInt("offset", int64(n))
		return remoting.Reply
	case protocol.ReqSearchOffsetByTimestamp:
		var h protocol.SearchOffsetByTimestampRequest
		h.Decode(&req.Ext)
		b.mu.Lock()
		recs := b.queues[qkey(string(h.Topic), h.QueueID)]
		off := len(recs)
		for i, r := range recs {
			v, _ := message.Decode(r, false)
			if v.StoreTimestamp() >= h.Timestamp {
				off = i
				break
			}
		}
		b.mu.Unlock()
		resp.Cmd.Ext.SetInt("offset", int64(off))
		return remoting.Reply
	case protocol.ReqGetConsumerListByGroup:
		var h protocol.GetConsumerListByGroupRequest
		h.Decode(&req.Ext)
		b.mu.Lock()
		var ids []string
		for id := range b.groups[h.ConsumerGroup] {
			ids = append(ids, id)
		}
		b.mu.Unlock()
		sort.Strings(ids)
		body, _ := (&protocol.ConsumerListBody{ConsumerIDList: ids}).Encode()
		resp.Cmd.Body = body
		return remoting.Reply
	case protocol.ReqConsumerSendMsgBack:
		return b.sendBack(req, resp)
	case protocol.ReqLockBatchMQ, protocol.ReqUnlockBatchMQ:
		var body protocol.LockBatchRequestBody
		if err := body.Decode(req.Body); err != nil {
			resp.Cmd.Code = protocol.RespSystemError
			return remoting.Reply
		}
		b.mu.Lock()
		var ok []protocol.MessageQueue
		for _, mq := range body.MQSet {
			k := body.ConsumerGroup + "/" + qkey(mq.Topic, mq.QueueID)
			l, held := b.locks[k]
			if req.Code == protocol.ReqUnlockBatchMQ {
				if held && l.client == body.ClientID {
					delete(b.locks, k)
				}
				continue
			}
			if !held || l.client == body.ClientID || time.Since(l.at) > 60*time.Second {
				b.locks[k] = fakeLock{client: body.ClientID, at: time.Now()}
				ok = append(ok, mq)
			}
		}
		b.mu.Unlock()
		if req.Code == protocol.ReqLockBatchMQ {
			out, _ := (&protocol.LockBatchResponseBody{LockOKMQSet: ok}).Encode()
			resp.Cmd.Body = out
		}
		return remoting.Reply
	}
	resp.Cmd.Code = protocol.RespRequestCodeNotSupported
	return remoting.Reply
}

func (b *fakeBroker) route(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.GetRouteInfoRequest
	h.Decode(&req.Ext)
	topic := string(h.Topic)
	b.mu.Lock()
	n, ok := b.topics[topic]
	if !ok && (b.autoCreate || strings.HasPrefix(topic, "%")) {
		n = b.queueNums
		if strings.HasPrefix(topic, "%") {
			n = 1
		}
		b.topics[topic] = n
		ok = true
	}
	b.mu.Unlock()
	if !ok {
		resp.Cmd.Code = protocol.RespTopicNotExist
		resp.Cmd.SetRemark("No topic route info in name server for the topic: " + topic)
		return remoting.Reply
	}
	perm := protocol.PermRead | protocol.PermWrite
	if topic == "TBW102" {
		perm |= protocol.PermInherit
	}
	rd := protocol.TopicRouteData{
		QueueDatas:  []protocol.QueueData{{BrokerName: b.name, ReadQueueNums: n, WriteQueueNums: n, Perm: perm}},
		BrokerDatas: []protocol.BrokerData{{Cluster: "c", BrokerName: b.name, BrokerAddrs: map[int64]string{0: b.addr}}},
	}
	for _, p := range b.peers {
		rd.QueueDatas = append(rd.QueueDatas, protocol.QueueData{BrokerName: p.name, ReadQueueNums: n, WriteQueueNums: n, Perm: perm})
		rd.BrokerDatas = append(rd.BrokerDatas, protocol.BrokerData{Cluster: "c", BrokerName: p.name, BrokerAddrs: map[int64]string{0: p.addr}})
	}
	resp.Cmd.Body = rd.AppendJSON(nil, true)
	return remoting.Reply
}

func (b *fakeBroker) heartbeat(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var hb protocol.HeartbeatData
	if err := hb.Decode(req.Body); err != nil {
		resp.Cmd.Code = protocol.RespSystemError
		return remoting.Reply
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.heartbeats++
	cl := b.clients[hb.ClientID]
	if cl == nil {
		cl = &fakeClient{id: hb.ClientID, groups: map[string]bool{}, pgroups: map[string]bool{}}
		b.clients[hb.ClientID] = cl
	}
	cl.conn = c
	c.SetValue(cl)
	for _, p := range hb.ProducerDataSet {
		cl.pgroups[p.GroupName] = true
	}
	for _, cd := range hb.ConsumerDataSet {
		cl.groups[cd.GroupName] = true
		if b.groups[cd.GroupName] == nil {
			b.groups[cd.GroupName] = map[string]bool{}
		}
		for _, s := range cd.SubscriptionDataSet {
			b.subs[cd.GroupName+"/"+s.Topic] = s
		}
		if !b.groups[cd.GroupName][hb.ClientID] {
			b.groups[cd.GroupName][hb.ClientID] = true
			b.notifyLocked(cd.GroupName)
		}
	}
	return remoting.Reply
}

// notifyLocked sends NOTIFY_CONSUMER_IDS_CHANGED to every member of group.
func (b *fakeBroker) notifyLocked(group string) {
	for id := range b.groups[group] {
		cl := b.clients[id]
		if cl == nil || cl.conn == nil {
			continue
		}
		req := new(protocol.Command)
		req.InitRequest(protocol.ReqNotifyConsumerIdsChanged, 0)
		(&protocol.NotifyConsumerIdsChangedRequest{ConsumerGroup: group}).Encode(&req.Ext)
		cl.conn.InvokeOneway(req)
	}
}

func (b *fakeBroker) connClosed(c *remoting.Conn) {
	cl, _ := c.Value().(*fakeClient)
	if cl == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.clients[cl.id] != cl || cl.conn != c {
		return
	}
	delete(b.clients, cl.id)
	for g := range cl.groups {
		delete(b.groups[g], cl.id)
		b.notifyLocked(g)
	}
}

func (b *fakeBroker) send(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.SendMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		resp.Cmd.Code = protocol.RespMessageIllegal
		resp.Cmd.SetRemark(err.Error())
		return remoting.Reply
	}
	born, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	topic := string(h.Topic)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.topics[topic]; !ok {
		if !b.autoCreate && string(h.DefaultTopic) != "TBW102" {
			resp.Cmd.Code = protocol.RespTopicNotExist
			return remoting.Reply
		}
		b.topics[topic] = min(h.DefaultTopicQueueNums, b.queueNums)
		if b.topics[topic] <= 0 {
			b.topics[topic] = b.queueNums
		}
	}
	var first int64 = -1
	var ids []string
	if req.Code == protocol.ReqSendBatchMessage {
		err := message.ForEachBatchEntry(req.Body, func(flag int32, body, props []byte) error {
			off, qoff := b.storeLocked(topic, h.QueueID, flag, h.SysFlag, h.BornTimestamp, born, h.ReconsumeTimes, body, props)
			if first < 0 {
				first = qoff
			}
			ids = append(ids, message.OffsetMsgID(b.host, off))
			return nil
		})
		if err != nil {
			resp.Cmd.Code = protocol.RespMessageIllegal
			return remoting.Reply
		}
	} else if message.TxType(h.SysFlag) == message.TxPreparedType {
		props := message.AppendProperty(append([]byte(nil), h.Properties...), message.PropRealTopic, topic)
		rec, _ := message.AppendRecord(nil, &message.Record{Topic: "RMQ_SYS_TRANS_HALF_TOPIC", Flag: h.Flag, SysFlag: h.SysFlag,
			QueueOffset: int64(len(b.half)), PhysicalOffset: b.nextOffset, BornTimestamp: h.BornTimestamp, BornHost: born,
			StoreTimestamp: time.Now().UnixMilli(), StoreHost: b.host, Body: append([]byte(nil), req.Body...), Properties: props})
		off := b.nextOffset
		b.nextOffset += int64(len(rec))
		b.half[off] = rec
		first = int64(len(b.half) - 1)
		ids = append(ids, message.OffsetMsgID(b.host, off))
	} else {
		off, qoff := b.storeLocked(topic, h.QueueID, h.Flag, h.SysFlag, h.BornTimestamp, born, h.ReconsumeTimes, req.Body, h.Properties)
		first = qoff
		ids = append(ids, message.OffsetMsgID(b.host, off))
	}
	uniq, _ := message.LookupProperty(h.Properties, message.PropUniqKey)
	(&protocol.SendMessageResponse{MsgID: []byte(strings.Join(ids, ",")), QueueID: h.QueueID, QueueOffset: first, TransactionID: uniq}).Encode(&resp.Cmd.Ext)
	return remoting.Reply
}

// storeLocked appends a record to topic/qid (with DELAY ignored: delivered at once)
// and wakes parked pulls. It returns the commit-log and queue offsets.
func (b *fakeBroker) storeLocked(topic string, qid, flag, sysFlag int32, born int64, bornHost netip.AddrPort, reconsume int32, body, props []byte) (int64, int64) {
	k := qkey(topic, qid)
	qoff := int64(len(b.queues[k]))
	rec, err := message.AppendRecord(nil, &message.Record{Topic: topic, QueueID: qid, Flag: flag, SysFlag: sysFlag,
		QueueOffset: qoff, PhysicalOffset: b.nextOffset, BornTimestamp: born, BornHost: bornHost,
		StoreTimestamp: time.Now().UnixMilli(), StoreHost: b.host, ReconsumeTimes: reconsume,
		Body: append([]byte(nil), body...), Properties: append([]byte(nil), props...)})
	if err != nil {
		b.t.Errorf("fake broker: encode: %v", err)
		return 0, 0
	}
	off := b.nextOffset
	b.nextOffset += int64(len(rec))
	b.queues[k] = append(b.queues[k], rec)
	b.byOffset[off] = rec
	for _, p := range b.parked[k] {
		if !p.done {
			b.answerParkedLocked(p)
		}
	}
	delete(b.parked, k)
	return off, qoff
}

// collectLocked returns the records of a pull and the next offset.
func (b *fakeBroker) collectLocked(group, topic string, qid int32, offset int64, max int32) ([][]byte, int64) {
	recs := b.queues[qkey(topic, qid)]
	sub, hasSub := b.subs[group+"/"+topic]
	var out [][]byte
	next := offset
	for i := offset; i < int64(len(recs)) && int32(len(out)) < max; i++ {
		next = i + 1
		if hasSub && len(sub.TagsSet) > 0 && sub.ExpressionType != "SQL92" {
			v, _ := message.Decode(recs[i], false)
			if !slices.Contains(sub.TagsSet, string(v.Tags())) {
				continue
			}
		}
		out = append(out, recs[i])
	}
	return out, next
}

func (b *fakeBroker) pullResponse(cmd *protocol.Command, recs [][]byte, next, max int64) {
	if len(recs) > 0 {
		cmd.Code = protocol.RespSuccess
		for _, r := range recs {
			cmd.Body = append(cmd.Body, r...)
		}
	} else if next > 0 && next != max {
		cmd.Code = protocol.RespPullRetryImmediately
	} else {
		cmd.Code = protocol.RespPullNotFound
	}
	(&protocol.PullMessageResponse{NextBeginOffset: next, MinOffset: 0, MaxOffset: max}).Encode(&cmd.Ext)
}

func (b *fakeBroker) pull(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.PullMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		resp.Cmd.Code = protocol.RespSystemError
		return remoting.Reply
	}
	group, topic := string(h.ConsumerGroup), string(h.Topic)
	b.mu.Lock()
	defer b.mu.Unlock()
	if h.SysFlag&protocol.PullFlagCommitOffset != 0 && h.CommitOffset > 0 {
		b.offsets[group+"/"+qkey(topic, h.QueueID)] = h.CommitOffset
	}
	max := int64(len(b.queues[qkey(topic, h.QueueID)]))
	if h.QueueOffset > max {
		resp.Cmd.Code = protocol.RespPullOffsetMoved
		(&protocol.PullMessageResponse{NextBeginOffset: max, MaxOffset: max}).Encode(&resp.Cmd.Ext)
		return remoting.Reply
	}
	recs, next := b.collectLocked(group, topic, h.QueueID, h.QueueOffset, h.MaxMsgNums)
	if len(recs) > 0 || h.SysFlag&protocol.PullFlagSuspend == 0 || next < max {
		b.pullResponse(resp.Cmd, recs, next, max)
		return remoting.Reply
	}
	p := &parkedPull{r: c.Defer(req), group: group, topic: topic, qid: h.QueueID, offset: h.QueueOffset, max: h.MaxMsgNums}
	k := qkey(topic, h.QueueID)
	b.parked[k] = append(b.parked[k], p)
	wait := time.Duration(h.SuspendTimeoutMillis) * time.Millisecond
	p.timer = time.AfterFunc(wait, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if !p.done {
			b.answerParkedLocked(p)
		}
	})
	return remoting.Deferred
}

func (b *fakeBroker) answerParkedLocked(p *parkedPull) {
	p.done = true
	if p.timer != nil {
		p.timer.Stop()
	}
	recs, next := b.collectLocked(p.group, p.topic, p.qid, p.offset, p.max)
	cmd := new(protocol.Command)
	p.r.InitResponse(cmd, 0)
	b.pullResponse(cmd, recs, next, int64(len(b.queues[qkey(p.topic, p.qid)])))
	p.r.Reply(&remoting.Response{Cmd: cmd})
}

func (b *fakeBroker) sendBack(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.ConsumerSendMsgBackRequest
	if err := h.Decode(&req.Ext); err != nil {
		resp.Cmd.Code = protocol.RespSystemError
		return remoting.Reply
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sendBacks++
	rec := b.byOffset[h.Offset]
	if rec == nil {
		resp.Cmd.Code = protocol.RespSystemError
		return remoting.Reply
	}
	v, _ := message.Decode(rec, false)
	max := int32(16)
	if h.HasMaxReconsumeTimes {
		max = h.MaxReconsumeTimes
	}
	topic := "%RETRY%" + h.Group
	if v.ReconsumeTimes() >= max || h.DelayLevel < 0 {
		topic = "%DLQ%" + h.Group
	}
	if _, ok := b.topics[topic]; !ok {
		b.topics[topic] = 1
	}
	props := append([]byte(nil), v.Properties()...)
	if _, ok := v.Property(message.PropRetryTopic); !ok {
		props = message.AppendProperty(props, message.PropRetryTopic, string(v.Topic()))
	}
	props = message.AppendProperty(props, message.PropOriginMessageID, h.OriginMsgID)
	b.storeLocked(topic, 0, v.Flag(), v.SysFlag(), v.BornTimestamp(), v.BornHost(), v.ReconsumeTimes()+1, v.Body(), props)
	return remoting.Reply
}

// pushCheck sends CHECK_TRANSACTION_STATE for the half message at commit-log offset
// off to the client with the given producer group.
func (b *fakeBroker) pushCheck(t *testing.T, pgroup string, off int64) {
	t.Helper()
	b.mu.Lock()
	rec := b.half[off]
	var conn *remoting.Conn
	for _, cl := range b.clients {
		if cl.pgroups[pgroup] {
			conn = cl.conn
		}
	}
	b.mu.Unlock()
	if rec == nil || conn == nil {
		t.Fatalf("pushCheck: no half message at %d or no producer of %q", off, pgroup)
	}
	v, _ := message.Decode(rec, false)
	req := new(protocol.Command)
	req.InitRequest(protocol.ReqCheckTransactionState, 0)
	uniq, _ := v.Property(message.PropUniqKey)
	(&protocol.CheckTransactionStateRequest{TranStateTableOffset: v.QueueOffset(), CommitLogOffset: off,
		MsgID: string(uniq), TransactionID: string(uniq), OffsetMsgID: message.OffsetMsgID(b.host, off)}).Encode(&req.Ext)
	req.Body = rec
	if err := conn.InvokeOneway(req); err != nil {
		t.Fatal(err)
	}
}

// records returns a copy of the records of topic/qid.
func (b *fakeBroker) records(topic string, qid int32) [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.queues[qkey(topic, qid)])
}

// count returns the number of messages stored in topic.
func (b *fakeBroker) count(topic string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for k, v := range b.queues {
		if strings.HasPrefix(k, topic+"/") {
			n += len(v)
		}
	}
	return n
}

func (b *fakeBroker) codeCount(code int32) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.codes[code]
}

func (b *fakeBroker) offset(group, topic string, qid int32) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.offsets[group+"/"+qkey(topic, qid)]
	return o, ok
}

func (b *fakeBroker) members(group string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for id := range b.groups[group] {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
