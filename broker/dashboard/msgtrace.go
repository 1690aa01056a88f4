package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// DefaultTraceTopic is RocketMQ's default trace topic (traceTopicName).
const DefaultTraceTopic = "RMQ_SYS_TRACE_TOPIC"

// The 4.x clients' trace format (Java's TraceDataEncoder, the Go client's
// TraceContext.marshal2Bean): a trace message's body holds records ended
// by fieldSep, each a list of fields separated by contentSep; the message's
// keys are the traced messages' ids (their unique keys) and keys, so the
// trace topic's key index finds a message's records by its id.
const (
	traceContentSep = '\x01'
	traceFieldSep   = '\x02'
)

// TraceEvent is one decoded trace record.
type TraceEvent struct {
	// Type is Pub (a send), SubBefore (a delivery to a consumer),
	// SubAfter (its result) or EndTransaction; Event says it in words.
	Type, Event string
	// TimeMs is when it happened (0: the record carries no time).
	TimeMs         int64
	Time           string
	Group, Topic   string
	MsgID          string
	Tags, Keys     string
	StoreHost      string
	ClientHost     string
	RequestID      string
	CostMs         string
	Success        string
	RetryTimes     string
	OffsetMsgID    string
	BodyLength     string
	MsgType        string
	ContextCode    string
	TransactionID  string
	TransactionEnd string
}

// DecodeTraces decodes a trace message's body into its records; a record
// of a type it does not know is kept with its type and raw fields in Keys.
func DecodeTraces(body []byte) []TraceEvent {
	var out []TraceEvent
	for _, rec := range strings.Split(string(body), string(rune(traceFieldSep))) {
		if strings.TrimSpace(rec) == "" {
			continue
		}
		f := strings.Split(rec, string(rune(traceContentSep)))
		at := func(i int) string {
			if i < len(f) {
				return f[i]
			}
			return ""
		}
		e := TraceEvent{Type: f[0]}
		ms := func(i int) {
			if n, err := strconv.ParseInt(at(i), 10, 64); err == nil {
				e.TimeMs = n
			}
		}
		switch e.Type {
		case "Pub":
			// type, time, region, group, topic, msgId, tags, keys,
			// storeHost, bodyLength, costTime, msgType, offsetMsgId,
			// success[, clientHost]
			e.Event = "sent"
			ms(1)
			e.Group, e.Topic, e.MsgID, e.Tags, e.Keys, e.StoreHost = at(3), at(4), at(5), at(6), at(7), at(8)
			e.BodyLength, e.CostMs, e.MsgType, e.OffsetMsgID, e.Success, e.ClientHost = at(9), at(10), msgTypeName(at(11)), at(12), at(13), at(14)
		case "SubBefore":
			// type, time, region, group, requestId, msgId, retryTimes,
			// keys[, clientHost]
			e.Event = "delivered to a consumer"
			ms(1)
			e.Group, e.RequestID, e.MsgID, e.RetryTimes, e.Keys, e.ClientHost = at(3), at(4), at(5), at(6), nullless(at(7)), at(8)
		case "SubAfter":
			// type, requestId, msgId, costTime, success, keys[,
			// contextCode[, time, group]]
			e.Event = "consumed"
			e.RequestID, e.MsgID, e.CostMs, e.Success, e.Keys, e.ContextCode = at(1), at(2), at(3), at(4), nullless(at(5)), at(6)
			ms(7)
			e.Group = at(8)
		case "EndTransaction":
			// type, time, region, group, topic, msgId, tags, keys,
			// storeHost, msgType, transactionId, transactionState,
			// fromTransactionCheck
			e.Event = "transaction ended"
			ms(1)
			e.Group, e.Topic, e.MsgID, e.Tags, e.Keys, e.StoreHost = at(3), at(4), at(5), at(6), at(7), at(8)
			e.MsgType, e.TransactionID, e.TransactionEnd = msgTypeName(at(9)), at(10), at(11)
			if at(12) == "true" {
				e.TransactionEnd += " (by a check)"
			}
		default:
			e.Event = "record " + e.Type
			e.Keys = strings.Join(f[1:], " ")
		}
		e.Time = formatMs(e.TimeMs)
		out = append(out, e)
	}
	return out
}

func nullless(s string) string {
	if s == "null" {
		return ""
	}
	return s
}

