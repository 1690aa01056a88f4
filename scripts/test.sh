#!/usr/bin/env bash
# The project's test command (README.md; CI runs it through .ci/run):
# vet and the race detector over every package of the main module, then the
# nested modules: the interop suite with the official RocketMQ Go client, and
# the Redis store of the idempotent-consumption helper (which needs
# redis-server from Debian's packages; the tests start their own server).
set -euo pipefail
cd "$(dirname "$0")/.."
set -x
go vet ./...
go test -race -count=1 -timeout 25m ./...
(cd interop && go vet ./... && go test -race -count=1 -timeout 15m ./...)
if ! command -v redis-server >/dev/null; then
  { apt-get update -qq && apt-get install -y -qq redis-server; } >/dev/null
fi
(cd client/idempotent/redisstore && go vet ./... && go test -race -count=1 -timeout 5m ./...)
