#!/usr/bin/env bash
# Tests the TypeScript client (clients/typescript): installs its locked dependencies, checks
# the types generated from schema/ for drift, type-checks, builds, runs its tests against a
# real nats-server and daemon, then packs it, installs the tarball with the example
# (examples/typescript) in a fresh folder and runs the example against a nats-server and a
# daemon of its own. TIMER_SERVICE_BIN (default target/debug/timer-service) and
# NATS_SERVER_BIN (default: what scripts/nats-server-bin.sh finds) say which binaries.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
package="$repo/clients/typescript"
export TIMER_SERVICE_BIN="${TIMER_SERVICE_BIN:-$repo/target/debug/timer-service}"
export NATS_SERVER_BIN="${NATS_SERVER_BIN:-$(bash "$repo/scripts/nats-server-bin.sh")}"
if [ ! -x "$TIMER_SERVICE_BIN" ]; then
  echo "no timer-service binary at $TIMER_SERVICE_BIN (build it, or set TIMER_SERVICE_BIN)" >&2
  exit 1
fi
if [ ! -x "$NATS_SERVER_BIN" ]; then
  echo "no nats-server at $NATS_SERVER_BIN" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/timer-ts-client.XXXXXX")
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }

cd "$package"
step "npm ci"
npm ci --no-audit --no-fund
step "generated types match schema/"
npm run --silent check:generated
step "type-check"
npm run --silent typecheck
step "build"
npm run --silent build
step "tests"
npm test

step "pack, and install the tarball with the example in a fresh folder"
npm pack --silent --pack-destination "$work" >/dev/null
tarball=$(ls "$work"/timer-service-client-*.tgz)
mkdir "$work/example"
cp "$repo/examples/typescript/package.json" "$repo/examples/typescript/tsconfig.json" \
  "$repo/examples/typescript/service.ts" "$work/example/"
(cd "$work/example" && npm install --no-audit --no-fund "$tarball")

step "the example against a nats-server and a daemon of its own"
free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}
nats_port=$(free_port)
http_port=$(free_port)
"$NATS_SERVER_BIN" -a 127.0.0.1 -p "$nats_port" -js -sd "$work/nats" >"$work/nats.log" 2>&1 &
pids+=($!)
cp "$TIMER_SERVICE_BIN" "$work/timer-service"
TIMER_BROKER_URL="nats://127.0.0.1:$nats_port" TIMER_DB_PATH="$work/timers.db" \
  TIMER_HTTP_LISTEN="127.0.0.1:$http_port" TIMER_NAME=example \
  "$work/timer-service" run --config "$work/absent.toml" >"$work/daemon.log" 2>&1 &
pids+=($!)
if ! node -e '
  const url = process.argv[1], deadline = Date.now() + 30000;
  (async () => {
    while (Date.now() < deadline) {
      try { if ((await fetch(url, { signal: AbortSignal.timeout(1000) })).status === 200) return; } catch {}
      await new Promise((r) => setTimeout(r, 100));
    }
    process.exit(1);
  })();' "http://127.0.0.1:$http_port/readyz"; then
  echo "the daemon was not ready within 30 s:" >&2
  tail -n 50 "$work/daemon.log" >&2
  exit 1
fi
(cd "$work/example" && NATS_URL="nats://127.0.0.1:$nats_port" TENANT=example timeout 120 npm start)
step "the TypeScript client passed"
