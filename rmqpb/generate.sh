#!/usr/bin/env bash
# Regenerates this package's Go code from proto/ (run by `go generate ./rmqpb`).
# Needs protoc (Debian's protobuf-compiler, which also ships the well-known
# types under /usr/include); the Go plugins are built at the pinned versions
# below into a temporary directory, so nothing is installed. The generated
# code is committed: building Apogee never needs protoc.
set -euo pipefail
cd "$(dirname "$0")"

PROTOC_GEN_GO=google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC=google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2

command -v protoc >/dev/null || {
  echo "generate.sh: protoc is missing: apt-get install protobuf-compiler" >&2
  exit 1
}
include=/usr/include
[ -f "$include/google/protobuf/duration.proto" ] || {
  echo "generate.sh: $include/google/protobuf/duration.proto is missing (Debian's protobuf-compiler ships it)" >&2
  exit 1
}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN="$bin" go install "$PROTOC_GEN_GO"
GOBIN="$bin" go install "$PROTOC_GEN_GO_GRPC"
PATH="$bin:$PATH" protoc -I proto -I "$include" \
  --go_out=. --go_opt=module=github.com/apogeemq/apogee/rmqpb \
  --go-grpc_out=. --go-grpc_opt=module=github.com/apogeemq/apogee/rmqpb \
  apache/rocketmq/v2/definition.proto apache/rocketmq/v2/service.proto
gofmt -l . | (! grep .) || true
