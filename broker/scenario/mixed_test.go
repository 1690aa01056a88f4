package scenario

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/grpcfe"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/node"
)

// mixedDriver runs the scenarios across the protocols, on one node (package
// node, the broker process's composition root) with both front ends
// attached: messages are sent (and transactions ended and checked) through
// one, and consumed (pulled, popped, acked, their offsets kept, sent back,
// dead-lettered) through the other. A message stored by either protocol
// must read the same through the other (grpcfe's "messages across
// protocols"). Topics and groups are made with remoting's admin requests.
type mixedDriver struct {
	producer, consumer driver
	admin              *remotingDriver
}

// newMixedDriver returns the constructor of a mixed driver sending through
// one front end and consuming through the other.
func newMixedDriver(sendGRPC bool) func(t *testing.T) driver {
	return func(t *testing.T) driver {
		t.Helper()
		r, g := startNode(t)
		if sendGRPC {
			return &mixedDriver{producer: g, consumer: r, admin: r}
		}
		return &mixedDriver{producer: r, consumer: g, admin: r}
	}
}

// startNode starts a node with the remoting and gRPC front ends on
// loopback listeners and returns a driver of each, connected to it.
func startNode(t *testing.T) (*remotingDriver, *grpcDriver) {
	t.Helper()
	lr, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lg, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		lr.Close()
		t.Fatal(err)
	}
	bo := brokerOptions(t, coreOptions(t))
	bo.Core.AdvertiseAddr = lr.Addr().String()
	n, err := node.Start(node.Options{Broker: bo, Listener: lr,
		GRPC: &node.GRPC{Listener: lg, Options: grpcfe.Options{Logger: testlog.New(t, "grpc")}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			t.Errorf("node Shutdown: %v", err)
		}
	})
	return dialRemoting(t, lr.Addr().String()), dialGRPC(t, lg.Addr().String(), n.Broker().Core())
}

// mixedLacks is what a mixed driver lacks: the producer's protocol's
// sending operations, the consumer's consuming ones.
func mixedLacks(sendGRPC bool) func(op) string {
	r, g := (*remotingDriver)(nil).lacks, (*grpcDriver)(nil).lacks
	producer, consumer := r, g
	if sendGRPC {
		producer, consumer = g, r
	}
	return func(o op) string {
		if o == opDelayLevel {
			return producer(o)
		}
		return consumer(o)
	}
}

func (d *mixedDriver) createTopic(t *testing.T, topic string, queues int32, typ string) {
	t.Helper()
	d.admin.createTopic(t, topic, queues, typ)
}

func (d *mixedDriver) createGroup(t *testing.T, group string, g groupConfig) {
	t.Helper()
	// The remoting driver, which pops too when it is the consumer,
	// remembers an orderly group; the gRPC front end reads it from the core.
	d.admin.createGroup(t, group, g)
}

func (d *mixedDriver) send(t *testing.T, m Msg) (Sent, error) {
	t.Helper()
	return d.producer.send(t, m)
}

func (d *mixedDriver) sendHalf(t *testing.T, m Msg) Sent {
	t.Helper()
	return d.producer.sendHalf(t, m)
}

func (d *mixedDriver) endTx(t *testing.T, topic string, tx txRef, res resolution, fromCheck bool) {
	t.Helper()
	d.producer.endTx(t, topic, tx, res, fromCheck)
}

func (d *mixedDriver) watchChecks(t *testing.T, topic string) <-chan Check {
	t.Helper()
	return d.producer.watchChecks(t, topic)
}

func (d *mixedDriver) pull(t *testing.T, group, topic string, q int32, offset int64, f Filter) (Pulled, error) {
	t.Helper()
	return d.consumer.pull(t, group, topic, q, offset, f)
}

func (d *mixedDriver) pop(t *testing.T, group, topic string, max int32, invisible time.Duration, f Filter) ([]Got, error) {
	t.Helper()
	return d.consumer.pop(t, group, topic, max, invisible, f)
}

func (d *mixedDriver) pullHeld(t *testing.T, group, topic string, q int32, offset int64, f Filter, hold time.Duration) (Pulled, error) {
	t.Helper()
	return d.consumer.pullHeld(t, group, topic, q, offset, f, hold)
}

func (d *mixedDriver) popHeld(t *testing.T, group, topic string, max int32, invisible time.Duration, f Filter, hold time.Duration) ([]Got, error) {
	t.Helper()
	return d.consumer.popHeld(t, group, topic, max, invisible, f, hold)
}

func (d *mixedDriver) subscribe(t *testing.T, group, topic string, f Filter) int64 {
	t.Helper()
	return d.consumer.subscribe(t, group, topic, f)
}

func (d *mixedDriver) ack(t *testing.T, group string, g Got) bool {
	t.Helper()
	return d.consumer.ack(t, group, g)
}

func (d *mixedDriver) changeInvisible(t *testing.T, group string, g Got, dur time.Duration) (Got, bool) {
	t.Helper()
	return d.consumer.changeInvisible(t, group, g, dur)
}

func (d *mixedDriver) commitOffset(t *testing.T, group, topic string, q int32, offset int64) {
	t.Helper()
	d.consumer.commitOffset(t, group, topic, q, offset)
}

func (d *mixedDriver) queryOffset(t *testing.T, group, topic string, q int32) (int64, bool) {
	t.Helper()
	return d.consumer.queryOffset(t, group, topic, q)
}

func (d *mixedDriver) sendBack(t *testing.T, group string, g Got, delayLevel int32) {
	t.Helper()
	d.consumer.sendBack(t, group, g, delayLevel)
}

func (d *mixedDriver) forwardDLQ(t *testing.T, group string, g Got) bool {
	t.Helper()
	return d.consumer.forwardDLQ(t, group, g)
}

func (d *mixedDriver) readDLQ(t *testing.T, group string) []Got {
	t.Helper()
	return d.consumer.readDLQ(t, group)
}
