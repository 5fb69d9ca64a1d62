#!/usr/bin/env bash
# Prints the path of libfaketime (the preload library the fault-injection suite uses to step the
# daemon's wall clock), installing the Debian package `faketime` when it is missing. The tests
# read the path from FAKETIME_LIB; without it they skip the clock fault and say so.
set -euo pipefail

for candidate in "${FAKETIME_LIB:-}" \
  /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 \
  /usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1 \
  /usr/lib/faketime/libfaketime.so.1 \
  /usr/local/lib/faketime/libfaketime.so.1; do
  if [ -n "$candidate" ] && [ -f "$candidate" ]; then
    echo "$candidate"
    exit 0
  fi
done

if command -v apt-get >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y faketime >&2
  found=$(dpkg -L libfaketime 2>/dev/null | grep '/libfaketime\.so\.1$' | head -n1 || true)
  if [ -n "$found" ] && [ -f "$found" ]; then
    echo "$found"
    exit 0
  fi
fi
echo "libfaketime could not be installed" >&2
exit 1
