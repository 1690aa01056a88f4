package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// Bodies of the admin codes, as the Java broker writes them with fastjson
// (RemotingSerializable.encode): fields in alphabetical order, and maps keyed
// by a MessageQueue written with the queue object itself as the key, which
// is not JSON ({"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}}).
// The Java tools parse exactly that; Encode writes it, Decode reads it (and
// plain JSON) through FastjsonToJSON. The field names and their classes are
// those of org.apache.rocketmq.remoting.protocol.admin and .body.

// AppendMQKey appends mq as fastjson writes a MessageQueue map key.
func AppendMQKey(dst []byte, mq MessageQueue) []byte {
	dst = append(dst, `{"brokerName":`...)
	dst = strconv.AppendQuote(dst, mq.BrokerName)
	dst = append(dst, `,"queueId":`...)
	dst = strconv.AppendInt(dst, int64(mq.QueueID), 10)
	dst = append(dst, `,"topic":`...)
	dst = strconv.AppendQuote(dst, mq.Topic)
	return append(dst, '}')
}

// appendQueueMap appends {KEY:VALUE,...} with the queues sorted (topic,
// broker name, queue id: MessageQueue.compareTo), each value marshalled.
func appendQueueMap[V any](dst []byte, m map[MessageQueue]V) ([]byte, error) {
	keys := make([]MessageQueue, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	SortQueues(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendMQKey(dst, k)
		dst = append(dst, ':')
		v, err := json.Marshal(m[k])
		if err != nil {
			return nil, err
		}
		dst = append(dst, v...)
	}
	return append(dst, '}'), nil
}

// SortQueues sorts queues as Java's MessageQueue.compareTo: by topic, broker
// name, queue id.
func SortQueues(qs []MessageQueue) {
	sort.Slice(qs, func(i, j int) bool {
		a, b := qs[i], qs[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.BrokerName != b.BrokerName {
			return a.BrokerName < b.BrokerName
		}
		return a.QueueID < b.QueueID
	})
}

// decodeQueueMap reads a map of FastjsonToJSON's output (queue keys as
// strings holding the key object's JSON).
func decodeQueueMap[V any](raw map[string]V) (map[MessageQueue]V, error) {
	out := make(map[MessageQueue]V, len(raw))
	for k, v := range raw {
		var mq MessageQueue
		if err := json.Unmarshal([]byte(k), &mq); err != nil {
			return nil, fmt.Errorf("protocol: queue key %q: %w", k, err)
		}
		out[mq] = v
	}
	return out, nil
}

// FastjsonToJSON rewrites fastjson's output as JSON: an object key that is
// not a string (an object, an array, a number) becomes a string holding
// that key's text. Valid JSON comes back unchanged in meaning.
func FastjsonToJSON(b []byte) ([]byte, error) {
	out := make([]byte, 0, len(b)+len(b)/8)
	type frame struct{ object, wantKey bool }
	var stack []frame
	i := 0
	skipSpace := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	// scanValue returns the end of the value starting at i (balanced
	// brackets, strings skipped).
	scanValue := func(start int) (int, error) {
		depth := 0
		inStr, esc := false, false
		for j := start; j < len(b); j++ {
			c := b[j]
			if inStr {
				switch {
				case esc:
					esc = false
				case c == '\\':
					esc = true
				case c == '"':
					inStr = false
					if depth == 0 {
						return j + 1, nil
					}
				}
				continue
			}
			switch c {
			case '"':
				inStr = true
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
				if depth < 0 {
					return j, nil
				}
			case ',', ':':
				if depth == 0 {
					return j, nil
				}
			}
		}
		if depth == 0 && !inStr {
			return len(b), nil
		}
		return 0, errors.New("protocol: unterminated value")
	}
	for {
		skipSpace()
		if i >= len(b) {
			break
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].object && stack[top].wantKey && b[i] != '}' && b[i] != '"' {
			// A non-string key: quote its text.
			end, err := scanValue(i)
			if err != nil {
				return nil, err
			}
			key := bytes.TrimSpace(b[i:end])
			out = strconv.AppendQuote(out, string(key))
			i = end
			stack[top].wantKey = false
			continue
		}
		c := b[i]
		switch c {
		case '{':
			stack = append(stack, frame{object: true, wantKey: true})
			out = append(out, c)
			i++
		case '[':
			stack = append(stack, frame{})
			out = append(out, c)
			i++
		case '}', ']':
			if top < 0 {
				return nil, fmt.Errorf("protocol: unbalanced %q at byte %d", c, i)
			}
			stack = stack[:top]
			out = append(out, c)
			i++
		case ',':
			if top >= 0 && stack[top].object {
				stack[top].wantKey = true
			}
			out = append(out, c)
			i++
		case ':':
			out = append(out, c)
			i++
		default:
			end, err := scanValue(i)
			if err != nil {
				return nil, err
			}
			if end == i {
				return nil, fmt.Errorf("protocol: unexpected %q at byte %d", c, i)
			}
			out = append(out, b[i:end]...)
			if top >= 0 && stack[top].object && stack[top].wantKey {
				stack[top].wantKey = false
			}
			i = end
		}
	}
	return out, nil
}

// decodeFastjson unmarshals a fastjson body into v.
func decodeFastjson(body []byte, v any) error {
	j, err := FastjsonToJSON(body)
	if err != nil {
		return err
	}
	return json.Unmarshal(j, v)
}

// OffsetWrapper is one queue of ConsumeStats.
type OffsetWrapper struct {
	BrokerOffset   int64 `json:"brokerOffset"`
	ConsumerOffset int64 `json:"consumerOffset"`
	LastTimestamp  int64 `json:"lastTimestamp"`
	PullOffset     int64 `json:"pullOffset"`
}

// ConsumeStats is GET_CONSUME_STATS's (208) body: a group's offsets per
// queue and its consume TPS (messages pulled per second over the last minute).
type ConsumeStats struct {
	ConsumeTps  float64
	OffsetTable map[MessageQueue]OffsetWrapper
}

// Encode writes the body as the Java broker does.
func (s *ConsumeStats) Encode() ([]byte, error) {
	return s.appendTo(make([]byte, 0, 64+len(s.OffsetTable)*128))
}

func (s *ConsumeStats) appendTo(dst []byte) ([]byte, error) {
	dst = append(dst, `{"consumeTps":`...)
	dst = appendJavaDouble(dst, s.ConsumeTps)
	dst = append(dst, `,"offsetTable":`...)
	dst, err := appendQueueMap(dst, s.OffsetTable)
	if err != nil {
		return nil, err
	}
	return append(dst, '}'), nil
}

// Decode reads the body.
func (s *ConsumeStats) Decode(body []byte) error {
	var raw struct {
		ConsumeTps  float64                  `json:"consumeTps"`
		OffsetTable map[string]OffsetWrapper `json:"offsetTable"`
	}
	if err := decodeFastjson(body, &raw); err != nil {
		return fmt.Errorf("protocol: decode ConsumeStats: %w", err)
	}
	t, err := decodeQueueMap(raw.OffsetTable)
	if err != nil {
		return err
	}
	s.ConsumeTps, s.OffsetTable = raw.ConsumeTps, t
	return nil
}

// TotalDiff is the lag summed over the queues (ConsumeStats.computeTotalDiff).
func (s *ConsumeStats) TotalDiff() int64 {
	var n int64
	for _, w := range s.OffsetTable {
		n += w.BrokerOffset - w.ConsumerOffset
	}
	return n
}

// TopicOffset is one queue of TopicStatsTable.
type TopicOffset struct {
	LastUpdateTimestamp int64 `json:"lastUpdateTimestamp"`
	MaxOffset           int64 `json:"maxOffset"`
	MinOffset           int64 `json:"minOffset"`
}

// TopicStatsTable is GET_TOPIC_STATS_INFO's (202) body.
type TopicStatsTable struct {
	OffsetTable map[MessageQueue]TopicOffset
	TopicPutTps float64
}

// Encode writes the body as the Java broker does.
func (t *TopicStatsTable) Encode() ([]byte, error) {
	dst := append(make([]byte, 0, 64+len(t.OffsetTable)*112), `{"offsetTable":`...)
	dst, err := appendQueueMap(dst, t.OffsetTable)
	if err != nil {
		return nil, err
	}
	dst = append(dst, `,"topicPutTps":`...)
	dst = appendJavaDouble(dst, t.TopicPutTps)
	return append(dst, '}'), nil
}

// Decode reads the body.
func (t *TopicStatsTable) Decode(body []byte) error {
	var raw struct {
		OffsetTable map[string]TopicOffset `json:"offsetTable"`
		TopicPutTps float64                `json:"topicPutTps"`
	}
	if err := decodeFastjson(body, &raw); err != nil {
		return fmt.Errorf("protocol: decode TopicStatsTable: %w", err)
	}
	m, err := decodeQueueMap(raw.OffsetTable)
	if err != nil {
		return err
	}
	t.OffsetTable, t.TopicPutTps = m, raw.TopicPutTps
	return nil
}

// Connection is one client connection of ConsumerConnection and
// ProducerConnection: language as Java's LanguageCode name, version as the
// client's MQVersion ordinal.
type Connection struct {
	ClientAddr string `json:"clientAddr"`
	ClientID   string `json:"clientId"`
	Language   string `json:"language"`
	Version    int32  `json:"version"`
}

// ProducerConnection is GET_PRODUCER_CONNECTION_LIST's (204) body.
type ProducerConnection struct {
	ConnectionSet []Connection `json:"connectionSet"`
}

// GroupList is QUERY_TOPIC_CONSUME_BY_WHO's (300) body.
type GroupList struct {
	GroupList []string `json:"groupList"`
}

// QueueTimeSpan is one queue of QUERY_CONSUME_TIME_SPAN's (303) body.
type QueueTimeSpan struct {
	ConsumeTimeStamp int64        `json:"consumeTimeStamp"`
	DelayTime        int64        `json:"delayTime"`
	MaxTimeStamp     int64        `json:"maxTimeStamp"`
	MessageQueue     MessageQueue `json:"messageQueue"`
	MinTimeStamp     int64        `json:"minTimeStamp"`
}

// QueryConsumeTimeSpanBody is QUERY_CONSUME_TIME_SPAN's (303) body.
type QueryConsumeTimeSpanBody struct {
	ConsumeTimeSpanSet []QueueTimeSpan `json:"consumeTimeSpanSet"`
}

// BrokerStatsItem is one window of BrokerStatsData.
type BrokerStatsItem struct {
	Avgpt float64 `json:"avgpt"`
	Sum   int64   `json:"sum"`
	Tps   float64 `json:"tps"`
}

// BrokerStatsData is VIEW_BROKER_STATS_DATA's (315) body: a statistic over
// the last minute, hour and day.
type BrokerStatsData struct {
	StatsDay    BrokerStatsItem `json:"statsDay"`
	StatsHour   BrokerStatsItem `json:"statsHour"`
	StatsMinute BrokerStatsItem `json:"statsMinute"`
}

// ConsumeStatsList is GET_BROKER_CONSUME_STATS's (317) body: for every group,
// its ConsumeStats per topic.
type ConsumeStatsList struct {
	BrokerAddr        string
	ConsumeStatsList  []map[string][]ConsumeStats
	TotalDiff         int64
	TotalInflightDiff int64
}

// Encode writes the body as the Java broker does.
func (l *ConsumeStatsList) Encode() ([]byte, error) {
	dst := append(make([]byte, 0, 256), `{"brokerAddr":`...)
	dst = strconv.AppendQuote(dst, l.BrokerAddr)
	dst = append(dst, `,"consumeStatsList":[`...)
	var err error
	for i, m := range l.ConsumeStatsList {
		if i > 0 {
			dst = append(dst, ',')
		}
		groups := make([]string, 0, len(m))
		for g := range m {
			groups = append(groups, g)
		}
		sort.Strings(groups)
		dst = append(dst, '{')
		for j, g := range groups {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendQuote(dst, g)
			dst = append(dst, ":["...)
			for k := range m[g] {
				if k > 0 {
					dst = append(dst, ',')
				}
				if dst, err = m[g][k].appendTo(dst); err != nil {
					return nil, err
				}
			}
			dst = append(dst, ']')
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `],"totalDiff":`...)
	dst = strconv.AppendInt(dst, l.TotalDiff, 10)
	dst = append(dst, `,"totalInflightDiff":`...)
	dst = strconv.AppendInt(dst, l.TotalInflightDiff, 10)
	return append(dst, '}'), nil
}

// Decode reads the body.
func (l *ConsumeStatsList) Decode(body []byte) error {
	j, err := FastjsonToJSON(body)
	if err != nil {
		return err
	}
	var raw struct {
		BrokerAddr        string                         `json:"brokerAddr"`
		ConsumeStatsList  []map[string][]json.RawMessage `json:"consumeStatsList"`
		TotalDiff         int64                          `json:"totalDiff"`
		TotalInflightDiff int64                          `json:"totalInflightDiff"`
	}
	if err := json.Unmarshal(j, &raw); err != nil {
		return fmt.Errorf("protocol: decode ConsumeStatsList: %w", err)
	}
	l.BrokerAddr, l.TotalDiff, l.TotalInflightDiff = raw.BrokerAddr, raw.TotalDiff, raw.TotalInflightDiff
	l.ConsumeStatsList = nil
	for _, m := range raw.ConsumeStatsList {
		out := make(map[string][]ConsumeStats, len(m))
		for g, list := range m {
			for _, r := range list {
				var s ConsumeStats
				if err := s.Decode(r); err != nil {
					return err
				}
				out[g] = append(out[g], s)
			}
		}
		l.ConsumeStatsList = append(l.ConsumeStatsList, out)
	}
	return nil
}

// ConsumeQueueData is one entry of QUERY_CONSUME_QUEUE's (321) body.
type ConsumeQueueData struct {
	BitMap         string `json:"bitMap,omitempty"`
	Eval           bool   `json:"eval"`
	ExtendDataJSON string `json:"extendDataJson,omitempty"`
	Msg            string `json:"msg,omitempty"`
	PhysicOffset   int64  `json:"physicOffset"`
	PhysicSize     int32  `json:"physicSize"`
	TagsCode       int64  `json:"tagsCode"`
}

// QueryConsumeQueueResponseBody is QUERY_CONSUME_QUEUE's (321) body.
type QueryConsumeQueueResponseBody struct {
	FilterData       string             `json:"filterData,omitempty"`
	MaxQueueIndex    int64              `json:"maxQueueIndex"`
	MinQueueIndex    int64              `json:"minQueueIndex"`
	QueueData        []ConsumeQueueData `json:"queueData"`
	SubscriptionData *SubscriptionData  `json:"subscriptionData,omitempty"`
}

// ProcessQueueInfo is a consumer's state of one queue in ConsumerRunningInfo.
type ProcessQueueInfo struct {
	CachedMsgCount          int32 `json:"cachedMsgCount"`
	CachedMsgMaxOffset      int64 `json:"cachedMsgMaxOffset"`
	CachedMsgMinOffset      int64 `json:"cachedMsgMinOffset"`
	CachedMsgSizeInMiB      int32 `json:"cachedMsgSizeInMiB"`
	CommitOffset            int64 `json:"commitOffset"`
	Droped                  bool  `json:"droped"` // Java's spelling
	LastConsumeTimestamp    int64 `json:"lastConsumeTimestamp"`
	LastLockTimestamp       int64 `json:"lastLockTimestamp"`
	LastPullTimestamp       int64 `json:"lastPullTimestamp"`
	Locked                  bool  `json:"locked"`
	TransactionMsgCount     int32 `json:"transactionMsgCount"`
	TransactionMsgMaxOffset int64 `json:"transactionMsgMaxOffset"`
	TransactionMsgMinOffset int64 `json:"transactionMsgMinOffset"`
	TryUnlockTimes          int64 `json:"tryUnlockTimes"`
}

// ConsumeStatus is a consumer's rates for one topic in ConsumerRunningInfo.
type ConsumeStatus struct {
	ConsumeFailedMsgs int64   `json:"consumeFailedMsgs"`
	ConsumeFailedTPS  float64 `json:"consumeFailedTPS"`
	ConsumeOKTPS      float64 `json:"consumeOKTPS"`
	ConsumeRT         float64 `json:"consumeRT"`
	PullRT            float64 `json:"pullRT"`
	PullTPS           float64 `json:"pullTPS"`
}

// ConsumerRunningInfo is GET_CONSUMER_RUNNING_INFO's (307) answer, written
// by the consumer: its properties, subscriptions, process queues and rates.
type ConsumerRunningInfo struct {
	Jstack          string
	MQTable         map[MessageQueue]ProcessQueueInfo
	Properties      map[string]string
	StatusTable     map[string]ConsumeStatus
	SubscriptionSet []SubscriptionData
}

// Properties of ConsumerRunningInfo (ConsumerRunningInfo.PROP_*).
const (
	PropConsumeType            = "PROP_CONSUME_TYPE"
	PropConsumeOrderly         = "PROP_CONSUMEORDERLY"
	PropNamesrvAddr            = "PROP_NAMESERVER_ADDR"
	PropThreadPoolCoreSize     = "PROP_THREADPOOL_CORE_SIZE"
	PropClientVersion          = "PROP_CLIENT_VERSION"
	PropConsumerStartTimestamp = "PROP_CONSUMER_START_TIMESTAMP"
)

// Encode writes the body as a Java client (fastjson) does.
func (r *ConsumerRunningInfo) Encode() ([]byte, error) {
	dst := append(make([]byte, 0, 512), `{"jstack":`...)
	dst = strconv.AppendQuote(dst, r.Jstack)
	dst = append(dst, `,"mqTable":`...)
	dst, err := appendQueueMap(dst, r.MQTable)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		key string
		v   any
	}{{"properties", nonNilMap(r.Properties)}, {"statusTable", nonNilMap(r.StatusTable)}, {"subscriptionSet", nonNil(r.SubscriptionSet)}} {
		b, err := json.Marshal(f.v)
		if err != nil {
			return nil, err
		}
		dst = append(dst, ',', '"')
		dst = append(dst, f.key...)
		dst = append(dst, '"', ':')
		dst = append(dst, b...)
	}
	return append(dst, '}'), nil
}

// Decode reads the body (a Java client's or the Go client's).
func (r *ConsumerRunningInfo) Decode(body []byte) error {
	var raw struct {
		Jstack          string                      `json:"jstack"`
		MQTable         map[string]ProcessQueueInfo `json:"mqTable"`
		Properties      map[string]string           `json:"properties"`
		StatusTable     map[string]ConsumeStatus    `json:"statusTable"`
		SubscriptionSet []SubscriptionData          `json:"subscriptionSet"`
	}
	if err := decodeFastjson(body, &raw); err != nil {
		return fmt.Errorf("protocol: decode ConsumerRunningInfo: %w", err)
	}
	m, err := decodeQueueMap(raw.MQTable)
	if err != nil {
		return err
	}
	*r = ConsumerRunningInfo{Jstack: raw.Jstack, MQTable: m, Properties: raw.Properties,
		StatusTable: raw.StatusTable, SubscriptionSet: raw.SubscriptionSet}
	return nil
}

func nonNilMap[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	return m
}

// ConsumeMessageDirectlyResult is CONSUME_MESSAGE_DIRECTLY's (309) answer.
// ConsumeResult is Java's CMResult: CR_SUCCESS, CR_LATER, CR_ROLLBACK,
// CR_COMMIT, CR_THROW_EXCEPTION, CR_RETURN_NULL.
type ConsumeMessageDirectlyResult struct {
	AutoCommit     bool   `json:"autoCommit"`
	ConsumeResult  string `json:"consumeResult"`
	Order          bool   `json:"order"`
	Remark         string `json:"remark"`
	SpentTimeMills int64  `json:"spentTimeMills"`
}

// appendJavaDouble appends v as Java's Double.toString prints an ordinary
// rate (always with a fraction: 0.0, 12.5).
func appendJavaDouble(dst []byte, v float64) []byte {
	n := len(dst)
	dst = strconv.AppendFloat(dst, v, 'f', -1, 64)
	if bytes.IndexByte(dst[n:], '.') < 0 {
		dst = append(dst, ".0"...)
	}
	return dst
}

// JavaDouble is v as Java's String.valueOf(double) prints an ordinary rate
// or ratio (GET_BROKER_RUNTIME_INFO's values).
func JavaDouble(v float64) string { return string(appendJavaDouble(nil, v)) }
