package core

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/apogeemq/apogee/protocol"
)

// Lite topics' names and configuration (RocketMQ 5.5, RIP-83;
// docs/lite-topics.md): the lite topic name's rule, the parent topic's
// lite.topic.expiration attribute and the lite group's lite.* attributes.

// MaxLiteTopicSize is the longest lite topic name, in bytes (RocketMQ's
// ProxyConfig.maxLiteTopicSize; what the settings tell the SDKs).
const MaxLiteTopicSize = 64

// attrLiteTopicExpiration is the parent topic's time-to-live of an idle
// lite topic, in minutes (TopicAttributes.LITE_EXPIRATION_ATTRIBUTE: a
// LongRangeAttribute of -1 … 30 days, default -1, ≤ 0 never).
const attrLiteTopicExpiration = "lite.topic.expiration"

// maxLiteTopicExpiration is 30 days in minutes.
const maxLiteTopicExpiration = 30 * 24 * 60

// checkLiteTopicExpiration validates a lite.topic.expiration value.
func checkLiteTopicExpiration(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < -1 || n > maxLiteTopicExpiration {
		return fmt.Errorf("lite.topic.expiration %q: want minutes from -1 (never) to %d", v, maxLiteTopicExpiration)
	}
	return nil
}

// liteExpiration returns a topic's lite.topic.expiration in minutes (≤ 0:
// lite topics never expire).
func liteExpiration(cfg protocol.TopicConfig) int64 {
	v, ok := cfg.Attributes[attrLiteTopicExpiration]
	if !ok {
		v, ok = cfg.Attributes["+"+attrLiteTopicExpiration]
	}
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// CheckLiteTopic refuses a lite topic name RocketMQ's proxy refuses
// (ReasonLiteTopicIllegal, ILLEGAL_LITE_TOPIC): blank, longer than
// MaxLiteTopicSize bytes, or a character outside ^[a-zA-Z0-9_-]+$
// (GrpcValidator.validateLiteTopic; '$', LiteUtil's separator, is outside).
func CheckLiteTopic(name string) error {
	if strings.TrimSpace(name) == "" {
		return newError(ReasonLiteTopicIllegal, "lite topic cannot be the char sequence of whitespace")
	}
	if len(name) > MaxLiteTopicSize {
		return newError(ReasonLiteTopicIllegal, "lite topic exceed the max size "+strconv.Itoa(MaxLiteTopicSize))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return newError(ReasonLiteTopicIllegal, "lite topic can only contain alphanumeric characters, hyphens(-), and underscores(_)")
		}
	}
	return nil
}

// Group attribute keys of lite groups.
const (
	attrLiteBindTopic        = "lite.bind.topic"
	attrLiteSubModel         = "lite.sub.model"
	attrLiteClientQuota      = "lite.sub.client.quota"
	attrLiteMaxEvents        = "lite.sub.client.max.event.cnt"
	attrLiteResetExclusive   = "lite.sub.reset.offset.exclusive"
	attrLiteResetUnsubscribe = "lite.sub.reset.offset.unsubscribe"
)

// LiteBindTopic returns a group's lite.bind.topic: the parent topic of a
// lite group, "" for a regular group.
func LiteBindTopic(cfg protocol.SubscriptionGroupConfig) string {
	return cfg.Attributes[attrLiteBindTopic]
}

// LiteClientQuota returns a lite group's lite.sub.client.quota (RocketMQ's
// default 2000), what the settings tell a lite consumer.
func LiteClientQuota(cfg protocol.SubscriptionGroupConfig) int32 {
	if n, err := strconv.ParseInt(cfg.Attributes[attrLiteClientQuota], 10, 32); err == nil {
		return int32(n)
	}
	return 2000
}
