package core

import (
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
)

// Group attributes (RocketMQ 5's SubscriptionGroupConfig.attributes):
// string pairs kept in the group's configuration, hence in
// subscriptionGroup.json, the configuration log and what slaves follow.
// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP carries changes, as RocketMQ's
// AttributeParser writes them from mqadmin's --attributes "+k=v,-k":
// "+key" → value adds or replaces, "-key" → "" removes; a new group takes
// "+" keys only, a "-" key must exist, and a request without attributes
// keeps the group's (RocketMQ's AttributeUtil.alterCurrentAttributes). The
// keys are RocketMQ's group attributes (SubscriptionGroupAttributes), each
// value checked; Apogee stores them (lite.* for the lite topics of
// docs/lite-topics.md, priority.factor, which docs/features.md describes).

// groupAttributes are the supported keys and their value checks.
var groupAttributes = map[string]func(string) error{
	"lite.bind.topic": func(v string) error {
		if v == "" || !validTopicName(v) {
			return fmt.Errorf("want a topic name")
		}
		return nil
	},
	"lite.sub.model": func(v string) error {
		if v != "Shared" && v != "Exclusive" {
			return fmt.Errorf("want Shared or Exclusive")
		}
		return nil
	},
	"lite.sub.client.quota":             intAttr(1, 1<<31-1),
	"lite.sub.client.max.event.cnt":     intAttr(10, 1<<31-1),
	"lite.sub.reset.offset.exclusive":   boolAttr,
	"lite.sub.reset.offset.unsubscribe": boolAttr,
	"priority.factor":                   intAttr(0, 100),
}

func intAttr(lo, hi int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("want a whole number from %d to %d", lo, hi)
		}
		return nil
	}
}

func boolAttr(v string) error {
	if v != "true" && v != "false" {
		return fmt.Errorf("want true or false")
	}
	return nil
}

// validTopicName reports whether s is a topic name a client may use.
func validTopicName(s string) bool {
	if len(s) > 127 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '%' || c == '|') {
			return false
		}
	}
	return true
}

// alterGroupAttributes applies the changes to cur (create: the group is
// new) and returns the group's attributes (nil when none).
func alterGroupAttributes(create bool, cur, changes map[string]string) (map[string]string, error) {
	if len(changes) == 0 {
		return maps.Clone(cur), nil
	}
	out := maps.Clone(cur)
	if out == nil {
		out = map[string]string{}
	}
	keys := make([]string, 0, len(changes))
	for k := range changes {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first error is the same every time
	seen := map[string]bool{}
	for _, k := range keys {
		v := changes[k]
		if k == "" || (k[0] != '+' && k[0] != '-') {
			return nil, fmt.Errorf("group attribute %q: want +key (add or change) or -key (remove)", k)
		}
		real := strings.TrimSpace(k[1:])
		check, ok := groupAttributes[real]
		if !ok {
			return nil, fmt.Errorf("unsupported group attribute %q: the group attributes are %s", real, supportedGroupAttributes())
		}
		if seen[real] {
			return nil, fmt.Errorf("group attribute %q given twice", real)
		}
		seen[real] = true
		if k[0] == '-' {
			if create {
				return nil, fmt.Errorf("group attribute -%s: a new group takes +key=value only", real)
			}
			if _, ok := out[real]; !ok {
				return nil, fmt.Errorf("group attribute -%s: the group has no such attribute to remove", real)
			}
			delete(out, real)
			continue
		}
		if err := check(v); err != nil {
			return nil, fmt.Errorf("group attribute %s=%q: %w", real, v, err)
		}
		out[real] = v
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func supportedGroupAttributes() string {
	keys := make([]string, 0, len(groupAttributes))
	for k := range groupAttributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}
