package message

import (
	"bytes"
	"fmt"
	"math/bits"

	"github.com/apogeemq/apogee/internal/javacompat"
)

// SendProp names one of the properties a broker's send path reads
// (SendProps).
type SendProp uint8

// The properties SendProps records, each the value of the Prop constant of
// the same name.
const (
	SendUniqKey         SendProp = iota // UNIQ_KEY: the answer's transaction id, a half message's
	SendWait                            // WAIT: "false" answers before the flush
	SendTranMsg                         // TRAN_MSG: "true" on a transaction's half message
	SendDelay                           // DELAY: delay level
	SendTimerDeliverMS                  // TIMER_DELIVER_MS
	SendTimerDelaySec                   // TIMER_DELAY_SEC
	SendTimerDelayMS                    // TIMER_DELAY_MS
	SendJavaShardingKey                 // __SHARDINGKEY: a FIFO message (Java client)
	SendPriority                        // _SYS_MSG_PRIORITY_
	SendTransactionID                   // __transactionId__
	SendProducerGroup                   // PGROUP
	SendLiteTopic                       // __LITE_TOPIC: a LITE message (RocketMQ 5.5)
	numSendProps
)

// sendPropMask has the bits of every SendProp.
const sendPropMask = 1<<numSendProps - 1

// SendProps is what a broker's send path reads of a message's properties,
// found in one pass over them (Parse) so that every later step (routing,
// the transaction and timer features, the answer) reads a field instead of
// scanning the string again. The values alias the parsed properties, which
// stay what the store keeps: SendProps copies nothing and allocates
// nothing. The rules are LookupProperty's: the last of duplicated keys
// wins, an empty value is present.
//
// The zero value holds no property. A SendProps is not safe for concurrent
// use; the send that parsed it owns it, and must not keep it beyond the
// life of the properties it aliases.
type SendProps struct {
	// vals[k] is nil unless bit k of present is set, so that Reset clears
	// only the values found (a send finds two or three of twelve).
	vals    [numSendProps][]byte
	present uint16 // bit k: vals[k] was found
}

// Parse validates props as ValidateProperties does (same errors: a
// producer's properties are untrusted) and records the SendProp values they
// hold, in one pass. p is reset first; on an error it holds nothing.
func (p *SendProps) Parse(props []byte) error {
	p.Reset()
	if len(props) > MaxPropertiesSize {
		return fmt.Errorf("message: %d bytes of properties > %d: %w", len(props), MaxPropertiesSize, ErrPropertiesTooLarge)
	}
	pos := 0
	for pos < len(props) {
		item := props[pos:]
		next := len(props)
		if i := bytes.IndexByte(item, PropertySeparator); i >= 0 {
			item, next = item[:i], pos+i+1
		}
		k, v, ok := splitPair(item)
		if !ok || len(k) == 0 {
			p.Reset()
			return fmt.Errorf("message: properties item at byte %d: %w", pos, ErrBadProperty)
		}
		if sp, ok := sendPropOf(k); ok {
			p.vals[sp] = v
			p.present |= 1 << sp
		}
		pos = next
	}
	return nil
}

// Scan records the SendProp values of props without validating them, with
// LookupProperty's rules (items that are not pairs are skipped): for
// properties already stored, which the send path validated. p is reset
// first.
func (p *SendProps) Scan(props []byte) {
	p.Reset()
	for len(props) > 0 {
		var item []byte
		item, props = nextItem(props)
		if k, v, ok := splitPair(item); ok {
			if sp, ok := sendPropOf(k); ok {
				p.vals[sp] = v
				p.present |= 1 << sp
			}
		}
	}
}

// sendPropOf returns the SendProp a key names (a switch on the string: no
// allocation, a comparison by length first).
func sendPropOf(k []byte) (SendProp, bool) {
	switch string(k) {
	case PropUniqKey:
		return SendUniqKey, true
	case PropWait:
		return SendWait, true
	case PropTranMsg:
		return SendTranMsg, true
	case PropDelay:
		return SendDelay, true
	case PropTimerDeliverMS:
		return SendTimerDeliverMS, true
	case PropTimerDelaySec:
		return SendTimerDelaySec, true
	case PropTimerDelayMS:
		return SendTimerDelayMS, true
	case PropJavaShardingKey:
		return SendJavaShardingKey, true
	case PropPriority:
		return SendPriority, true
	case PropTransactionID:
		return SendTransactionID, true
	case PropProducerGroup:
		return SendProducerGroup, true
	case PropertyLiteTopic:
		return SendLiteTopic, true
	}
	return 0, false
}

// Reset empties p (dropping its references to the parsed properties).
func (p *SendProps) Reset() {
	for m := p.present; m != 0; m &= m - 1 {
		p.vals[bits.TrailingZeros16(m)] = nil
	}
	p.present = 0
}

// Get returns the value of k and whether the properties held it.
func (p *SendProps) Get(k SendProp) ([]byte, bool) {
	if p.present&(1<<k) == 0 {
		return nil, false
	}
	return p.vals[k], true
}

// Has reports whether the properties held k, whatever its value.
func (p *SendProps) Has(k SendProp) bool { return p.present&(1<<k) != 0 }

// HasAny reports whether the properties held any of the SendProps whose
// bits set holds (SendPropSet).
func (p *SendProps) HasAny(set uint16) bool { return p.present&set&sendPropMask != 0 }

// SendPropSet is the set of SendProps ks, for HasAny.
func SendPropSet(ks ...SendProp) uint16 {
	var s uint16
	for _, k := range ks {
		s |= 1 << k
	}
	return s
}

// Is reports whether k is present with exactly the value v ("true",
// "false").
func (p *SendProps) Is(k SendProp, v string) bool {
	return p.present&(1<<k) != 0 && string(p.vals[k]) == v
}

// Int reads k as Java's Long.parseLong does: present is false when it is
// absent, ok false when it is not a number.
func (p *SendProps) Int(k SendProp) (v int64, present, ok bool) {
	if p.present&(1<<k) == 0 {
		return 0, false, false
	}
	v, ok = javacompat.ParseInt64(p.vals[k])
	return v, true, ok
}
