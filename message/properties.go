package message

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// Property separators: a properties string is "key\x01value\x02" repeated,
// with a trailing 0x02 (both the Java and the Go client write it).
const (
	NameValueSeparator byte = 0x01
	PropertySeparator  byte = 0x02
)

// MaxPropertiesSize is the largest properties string a record can carry
// (PROPLEN is an int16).
const MaxPropertiesSize = 32767

// Property keys. The values are RocketMQ's, shared by the Java broker and the
// Java and Go clients.
const (
	PropUniqKey                    = "UNIQ_KEY"                       // producer's unique id (see UniqIDGenerator)
	PropKeys                       = "KEYS"                           // business keys separated by PropKeysSeparator; each is indexed
	PropTags                       = "TAGS"                           // the tag; its Java hash is the consume-queue tag code
	PropWait                       = "WAIT"                           // "false": do not wait for flush/replication; absent means true
	PropDelay                      = "DELAY"                          // delay level 1..18
	PropRetryTopic                 = "RETRY_TOPIC"                    // original topic of a retried message
	PropRealTopic                  = "REAL_TOPIC"                     // original topic of a delayed or half message
	PropRealQueueID                = "REAL_QID"                       // original queue id of a delayed or half message
	PropTranMsg                    = "TRAN_MSG"                       // "true" on transaction half messages
	PropProducerGroup              = "PGROUP"                         // producer group (transaction check routing)
	PropTransactionID              = "__transactionId__"              // transaction id
	PropMinOffset                  = "MIN_OFFSET"                     // set client-side from the pull response
	PropMaxOffset                  = "MAX_OFFSET"                     // set client-side from the pull response
	PropCluster                    = "CLUSTER"                        // broker cluster name, added by the broker
	PropOriginMessageID            = "ORIGIN_MESSAGE_ID"              // original msgId of a retried message
	PropReconsumeTime              = "RECONSUME_TIME"                 // retry bookkeeping
	PropMaxReconsumeTimes          = "MAX_RECONSUME_TIMES"            // retry bookkeeping
	PropConsumeStartTime           = "CONSUME_START_TIME"             // client-side
	PropTranPreparedQueueOffset    = "TRAN_PREPARED_QUEUE_OFFSET"     // transaction check bookkeeping
	PropTransactionCheckTimes      = "TRANSACTION_CHECK_TIMES"        // transaction check bookkeeping
	PropCheckImmunityTimeInSeconds = "CHECK_IMMUNITY_TIME_IN_SECONDS" // transaction check bookkeeping
	PropMsgRegion                  = "MSG_REGION"                     // region
	PropTraceOn                    = "TRACE_ON"                       // trace switch
	PropTimerDeliverMS             = "TIMER_DELIVER_MS"               // 5.x timer wheel: absolute delivery time
	PropTimerDelayMS               = "TIMER_DELAY_MS"                 // 5.x timer wheel: relative delay in ms
	PropTimerDelaySec              = "TIMER_DELAY_SEC"                // 5.x timer wheel: relative delay in s
	PropShardingKey                = "SHARDING_KEY"                   // the Go client's sharding key
	PropJavaShardingKey            = "__SHARDINGKEY"                  // the Java client's sharding key
	PropPriority                   = "_SYS_MSG_PRIORITY_"             // 5.4 priority messages (RIP-80): 0 and up, higher first
	PropCorrelationID              = "CORRELATION_ID"                 // request/reply
	PropReplyToClient              = "REPLY_TO_CLIENT"                // request/reply
	PropTTL                        = "TTL"                            // request/reply
	PropMsgType                    = "MSG_TYPE"                       // request/reply ("reply")
	PropArriveTime                 = "ARRIVE_TIME"                    // request/reply
	PropPushReplyTime              = "PUSH_REPLY_TIME"                // request/reply: when the broker pushed the reply (ms)
	PropBuyerID                    = "BUYER_ID"                       // legacy
	PropTransferFlag               = "TRANSFER_FLAG"                  // legacy
	PropCorrectionFlag             = "CORRECTION_FLAG"                // legacy
	PropMQ2Flag                    = "MQ2_FLAG"                       // legacy
	PropCRC32                      = "__CRC32#"                       // 5.x optional properties CRC (10 decimal digits)
	PropInnerMultiDispatch         = "INNER_MULTI_DISPATCH"           // RocketMQ's LMQ names of a multi-dispatched record, comma separated (lite topics: %LMQ%$<parent>$<lite>)
	PropInnerMultiQueueOffset      = "INNER_MULTI_QUEUE_OFFSET"       // RocketMQ's offsets in those LMQs, comma separated
)

