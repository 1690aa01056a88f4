// Package broker is Apogee's RocketMQ broker: the request processors that
// serve the official clients (rocketmq-client-go first) on top of the store,
// with long polling, the topic / subscription-group / consumer-offset
// managers, the client registry, queue locks, and registration with the
// embedded (and optional external) name servers.
//
// See docs/protocol.md for every request code and its status.
package broker
