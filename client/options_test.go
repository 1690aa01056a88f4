package client_test

import (
	"reflect"
	"testing"

	"github.com/apogeemq/apogee/client"
)

// TestOptionKinds checks the option typing that keeps a producer option out of a
// consumer (a compile error, which a test cannot show directly).
func TestOptionKinds(t *testing.T) {
	producer := reflect.TypeOf((*client.ProducerOpt)(nil)).Elem()
	push := reflect.TypeOf((*client.PushConsumerOpt)(nil)).Elem()
	pull := reflect.TypeOf((*client.PullConsumerOpt)(nil)).Elem()
	for _, tc := range []struct {
		name             string
		opt              any
		prod, push, pull bool
	}{
		{"NameServer", client.NameServer("127.0.0.1:9876"), true, true, true},
		{"InstanceName", client.InstanceName("x"), true, true, true},
		{"ProducerGroup", client.ProducerGroup("g"), true, false, false},
		{"SendTimeout", client.SendTimeout(1), true, false, false},
		{"ConsumerGroup", client.ConsumerGroup("g"), false, true, true},
		{"Subscribe", client.Subscribe("t", "*"), false, true, true},
		{"ConsumeGoroutines", client.ConsumeGoroutines(1), false, true, false},
		{"WithOrderlyListener", client.WithOrderlyListener(nil), false, true, false},
		{"AutoCommit", client.AutoCommit(true), false, false, true},
	} {
		typ := reflect.TypeOf(tc.opt)
		if typ.Implements(producer) != tc.prod || typ.Implements(push) != tc.push || typ.Implements(pull) != tc.pull {
			t.Errorf("%s: producer %v push %v pull %v, want %v %v %v", tc.name,
				typ.Implements(producer), typ.Implements(push), typ.Implements(pull), tc.prod, tc.push, tc.pull)
		}
	}
}

func TestConsumerConfigErrors(t *testing.T) {
	base := []client.PushConsumerOpt{client.NameServer("127.0.0.1:9876"), client.InstanceName("cfg-" + t.Name())}
	for name, opts := range map[string][]client.PushConsumerOpt{
		"no group":        {client.Subscribe("T", "*"), client.WithConcurrentListener(newCollector().listener("x"))},
		"no subscription": {client.ConsumerGroup("g"), client.WithConcurrentListener(newCollector().listener("x"))},
		"no listener":     {client.ConsumerGroup("g"), client.Subscribe("T", "*")},
		"two listeners": {client.ConsumerGroup("g"), client.Subscribe("T", "*"), client.WithConcurrentListener(newCollector().listener("x")),
			client.WithOrderlyListener(client.OrderlyListener(newCollector().listener("x")))},
		"orderly broadcasting": {client.ConsumerGroup("g"), client.Subscribe("T", "*"), client.WithMessageModel(client.Broadcasting),
			client.WithOrderlyListener(client.OrderlyListener(newCollector().listener("x")))},
		"bad batch": {client.ConsumerGroup("g"), client.Subscribe("T", "*"), client.ConsumeBatchSize(0),
			client.WithConcurrentListener(newCollector().listener("x"))},
	} {
		if _, err := client.NewPushConsumer(append(base, opts...)...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
