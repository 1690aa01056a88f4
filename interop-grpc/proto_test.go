package interopgrpc

import "google.golang.org/protobuf/proto"

// protoUnmarshal decodes a message the official generated code has.
type protoUnmarshal struct{}

func (protoUnmarshal) into(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }
