#!/usr/bin/env bash
# Succeeds when the PostgreSQL the tests use (TEST_POSTGRES_URL, default
# postgres://postgres@127.0.0.1:5432/postgres) accepts connections.
set -u
url=${TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
if command -v psql >/dev/null 2>&1; then
  psql "$url" -tAc 'SELECT 1' >/dev/null 2>&1
else
  # No client: at least something must listen on the port.
  hostport=${url#*@}; hostport=${hostport%%/*}
  host=${hostport%%:*}; port=${hostport##*:}
  (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
fi
