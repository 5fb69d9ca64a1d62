#!/usr/bin/env bash
# Prints the administrative URL of a PostgreSQL the tests can use:
# - TEST_POSTGRES_URL's (default postgres://postgres@127.0.0.1:5432/postgres) when it answers;
# - else a server of the run's own: `initdb` into $PG_TEST_DIR (default
#   /tmp/timer-service-test-postgres), trust auth, listening on 127.0.0.1:$PG_TEST_PORT
#   (default 55432) only, started with `pg_ctl` (as the `postgres` user when run by root, since
#   PostgreSQL refuses root). Its binaries are PG_BIN_DIR's, else the newest
#   /usr/lib/postgresql/*/bin; when there are none, Debian's `postgresql` package is installed.
# `scripts/postgres-for-tests.sh stop` stops the run's own server (nothing else).
# Progress goes to stderr; exit 1 when no server could be had.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${PG_TEST_DIR:-/tmp/timer-service-test-postgres}
port=${PG_TEST_PORT:-55432}
own_url="postgres://postgres@127.0.0.1:$port/postgres"

# The server binaries' directory, or nothing (never a failure: callers test for empty).
bindir() {
  if [ -n "${PG_BIN_DIR:-}" ]; then
    if [ -x "$PG_BIN_DIR/initdb" ]; then echo "$PG_BIN_DIR"; fi
    return 0
  fi
  { ls -d /usr/lib/postgresql/*/bin 2>/dev/null || true; } | sort -V | while read -r d; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; fi
  done | tail -n1
}

# Runs a server binary as the cluster's owner.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

if [ "${1:-}" = stop ]; then
  bin=$(bindir)
  if [ -n "$bin" ] && [ -f "$dir/data/postmaster.pid" ]; then
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >&2
  fi
  exit 0
fi

url=${TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
if TEST_POSTGRES_URL=$url scripts/postgres-available.sh; then
  echo "$url"
  exit 0
fi
if TEST_POSTGRES_URL=$own_url scripts/postgres-available.sh; then
  echo "$own_url"
  exit 0
fi
echo "no PostgreSQL answers at $url: starting one of this run's own on port $port" >&2

bin=$(bindir)
if [ -z "$bin" ] && command -v apt-get >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update >&2
  # policy-rc.d-less containers may start the package's own cluster; it is not relied on.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y postgresql postgresql-client >&2
  bin=$(bindir)
fi
if [ -z "$bin" ]; then
  echo "no PostgreSQL server binaries (initdb, pg_ctl) and none could be installed" >&2
  exit 1
fi

if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
  useradd --system --home-dir "$dir" --shell /usr/sbin/nologin postgres
fi
mkdir -p "$dir"
[ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
if [ ! -f "$dir/data/PG_VERSION" ]; then
  rm -rf "$dir/data"
  as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync >&2
fi
# Sockets in the data directory: /var/run/postgresql may not exist or belong to another user.
as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $port -k $dir/data" \
  start >&2 || { tail -n 20 "$dir/server.log" >&2; exit 1; }
if TEST_POSTGRES_URL=$own_url scripts/postgres-available.sh; then
  echo "$own_url"
  exit 0
fi
echo "the run's own PostgreSQL did not answer at $own_url (log: $dir/server.log)" >&2
exit 1
