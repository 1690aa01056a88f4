package idempotent

import "github.com/apogeemq/apogee/client"

// KeyFunc chooses the idempotency key of a message: deliveries with the same key
// are one consumption. An empty key leaves the message unguarded: it is handed to
// the listener every time it is delivered. A KeyFunc must not keep the message and
// should not allocate (it runs for every delivery).
type KeyFunc func(m *client.MessageExt) string

// ByMsgID keys messages by the producer's unique id, the UNIQ_KEY property (the
// default). A producer that retries a send whose acknowledgement was lost sends the
// same UNIQ_KEY again, and a redelivery (retry topic, rebalance, offset commit
// lost) keeps it, so this catches every duplicate the messaging system makes. A
// message without UNIQ_KEY (sent by a client that sets none) is keyed by its
// broker offset id, which differs between the original and its retry-topic copy.
//
// It returns MessageExt.MsgID, which the client sets to the UNIQ_KEY property (or
// the offset id when there is none).
func ByMsgID() KeyFunc { return func(m *client.MessageExt) string { return m.MsgID } }

// ByFirstKey keys messages by their first business key (the KEYS property, the
// first entry of Message.Keys): duplicates that the application made, two sends of
// one order for instance, are caught too, as long as it gives them the same key.
// Messages without keys are unguarded.
func ByFirstKey() KeyFunc {
	return func(m *client.MessageExt) string {
		if len(m.Keys) == 0 {
			return ""
		}
		return m.Keys[0]
	}
}

// ByProperty keys messages by the user property name. Messages without it are
// unguarded.
func ByProperty(name string) KeyFunc {
	return func(m *client.MessageExt) string { return m.Properties[name] }
}
