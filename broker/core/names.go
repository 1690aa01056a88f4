package core

import (
	"strconv"
	"strings"
	"unicode"

	"github.com/apogeemq/apogee/protocol"
)

// The naming and message rules, written once. The core applies them to what
// it is asked (a send's topic, topic administration, the groups it creates
// on first use); a front end calls the exported ones for what its protocol
// names before it calls the core (RocketMQ 5's gRPC front end checks every
// topic, group, tag, key, message group and message type of a request, as
// RocketMQ's proxy does). Each refuses with an *Error of its reason; none
// allocates unless it refuses.
//
// The rules are RocketMQ's: TopicValidator (topic names: ^[%|a-zA-Z0-9_-]+$,
// at most 127 characters; the system topics), the client's Validators
// (group names: the same characters, at most 255) and the proxy's
// validation of a 5.x message (a tag, key or message group is not
// whitespace alone and has no control character, U+0000–U+001F or
// U+007F–U+009F; a tag has no '|'; a message group is shorter than 64
// bytes; a system topic and a CID_RMQ_SYS_ group are not a client's).

// Limits of names.
const (
	// maxGroupLength bounds group names (RocketMQ's clients allow 255).
	maxGroupLength = 255
	// MaxMessageGroupSize is the size, in bytes, a message group must stay
	// under (RocketMQ 5's proxy's maxMessageGroupSize).
	MaxMessageGroupSize = 64
	// sysGroupPrefix starts the broker's own group names (MixAll's
	// CID_RMQ_SYS_PREFIX).
	sysGroupPrefix = "CID_RMQ_SYS_"
)

// nameChar reports whether c may appear in a topic or group name.
func nameChar(c byte) bool { return nameChars[c] }

// nameChars holds the bytes ^[%|a-zA-Z0-9_-]$ allows: a send checks its
// topic's name one table load per byte.
var nameChars = func() (t [256]bool) {
	for c := range t {
		b := byte(c)
		t[c] = b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '%' || b == '|' || b == '_' || b == '-'
	}
	return t
}()

// checkTopicName validates a topic name as RocketMQ's TopicValidator does
// (blank, then ^[%|a-zA-Z0-9_-]+$, then at most 127 characters) and returns
// the Java broker's remark for a bad one.
func checkTopicName[T string | []byte](t T) (remark string, ok bool) {
	if len(t) == 0 {
		return "The specified topic is blank.", false
	}
	for i := 0; i < len(t); i++ {
		if !nameChar(t[i]) {
			return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$", false
		}
	}
	if len(t) > maxTopicLength {
		return "The specified topic is longer than topic max length.", false
	}
	return "", true
}

// CheckTopicName refuses a topic name RocketMQ does not allow
// (ReasonTopicIllegal): blank, a character outside ^[%|a-zA-Z0-9_-]+$, or
// longer than 127 characters.
func CheckTopicName(name string) error {
	if remark, ok := checkTopicName(name); !ok {
		return newError(ReasonTopicIllegal, remark)
	}
	return nil
}

// CheckClientTopic refuses a topic a client may not name directly:
// CheckTopicName's, and a system topic (ReasonTopicReserved: TBW102,
// SCHEDULE_TOPIC_XXXX, the transaction and trace topics, rmq_sys_*, ...).
// Retry and dead-letter topics (%RETRY%, %DLQ%) are a client's.
func CheckClientTopic(name string) error {
	if err := CheckTopicName(name); err != nil {
		return err
	}
	if isSystemTopic(name) {
		return newError(ReasonTopicReserved, "the topic["+name+"] is a system topic, which clients cannot use")
	}
	return nil
}

// groupNameRemark returns why a group name is not one RocketMQ's clients
// accept (blank, longer than 255 characters, a character outside
// ^[%|a-zA-Z0-9_-]+$), "" for a good one.
func groupNameRemark[T string | []byte](g T) string {
	if len(g) == 0 {
		return "the specified group is blank"
	}
	if len(g) > maxGroupLength {
		return "the specified group is longer than group max length " + strconv.Itoa(maxGroupLength)
	}
	for i := 0; i < len(g); i++ {
		if !nameChar(g[i]) {
			return "the specified group[" + string(g) + "] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
		}
	}
	return ""
}

// validGroupName reports whether a group name is one RocketMQ's clients
// accept; only such groups are created on first use.
func validGroupName[T string | []byte](g T) bool {
	if len(g) == 0 || len(g) > maxGroupLength {
		return false
	}
	for i := 0; i < len(g); i++ {
		if !nameChar(g[i]) {
			return false
		}
	}
	return true
}

// CheckGroupName refuses a group name RocketMQ's clients do not accept
// (ReasonGroupIllegal): blank, longer than 255 characters, or a character
// outside ^[%|a-zA-Z0-9_-]+$.
func CheckGroupName(name string) error {
	if remark := groupNameRemark(name); remark != "" {
		return newError(ReasonGroupIllegal, remark)
	}
	return nil
}

// CheckClientGroup refuses a group a client may not name directly:
// CheckGroupName's, and one of the broker's own (ReasonGroupReserved: the
// CID_RMQ_SYS_ prefix).
func CheckClientGroup(name string) error {
	if err := CheckGroupName(name); err != nil {
		return err
	}
	if strings.HasPrefix(name, sysGroupPrefix) {
		return newError(ReasonGroupReserved, "the group["+name+"] is one of the broker's own, which clients cannot use")
	}
	return nil
}

// blank reports whether s is not empty and holds white space alone.
func blank(s string) bool {
	return s != "" && strings.TrimFunc(s, unicode.IsSpace) == ""
}