// PropertyLiteTopic names a message's lite topic (RocketMQ 5.5, RIP-83;
// MessageConst.PROPERTY_LITE_TOPIC): the record's topic is the parent, a
// topic of type LITE, and the store's dispatcher also indexes the record
// under (parent, value) in its lite queue.
const PropertyLiteTopic = "__LITE_TOPIC"

// PropKeysSeparator separates the business keys inside the KEYS property.
const PropKeysSeparator = " "

// AppendProperty appends "key\x01value\x02" to dst. It does not validate;
// use EncodeProperties or ValidateProperties where the input is untrusted.
// Appending to a properties string that lacks its trailing 0x02 glues the
// new pair onto the last value: add the separator first.
func AppendProperty(dst []byte, key, value string) []byte {
	dst = append(dst, key...)
	dst = append(dst, NameValueSeparator)
	dst = append(dst, value...)
	return append(dst, PropertySeparator)
}

// ForEachProperty calls fn for each pair of props, in order, until fn returns
// false. It is tolerant the way the Go client is: the string is split on 0x02,
// and an item is a pair only if it holds exactly one 0x01; other items are
// skipped. The key and value alias props. Duplicated keys are all reported.
func ForEachProperty(props []byte, fn func(key, value []byte) bool) {
	for len(props) > 0 {
		var item []byte
		item, props = nextItem(props)
		k, v, ok := splitPair(item)
		if ok && !fn(k, v) {
			return
		}
	}
}

// nextItem splits the first 0x02-separated item off props.
func nextItem(props []byte) (item, rest []byte) {
	if i := bytes.IndexByte(props, PropertySeparator); i >= 0 {
		return props[:i], props[i+1:]
	}
	return props, nil
}

// hasName reports whether item starts with name and the 0x01 after it.
func hasName(item []byte, name string) bool {
	return len(item) > len(name) && item[len(name)] == NameValueSeparator && string(item[:len(name)]) == name
}

// splitPair splits one item at its single 0x01.
func splitPair(item []byte) (key, value []byte, ok bool) {
	i := bytes.IndexByte(item, NameValueSeparator)
	if i < 0 || bytes.IndexByte(item[i+1:], NameValueSeparator) >= 0 {
		return nil, nil, false
	}
	return item[:i], item[i+1:], true
}

// LookupProperty returns the value of key in props, with the parsing rules of
// ForEachProperty. When a key appears more than once the last value wins, as
// it does for both clients (they parse into a map). An empty value is found
// (the Go client keeps it; Java readers drop the pair). The value aliases
// props. It does not allocate.
func LookupProperty(props []byte, key string) ([]byte, bool) {
	var (
		val   []byte
		found bool
	)
	for len(props) > 0 {
		var item []byte
		item, props = nextItem(props)
		if !hasName(item, key) { // cheap prefix test before the full split
			continue
		}
		if k, v, ok := splitPair(item); ok && len(k) == len(key) {
			val, found = v, true
		}
	}
	return val, found
}

// DispatchProperties returns the record's TAGS, KEYS and UNIQ_KEY properties
// (see LookupDispatchProperties): what the store's dispatcher reads for every
// record.
func (v View) DispatchProperties() (tags, keys, uniqKey []byte) {
	return LookupDispatchProperties(v.Properties())
}

// LookupDispatchProperties returns the TAGS, KEYS and UNIQ_KEY values of props
// (each nil when absent) in one pass, with LookupProperty's rules.
func LookupDispatchProperties(props []byte) (tags, keys, uniqKey []byte) {
	tags, keys, uniqKey, _ = LookupDispatchPropertiesLite(props)
	return tags, keys, uniqKey
}

// DispatchPropertiesLite is DispatchProperties plus the record's lite topic
// (PropertyLiteTopic), found in the same pass.
func (v View) DispatchPropertiesLite() (tags, keys, uniqKey, lite []byte) {
	return LookupDispatchPropertiesLite(v.Properties())
}

