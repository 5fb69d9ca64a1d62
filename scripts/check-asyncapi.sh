#!/usr/bin/env bash
# Validates schema/asyncapi.yaml with the AsyncAPI parser (@asyncapi/parser from npm, the version
# pinned by scripts/asyncapi/package-lock.json), installed into a cache directory outside the
# repository (TIMER_ASYNCAPI_CACHE, default /var/cache/timer-service-ci/asyncapi) when missing.
# Without node or npm, or when the install fails, it fails under CI=true and skips otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

cache=${TIMER_ASYNCAPI_CACHE:-/var/cache/timer-service-ci/asyncapi}

unavailable() {
  if [ "${CI:-}" = true ]; then
    echo "error: the AsyncAPI check cannot run: $1" >&2
    exit 1
  fi
  echo "skipping the AsyncAPI check: $1" >&2
  exit 0
}

command -v node >/dev/null 2>&1 || unavailable "node is not installed (apt-get install nodejs npm)"
# installed.lock: the lock file of the last install that finished; anything else reinstalls.
if ! cmp -s scripts/asyncapi/package-lock.json "$cache/installed.lock"; then
  command -v npm >/dev/null 2>&1 || unavailable "npm is not installed (apt-get install npm)"
  echo "installing @asyncapi/parser into $cache" >&2
  mkdir -p "$cache" || unavailable "cannot create $cache"
  rm -f "$cache/installed.lock"
  cp scripts/asyncapi/package.json scripts/asyncapi/package-lock.json "$cache/"
  (cd "$cache" && npm ci --no-audit --no-fund --loglevel=error >&2) ||
    unavailable "npm could not install @asyncapi/parser into $cache"
  cp scripts/asyncapi/package-lock.json "$cache/installed.lock"
fi
NODE_PATH="$cache/node_modules" node scripts/asyncapi/check.cjs schema/asyncapi.yaml
