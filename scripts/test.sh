#!/usr/bin/env bash
# The project's test command (README.md; CI runs it through .ci/run). Steps:
#   1. go vet and the race detector over every package of the main module.
#   2. The tests that skip themselves under the race detector (allocation
#      counts, which it changes), once more without it, by name.
#   3. The static build (scripts/build.sh) and a check that every binary is
#      statically linked with cgo off, as README.md says.
#   4. The interop module (the official RocketMQ Go client) with -race, then
#      its tests that skip under it (the client's orderly consumer and its
#      request path race with themselves) without.
#   4b. The interop-grpc module (the official RocketMQ 5 Go client over the
#      broker's gRPC front end, and messages crossing to the 4.x client),
#      without -race: the broker under test is a separate process, so the
#      detector would watch only the test and the official clients, and it
#      reports their own races (the 5.x client's metrics reset against its
#      GracefulStop, the 4.x client's shutdown against its rebalance).
#   4c. The NATS JetStream driver of the benchmark (benchmark/natsdriver):
#      vet and its tests, which skip with a note when no nats-server is on
#      PATH (docs/bench.md says how to install one).
#   5. The Redis store of the idempotent-consumption helper. Its tests start
#      their own redis-server; when there is none, this script says so and
#      installs Debian's package with apt-get, or stops with what to do.
#   6. The dashboard in headless Chromium (interop-dashboard, chromedp). It
#      needs a chromium binary; when there is none, this script installs
#      Debian's chromium package with apt-get, or stops with what to do.
# Every command is printed before it runs.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== %s\n' "$*"; }
run() {
  printf '+ %s\n' "$*"
  "$@"
}

# raceSkipped prints the packages of the module in the current directory
# that have tests skipping under the race detector (a Test function that
# checks `if raceEnabled {`), then a -run pattern naming those tests.
raceSkipped() {
  local pkgs=() names=() pkg dir files
  while read -r pkg dir; do
    files=("$dir"/*_test.go)
    [ -e "${files[0]}" ] || continue
    mapfile -t found < <(awk '
      FNR == 1 { fn = "" }
      /^func / { fn = "" }
      /^func Test[A-Za-z0-9_]*\(/ { fn = $2; sub(/\(.*/, "", fn) }
      /if raceEnabled \{/ && fn != "" { print fn }' "${files[@]}" | sort -u)
    if [ ${#found[@]} -gt 0 ]; then
      pkgs+=("$pkg")
      names+=("${found[@]}")
    fi
  done < <(go list -f '{{.ImportPath}} {{.Dir}}' ./...)
  [ ${#pkgs[@]} -gt 0 ] || return 0
  local IFS='|'
  echo "${pkgs[*]}"
  echo "^(${names[*]})\$"
}

# runRaceSkipped runs, without -race, the tests raceSkipped finds.
runRaceSkipped() {
  local out
  out=$(raceSkipped)
  if [ -z "$out" ]; then
    echo "(none)"
    return
  fi
  local pkgs pattern
  pkgs=$(sed -n 1p <<<"$out" | tr '|' ' ')
  pattern=$(sed -n 2p <<<"$out")
  # shellcheck disable=SC2086 # one word per package
  run go test -count=1 -timeout 10m -run "$pattern" $pkgs
}

# checkStatic fails unless the binary was built with cgo off and has no
# program interpreter (the dynamic loader): a static executable.
checkStatic() {
  local bin=$1
  if ! go version -m "$bin" | grep -q 'CGO_ENABLED=0'; then
    echo "test.sh: $bin was built with cgo on" >&2
    return 1
  fi
  if readelf -l "$bin" 2>/dev/null | grep -q 'INTERP'; then
    echo "test.sh: $bin is dynamically linked:" >&2
    file "$bin" >&2 || true
    return 1
  fi
  echo "$bin: static, CGO_ENABLED=0"
}

step "1. go vet and go test -race, main module"
run go vet ./...
run go test -race -count=1 -timeout 25m ./...

step "2. tests that skip under -race, without it"
runRaceSkipped

step "3. static build"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
run scripts/build.sh "$bin"
for b in "$bin"/*; do
  checkStatic "$b"
done

step "4. interop module (official RocketMQ Go client)"
(
  cd interop
  run go vet ./...
  run go test -race -count=1 -timeout 15m ./...
  echo "--- its tests that skip under -race, without it"
  runRaceSkipped
)

step "4b. interop-grpc module (official RocketMQ 5 Go client, gRPC)"
(
  cd interop-grpc
  run go vet ./...
  # Its tests are parallel and mostly wait (a lite consumer's GracefulStop
  # waits out its 20 s long poll): four at a time, not GOMAXPROCS (2).
  run go test -count=1 -parallel 4 -timeout 15m ./...
)

step "4c. benchmark/natsdriver module (NATS JetStream peer driver)"
(
  cd benchmark/natsdriver
  run go vet ./...
  run go test -race -count=1 -timeout 5m ./...
)

step "5. client/idempotent/redisstore (needs redis-server)"
if ! command -v redis-server >/dev/null; then
  echo "redis-server is not installed: the tests of client/idempotent/redisstore start their own"
  echo "Redis server, so this script installs Debian's redis-server package with apt-get."
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then
      sudo=sudo
    else
      echo "test.sh: installing redis-server needs root (or sudo, which is missing); install it and run again" >&2
      exit 1
    fi
  fi
  if ! command -v apt-get >/dev/null; then
    echo "test.sh: apt-get is missing: install redis-server (Redis 6 or newer) with your package manager and run again" >&2
    exit 1
  fi
  if ! { run $sudo apt-get update -qq && run $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; }; then
    echo "test.sh: apt-get could not install redis-server (its messages are above); install it and run again" >&2
    exit 1
  fi
  echo "installed: $(redis-server --version)"
fi
(
  cd client/idempotent/redisstore
  run go vet ./...
  run go test -race -count=1 -timeout 5m ./...
)
step "6. interop-dashboard (the dashboard in headless chromium)"
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null; then
  echo "chromium is not installed: interop-dashboard drives the broker's dashboard in a headless"
  echo "browser, so this script installs Debian's chromium package with apt-get."
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then
      sudo=sudo
    else
      echo "test.sh: installing chromium needs root (or sudo, which is missing); install it and run again" >&2
      exit 1
    fi
  fi
  if ! command -v apt-get >/dev/null; then
    echo "test.sh: apt-get is missing: install chromium (or google-chrome) with your package manager and run again" >&2
    exit 1
  fi
  if ! { run $sudo apt-get update -qq && run $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }; then
    echo "test.sh: apt-get could not install chromium (its messages are above); install it and run again" >&2
    exit 1
  fi
  echo "installed: $(chromium --version)"
fi
(
  cd interop-dashboard
  run go vet ./...
  run go test -race -count=1 -timeout 5m ./...
)
echo
echo "all tests passed"