// LookupDispatchPropertiesLite returns the TAGS, KEYS, UNIQ_KEY and
// __LITE_TOPIC values of props (each nil when absent) in one pass, with
// LookupProperty's rules: what the store's dispatcher reads for every record.
func LookupDispatchPropertiesLite(props []byte) (tags, keys, uniqKey, lite []byte) {
	for len(props) > 0 {
		var item []byte
		item, props = nextItem(props)
		var dst *[]byte
		var name string
		switch {
		case hasName(item, PropTags):
			dst, name = &tags, PropTags
		case hasName(item, PropKeys):
			dst, name = &keys, PropKeys
		case hasName(item, PropUniqKey):
			dst, name = &uniqKey, PropUniqKey
		case hasName(item, PropertyLiteTopic):
			dst, name = &lite, PropertyLiteTopic
		default:
			continue
		}
		// The item's first 0x01 ends the name (hasName); splitPair's rule,
		// exactly one 0x01, leaves the value to check for another.
		if val := item[len(name)+1:]; bytes.IndexByte(val, NameValueSeparator) < 0 {
			*dst = val
		}
	}
	return tags, keys, uniqKey, lite
}

// ParseProperties parses props into a new map (last duplicate wins). Keys and
// values are substrings of one copy of props: one allocation for the strings
// instead of two per pair (a consumer decodes every message it receives this
// way).
func ParseProperties(props []byte) map[string]string {
	return ParsePropertiesString(string(props))
}

// ParsePropertiesString is ParseProperties over props already in a string,
// whose substrings the keys and values are: a caller that copies the
// properties into a string together with other strings it needs makes one
// allocation for all of them.
func ParsePropertiesString(props string) map[string]string {
	m := make(map[string]string)
	for len(props) > 0 {
		item := props
		if i := strings.IndexByte(props, PropertySeparator); i >= 0 {
			item, props = props[:i], props[i+1:]
		} else {
			props = ""
		}
		// One 0x01 exactly, as splitPair requires.
		i := strings.IndexByte(item, NameValueSeparator)
		if i < 0 || strings.IndexByte(item[i+1:], NameValueSeparator) >= 0 {
			continue
		}
		m[item[:i]] = item[i+1:]
	}
	return m
}

// EncodeProperties encodes m with its keys sorted, so the result is
// deterministic. It returns ErrBadProperty if a key is empty or a key or value
// contains 0x01 or 0x02, and ErrPropertiesTooLarge if the result exceeds
// MaxPropertiesSize. An empty or nil map encodes as nil.
func EncodeProperties(m map[string]string) ([]byte, error) {
	if len(m) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(m))
	n := 0
	for k, v := range m {
		if k == "" || strings.ContainsAny(k, "\x01\x02") {
			return nil, fmt.Errorf("message: property key %q: %w", k, ErrBadProperty)
		}
		if strings.ContainsAny(v, "\x01\x02") {
			return nil, fmt.Errorf("message: property %q value: %w", k, ErrBadProperty)
		}
		keys = append(keys, k)
		n += len(k) + len(v) + 2
	}
	if n > MaxPropertiesSize {
		return nil, fmt.Errorf("message: %d bytes of properties > %d: %w", n, MaxPropertiesSize, ErrPropertiesTooLarge)
	}
	slices.Sort(keys)
	out := make([]byte, 0, n)
	for _, k := range keys {
		out = AppendProperty(out, k, m[k])
	}
	return out, nil
}

// ValidateProperties checks a properties string received from a producer:
// at most MaxPropertiesSize bytes, and every item between 0x02 separators is
// a non-empty key, exactly one 0x01, and a value (possibly empty) free of
// separators. Empty items (two 0x02 in a row, or a leading 0x02) are
// rejected. A missing trailing 0x02 after the last pair is accepted, since
// every reader tolerates it; a writer that appends pairs must add it first.
// It does not allocate on success.
func ValidateProperties(props []byte) error {
	if len(props) > MaxPropertiesSize {
		return fmt.Errorf("message: %d bytes of properties > %d: %w", len(props), MaxPropertiesSize, ErrPropertiesTooLarge)
	}
	pos := 0
	for pos < len(props) {
		end := len(props)
		if i := bytes.IndexByte(props[pos:], PropertySeparator); i >= 0 {
			end = pos + i
		}
		k, _, ok := splitPair(props[pos:end])
		if !ok || len(k) == 0 {
			return fmt.Errorf("message: properties item at byte %d: %w", pos, ErrBadProperty)
		}
		pos = end + 1
	}
	return nil
}
