// Package rmqpb is RocketMQ 5's gRPC messaging protocol
// (apache.rocketmq.v2.MessagingService): the Go code protoc generates from
// the project's own definitions in proto/apache/rocketmq/v2, which are
// wire-identical to the apache/rocketmq-apis ones (same package, names,
// field numbers and types), so the official RocketMQ 5 clients of every
// language talk to Apogee's gRPC front end (package broker/grpcfe).
//
// The generated files (*.pb.go) are committed; building Apogee needs no
// protoc. After a change to proto/, regenerate with
//
//	go generate ./rmqpb
//
// which runs generate.sh: protoc from Debian's protobuf-compiler and the Go
// plugins protoc-gen-go and protoc-gen-go-grpc at pinned versions, built
// from the Go module proxy into a temporary directory.
//
// The package imports nothing of the module. A binary may not link it
// together with another generated copy of the same protocol (such as the
// official Go client's): protobuf's registry refuses two definitions of one
// full name.
package rmqpb

//go:generate bash generate.sh
