// Package interopgrpc holds the interoperability tests of Apogee's gRPC
// front end with the official RocketMQ 5 Go client
// (github.com/apache/rocketmq-clients/golang/v5 v5.1.4), and of messages
// crossing protocols with the official 4.x client
// (github.com/apache/rocketmq-client-go/v2), against an apogee-broker
// process each test starts. A module of its own: the 5.x client's
// dependencies (grpc, protobuf, zap) stay out of the main module and of the
// 4.x interop module.
package interopgrpc
