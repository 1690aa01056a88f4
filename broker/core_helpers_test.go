package broker

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
)

// What the end-to-end tests look at in the broker's state, through the
// core's API.

// lookupTopic returns a topic's configuration, nil if there is none.
func lookupTopic(b *Broker, name string) *protocol.TopicConfig {
	cfg, ok := b.core.TopicConfig(name)
	if !ok {
		return nil
	}
	return &cfg
}

// lookupGroup returns a subscription group's configuration, nil if there is none.
func lookupGroup(b *Broker, name string) *protocol.SubscriptionGroupConfig {
	g, err := b.core.SubscriptionGroup([]byte(name))
	if err != nil {
		return nil
	}
	return &g
}

// consumerIDs returns the client ids of a group's live members.
func consumerIDs(b *Broker, group string) []string {
	ids, _ := b.core.ConsumerIDs(group)
	return ids
}

// statePath is a state file's path under the broker's DataDir/config.
func statePath(b *Broker, file string) string {
	return filepath.Join(b.copts.DataDir, core.ConfigDir, file)
}

// runtimeInt reads a number of RuntimeInfo.
func runtimeInt(tb testing.TB, b *Broker, key string) int64 {
	tb.Helper()
	v, err := strconv.ParseInt(b.RuntimeInfo()[key], 10, 64)
	if err != nil {
		tb.Fatalf("runtime info %s: %v", key, err)
	}
	return v
}

// mustCreateTopic creates a topic through the core, as an admin would.
func mustCreateTopic(tb testing.TB, b *Broker, name string, queues int32) {
	tb.Helper()
	if err := b.core.Admin().CreateTopic(&core.TopicRequest{Topic: name, ReadQueueNums: queues, WriteQueueNums: queues,
		Perm: protocol.PermRead | protocol.PermWrite}); err != nil {
		tb.Fatal(err)
	}
}