// hasControl reports whether s holds a control character (U+0000–U+001F,
// U+007F–U+009F; the record's property separators 1 and 2 among them).
func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

// CheckTag refuses a message tag (ReasonTagIllegal) that is white space
// alone, contains '|' (the subscription expressions' separator) or a
// control character. The empty tag is no tag.
func CheckTag(tag string) error {
	switch {
	case blank(tag):
		return newError(ReasonTagIllegal, "the tag "+strconv.Quote(tag)+" is white space alone")
	case strings.IndexByte(tag, '|') >= 0:
		return newError(ReasonTagIllegal, "the tag "+strconv.Quote(tag)+" contains '|'")
	case hasControl(tag):
		return newError(ReasonTagIllegal, "the tag "+strconv.Quote(tag)+" contains a control character")
	}
	return nil
}

// CheckKey refuses a message key (ReasonKeyIllegal) that is white space
// alone or contains a control character. The empty key is no key.
func CheckKey(key string) error {
	switch {
	case blank(key):
		return newError(ReasonKeyIllegal, "the key "+strconv.Quote(key)+" is white space alone")
	case hasControl(key):
		return newError(ReasonKeyIllegal, "the key "+strconv.Quote(key)+" contains a control character")
	}
	return nil
}

// CheckMessageGroup refuses a message group (ReasonMessageGroupIllegal)
// that is white space alone, MaxMessageGroupSize bytes or longer, or
// contains a control character. The empty group is no group.
func CheckMessageGroup(group string) error {
	switch {
	case blank(group):
		return newError(ReasonMessageGroupIllegal, "the message group "+strconv.Quote(group)+" is white space alone")
	case len(group) >= MaxMessageGroupSize:
		return newError(ReasonMessageGroupIllegal, "the message group is "+strconv.Itoa(len(group))+
			" bytes, at least the limit of "+strconv.Itoa(MaxMessageGroupSize))
	case hasControl(group):
		return newError(ReasonMessageGroupIllegal, "the message group "+strconv.Quote(group)+" contains a control character")
	}
	return nil
}

// MessageType is RocketMQ 5's message type (TopicMessageType): what a
// send's properties make of a message, what a topic's message.type
// attribute allows, and what a 5.x client declares.
type MessageType uint8

// The message types.
const (
	MessageNormal MessageType = iota
	MessageFIFO
	MessageDelay
	MessageTransaction
	// MessagePriority (RocketMQ 5.4, RIP-80): a message with a priority
	// (message.PropPriority), stored in the queue of that priority; a
	// PRIORITY topic's pops take the higher queues first (priority.go).
	MessagePriority
	// MessageLite (RocketMQ 5.5, RIP-83): a message with a lite topic
	// (message.PropLiteTopic) under a parent topic of message.type=LITE
	// (lite.go).
	MessageLite
)

// msgType is the message type's name in the topic table (topics.go).
type msgType = MessageType

var msgTypeNames = [...]string{"NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE"}

// String returns the type's name as RocketMQ spells it.
func (t MessageType) String() string {
	if int(t) < len(msgTypeNames) {
		return msgTypeNames[t]
	}
	return "MessageType(" + strconv.Itoa(int(t)) + ")"
}

// InferMessageType returns the type of a message whose sender declared
// none: FIFO with a message group, DELAY with a delivery time, NORMAL
// otherwise (a transactional message is always declared).
func InferMessageType(hasGroup, hasDelivery bool) MessageType {
	switch {
	case hasGroup:
		return MessageFIFO
	case hasDelivery:
		return MessageDelay
	}
	return MessageNormal
}

// CheckMessageType refuses a message whose declared type contradicts what
// it carries (ReasonMessageTypeConflict): a FIFO message has a message
// group, a DELAY message a delivery time, and neither has the other; a
// NORMAL or TRANSACTION message has neither. Whether the topic accepts the
// type is the send's check (ReasonTopicMessageTypeMismatch).
func CheckMessageType(t MessageType, hasGroup, hasDelivery bool) error {
	var what string
	switch t {
	case MessageNormal, MessageTransaction, MessagePriority, MessageLite:
		if hasGroup || hasDelivery {
			what = "has a message group or a delivery time"
		}
	case MessageFIFO:
		switch {
		case !hasGroup:
			what = "has no message group"
		case hasDelivery:
			what = "has a delivery time"
		}
	case MessageDelay:
		switch {
		case !hasDelivery:
			what = "has no delivery time"
		case hasGroup:
			what = "has a message group"
		}
	default:
		what = "is of no known type"
	}
	if what != "" {
		return newError(ReasonMessageTypeConflict, "a "+t.String()+" message "+what)
	}
	return nil
}

// AcceptedMessageTypes returns the message types a topic of this
// configuration accepts (a route's accept_message_types), by RocketMQ 5's
// rule: without a message.type attribute a topic is NORMAL (RocketMQ's
// TopicConfig.getTopicMessageType), MIXED accepts every type, any other
// type its own alone (so a FIFO topic refuses a NORMAL message). A send
// that asks for the check (SendRequest.CheckTopicType) is refused with
// ReasonTopicMessageTypeMismatch for a type outside this list.
func AcceptedMessageTypes(cfg protocol.TopicConfig) []MessageType {
	e := newTopicEntry(cfg)
	var out []MessageType
	for t := MessageNormal; t <= MessageLite; t++ {
		// A MIXED topic's route lists the four types before PRIORITY and
		// LITE, as RocketMQ's RouteActivity does.
		if e.accepts(t) && !(e.mixed && t >= MessagePriority) {
			out = append(out, t)
		}
	}
	return out
}
