#!/usr/bin/env bash
# Installs the benchmark's peer driver (examples/bench/peers: BullMQ and pg-boss, pinned in its
# package-lock.json) when node_modules is missing or older than the lock file, and prints on stdout
# one line: the absolute path of the Node 22 binary to run peers.mjs with. That binary comes from
# the npm package `node`, pinned in the same lock file, since pg-boss 12 needs Node >= 22.12.
# Everything else goes to stderr.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir="$root/examples/bench/peers"
node_bin="$dir/node_modules/.bin/node"

if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules" ] || [ ! -x "$node_bin" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "bench-peers: npm is needed to install $dir" >&2
    exit 1
  fi
  echo "bench-peers: installing $dir (npm ci)" >&2
  (cd "$dir" && npm ci --no-audit --no-fund) >&2
  # npm ci lays node_modules anew; stamp it so the lock file reads as older from now on.
  touch "$dir/node_modules"
fi

if [ ! -x "$node_bin" ]; then
  echo "bench-peers: $node_bin is missing after the install" >&2
  exit 1
fi
if ! "$node_bin" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 22 ? 0 : 1)' >&2; then
  echo "bench-peers: $node_bin is not a working Node >= 22 ($("$node_bin" --version 2>&1 || true))" >&2
  exit 1
fi
echo "bench-peers: $("$node_bin" --version) at $node_bin" >&2
echo "$node_bin"