// msgTypeName names the client's MessageType (Normal_Msg, Trans_Msg_Half,
// Trans_msg_Commit, Delay_Msg, Order_Msg).
func msgTypeName(s string) string {
	switch s {
	case "0":
		return "normal"
	case "1":
		return "transaction half"
	case "2":
		return "transaction commit"
	case "3":
		return "delay"
	case "4":
		return "order"
	}
	return s
}

type traceData struct {
	ID, Topic   string
	TraceTopic  string
	Searched    bool
	NoTopic     bool
	Events      []TraceEvent
	TraceMsgs   int
	Consumers   []string
	Unconsumed  bool
	TopicOfMsg  string
	SentByGroup string
}

const maxTraceMessages = 64

// traceView is /trace?id=ID: the trace records of the message whose id
// (unique key) is ID, from the trace topic, in time order, with each
// consumption's result paired to its delivery (the request id).
func (d *Dashboard) traceView(r *http.Request) (any, error) {
	c := d.b.Core()
	q := r.URL.Query()
	out := traceData{ID: strings.TrimSpace(q.Get("id")), TraceTopic: d.o.TraceTopic}
	if _, ok := c.TopicConfig(d.o.TraceTopic); !ok {
		out.NoTopic = true
		return out, nil
	}
	if out.ID == "" {
		return out, nil
	}
	out.Searched = true
	if _, _, err := message.ParseOffsetMsgID(out.ID); err == nil {
		// An offset id: trace records name the unique key; read it.
		v, err := c.ViewMessageByOffsetID(out.ID)
		if err == nil {
			if row, ok := describe(v.Bytes()); ok && row.UniqKey != "" {
				out.ID = row.UniqKey
			}
			v.Release()
		}
	}
	res, err := c.QueryMessage(d.o.TraceTopic, out.ID, 0, 1<<62, maxTraceMessages)
	if err != nil {
		if core.Code(err) == protocol.RespQueryNotFound {
			return out, nil
		}
		return out, fmt.Errorf("query %s in %s: %s", out.ID, d.o.TraceTopic, core.Remark(err))
	}
	defer core.ReleaseViews(res.Views)
	seen := map[string]bool{}
	for _, v := range res.Views {
		m, err := message.Decode(v.Bytes(), false)
		if err != nil {
			continue
		}
		out.TraceMsgs++
		for _, e := range DecodeTraces(m.Body()) {
			if e.MsgID != out.ID {
				continue
			}
			// A trace message may be stored twice (a client's retry): keep
			// one of each record.
			k := fmt.Sprint(e)
			if seen[k] {
				continue
			}
			seen[k] = true
			out.Events = append(out.Events, e)
		}
	}
	// Pair each result with its delivery: its group and, without a time
	// of its own, the delivery's time plus its cost.
	before := map[string]TraceEvent{}
	for _, e := range out.Events {
		if e.Type == "SubBefore" {
			before[e.RequestID] = e
		}
	}
	groups := map[string]bool{}
	for i, e := range out.Events {
		switch e.Type {
		case "SubAfter":
			if b, ok := before[e.RequestID]; ok {
				if e.Group == "" {
					out.Events[i].Group = b.Group
				}
				if e.ClientHost == "" {
					out.Events[i].ClientHost = b.ClientHost
				}
				if e.TimeMs == 0 {
					cost, _ := strconv.ParseInt(e.CostMs, 10, 64)
					out.Events[i].TimeMs = b.TimeMs + cost
					out.Events[i].Time = formatMs(out.Events[i].TimeMs)
				}
			}
			groups[out.Events[i].Group] = true
		case "Pub":
			out.TopicOfMsg, out.SentByGroup = e.Topic, e.Group
		}
	}
	for g := range groups {
		if g != "" {
			out.Consumers = append(out.Consumers, g)
		}
	}
	sort.Strings(out.Consumers)
	order := map[string]int{"Pub": 0, "EndTransaction": 1, "SubBefore": 2, "SubAfter": 3}
	sort.SliceStable(out.Events, func(i, j int) bool {
		a, b := out.Events[i], out.Events[j]
		if a.TimeMs != b.TimeMs {
			return a.TimeMs < b.TimeMs
		}
		return order[a.Type] < order[b.Type]
	})
	out.Unconsumed = len(out.Events) > 0 && len(out.Consumers) == 0
	if len(out.Events) == 0 && out.TraceMsgs > 0 {
		return out, errors.New("trace messages name this id among their keys, but none of their records is about it")
	}
	return out, nil
}
