#!/usr/bin/env bash
# Makes ready what the console's browser tests (tests/console.rs) drive: Debian's Chromium
# (installed with apt when /usr/bin/chromium is missing) and playwright-core from npm (the
# version pinned by scripts/browser/package-lock.json), installed into a cache directory outside
# the repository (TIMER_BROWSER_CACHE, default /var/cache/timer-service-ci/browser). No browser is
# downloaded: playwright drives the system's Chromium.
#
# Prints two lines for the tests to read: `CHROMIUM=<path>` and `NODE_PATH=<node_modules>`.
# Fails (exit 1) with the reason when either cannot be had.
set -euo pipefail
cd "$(dirname "$0")/.."

cache=${TIMER_BROWSER_CACHE:-/var/cache/timer-service-ci/browser}

fail() {
  echo "error: the browser tests cannot run: $1" >&2
  exit 1
}

chromium=${CHROMIUM:-}
if [ -z "$chromium" ]; then
  chromium=$(command -v chromium || command -v chromium-browser || true)
fi
if [ -z "$chromium" ] && command -v apt-get >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing Debian's chromium" >&2
  { $sudo apt-get update && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y chromium; } >&2 ||
    fail "apt-get could not install chromium"
  chromium=$(command -v chromium || true)
fi
[ -n "$chromium" ] || fail "no chromium (apt-get install chromium)"

command -v node >/dev/null 2>&1 || fail "node is not installed (apt-get install nodejs npm)"
# installed.lock: the lock file of the last install that finished; anything else reinstalls.
if ! cmp -s scripts/browser/package-lock.json "$cache/installed.lock"; then
  command -v npm >/dev/null 2>&1 || fail "npm is not installed (apt-get install npm)"
  echo "installing playwright-core into $cache" >&2
  mkdir -p "$cache" || fail "cannot create $cache"
  rm -f "$cache/installed.lock"
  cp scripts/browser/package.json scripts/browser/package-lock.json "$cache/"
  (cd "$cache" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >&2) ||
    fail "npm could not install playwright-core into $cache"
  cp scripts/browser/package-lock.json "$cache/installed.lock"
fi
echo "CHROMIUM=$chromium"
echo "NODE_PATH=$cache/node_modules"
