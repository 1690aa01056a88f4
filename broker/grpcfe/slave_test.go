package grpcfe

import (
	"testing"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/rmqpb"
)

// A slave's QueryRoute answers the topics its table follows from its
// master, with their queue counts, and TOPIC_NOT_FOUND for the others,
// without creating them (a slave never creates a topic).
func TestSlaveRouteCreatesNothing(t *testing.T) {
	e := newEnv(t, func(o *core.Options) { o.Role, o.BrokerID = core.RoleSlave, 1 })
	followed := protocol.TopicConfig{TopicName: "Followed", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6, TopicFilterType: "SINGLE_TAG"}
	e.core.Replication().SyncTopics(core.TopicTable{Topics: map[string]*protocol.TopicConfig{"Followed": &followed}})

	if r := e.route("Followed"); r.Status.Code != rmqpb.Code_OK || len(r.MessageQueues) != 4 {
		t.Fatalf("the slave's route of a topic it follows: %v", r)
	}
	if r := e.route("Unknown"); r.Status.Code != rmqpb.Code_TOPIC_NOT_FOUND || len(r.MessageQueues) != 0 {
		t.Fatalf("the slave's route of an unknown topic: %v", r)
	}
	if _, ok := e.core.TopicConfig("Unknown"); ok {
		t.Fatal("the slave created a topic for a route query")
	}
}
