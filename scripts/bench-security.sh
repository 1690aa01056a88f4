#!/usr/bin/env bash
# Security overhead (docs/benchmarks.md, issue 21): three apogee-broker
# processes (O: plain, no ACL; P: --tls-mode permissive; A: --acl-file), each
# listening on ports from 127.0.0.1:0 read from its ready file, apogee-bench
# against each, runs alternated so that
# load from other work on shared cores hits both sides of each comparison
# alike; each line gives the throughput and the broker's CPU time per 1,000
# messages (utime + stime from /proc/PID/stat). Needs openssl. ~6 minutes.
set -u
W=$(mktemp -d)
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
work=$W
go build -o $W/apogee-broker ./cmd/apogee-broker && go build -o $W/apogee-bench ./cmd/apogee-bench || exit 1
cd $W
rm -rf dO dP dA
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout key.pem -out cert.pem -days 1 \
  -subj /CN=apogee-bench -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
cat > acl.yml <<'ACL'
users:
  - {username: bench, password: bench-secret}
acls:
  - subject: User:bench
    policies:
      - entries:
          - {resource: "Topic:apogee-bench", actions: [Pub, Sub], decision: Allow}
          - {resource: "Group:apogee-bench*", actions: [Pub, Sub], decision: Allow}
ACL
chmod 600 acl.yml
O="" P="" A=""
trap 'kill $O $P $A 2>/dev/null; wait; rm -rf "$W"' EXIT
listeners=(--listen 127.0.0.1:0 --ha-listen 127.0.0.1:0 --namesrv-listen "" --grpc-listen "")
bench_start O ./apogee-broker "${listeners[@]}" --data-dir dO || exit 1
O=$bench_pid
bench_start P ./apogee-broker "${listeners[@]}" --data-dir dP --tls-mode permissive --tls-cert cert.pem --tls-key key.pem || exit 1
P=$bench_pid
bench_start A ./apogee-broker "${listeners[@]}" --data-dir dA --acl-file acl.yml || exit 1
A=$bench_pid
addrO=$(bench_addr O listen) addrP=$(bench_addr P listen) addrA=$(bench_addr A listen)
ticks() { awk '{print $14+$15}' /proc/$1/stat; }
# one NAME PID RATE ARGS...: a run; prints name, msgs/s, broker CPU ticks (10 ms) per 10,000 messages
one() {
  local name=$1 pid=$2 rate=$3; shift 3
  local t0=$(ticks $pid) load=$(cut -d' ' -f1 /proc/loadavg)
  local out=$(./apogee-bench produce --size 1024 --duration 8s --warmup 2s --quiet --json --rate $rate "$@" | tail -1)
  local t1=$(ticks $pid)
  python3 -c "
import json,sys
r=json.loads(sys.argv[1]); rate=float(sys.argv[3]); ticks=int(sys.argv[5])-int(sys.argv[4])
total = r['messages']*10/8 if rate==0 else rate*10
print('%-10s load %5s  %8.0f msgs/s  errors %d  reached %s  broker CPU %.1f ms per 1,000 msgs' % (sys.argv[2], sys.argv[6], r['msgs_per_sec'], r['errors'], r['rate_reached'], ticks*10/total*1000))
" "$out" $name $rate $t0 $t1 $load
}
echo "== closed loop, 1 KiB, 4 producers x 64 in flight"
for i in 1 2 3 4 5; do
  one plain $P 0 --addr "$addrP"
  one tls $P 0 --addr "$addrP" --tls --tls-ca cert.pem
  one acl-off $O 0 --addr "$addrO"
  one acl-on $A 0 --addr "$addrA" --access-key bench --secret-key bench-secret
done
echo "== fixed rate 10000 msgs/s, 1 KiB: broker CPU per message"
for i in 1 2 3; do
  one plain $P 10000 --addr "$addrP"
  one tls $P 10000 --addr "$addrP" --tls --tls-ca cert.pem
  one acl-off $O 10000 --addr "$addrO"
  one acl-on $A 10000 --addr "$addrA" --access-key bench --secret-key bench-secret
done
grep -c "request refused" A.err | sed 's/^/refusals logged by A: /'
echo DONE
