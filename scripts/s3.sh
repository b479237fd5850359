#!/usr/bin/env bash
# Run a real, private S3-compatible server for local runs and tests: SeaweedFS's `weed server -s3`
# (Apache-2.0), built from the Go module proxy at the commit scripts/s3/go.mod pins.
#
#   scripts/s3.sh install   build the server into .run/tools/weed (only when scripts/s3/go.mod or go.sum changed)
#   scripts/s3.sh start     install if needed, start on 127.0.0.1, wait until it answers S3; idempotent
#   scripts/s3.sh stop      SIGTERM, wait up to 20s, then SIGKILL; fine if not running
#   scripts/s3.sh status    exit 0 if running and answering
#   scripts/s3.sh env       print the AWS_* variables a client needs (endpoint, region, credentials)
#
# Environment:
#   DOCSUM_STATE_DIR   state dir (default <repo>/.run): data, credentials, pid and log under $DOCSUM_STATE_DIR/s3
#   DOCSUM_S3_PORT     the S3 port on 127.0.0.1 (default 8333); the server's own master, volume and filer
#                      take the next three ports, and each of the four its gRPC port 10000 above
#
# Why SeaweedFS. Measured on the two-core development machine while other builds and test runs shared it
# (load average 11-22 during the builds):
#   SeaweedFS: module download 71 s (3.3 GB of modules: it links many storage back-ends); build 15m52s
#              wall, 9m31s of CPU (8m11s user, 1m20s sys), so about 5 minutes on two idle cores; stripped
#              binary 164 MB; start to the first S3 answer 2.6 s.
#   gofakes3 v1.2.0 (johannesboyne/gofakes3, a fake S3 in Go): download 9 s; build 3m20s wall, 45 s of CPU;
#              binary 8.3 MB.
# gofakes3 builds far faster, but it checks no signature (any credentials pass): a test against it would
# pass with wrong keys or a client that signs wrongly, which makes it a mock of S3. SeaweedFS is a real S3
# server (SigV4 checked against its identities, multipart uploads, paginated listing, its own volume store),
# so it is the one the tests run. Its build is a one-time cost per machine (the binary is kept, keyed by
# go.mod and go.sum; `make test` builds it before the suite), inside `make test`'s 90 minutes; the build
# cache it needs (~2 GB) is removed once the binary is there.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/daemon.sh"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$SCRIPT_DIR")"
STATE_DIR="${DOCSUM_STATE_DIR:-$REPO_DIR/.run}"
MODULE_DIR="$SCRIPT_DIR/s3"

PORT="${DOCSUM_S3_PORT:-8333}"
MASTER_PORT=$((PORT + 1))
VOLUME_PORT=$((PORT + 2))
FILER_PORT=$((PORT + 3))
GRPC_OFFSET=10000
REGION="us-east-1"

TOOLS_DIR="$REPO_DIR/.run/tools"
WEED="$TOOLS_DIR/weed"
S3_DIR="$STATE_DIR/s3"
DATA_DIR="$S3_DIR/data"
CREDENTIALS="$S3_DIR/credentials"
CONFIG="$S3_DIR/identities.json"
PID_FILE="$S3_DIR/weed.pid"
LOG_FILE="$S3_DIR/weed.log"
LOCK_FILE="$STATE_DIR/s3.lock"
START_TIMEOUT=120
DAEMON_NAME="s3.sh"

# --- the binary -------------------------------------------------------------------------------------

find_go() {
  # /usr/local/go is where the official Go distribution installs, often not in a non-login PATH.
  local go
  go="$(command -v go || true)"
  [[ -n "$go" ]] || [[ ! -x /usr/local/go/bin/go ]] || go=/usr/local/go/bin/go
  [[ -n "$go" ]] || die "Go 1.26 or newer is needed to build SeaweedFS (Debian: apt-get install -y golang-go, if new enough)"
  echo "$go"
}

do_install() {
  # Rebuilt only when the module that pins it changes.
  local key
  key="$(cat "$MODULE_DIR/go.mod" "$MODULE_DIR/go.sum" | sha256sum | cut -d' ' -f1)"
  if [[ -x "$WEED" && "$(cat "$WEED.key" 2>/dev/null || true)" == "$key" ]]; then
    return 0
  fi
  local go
  go="$(find_go)"
  log "building SeaweedFS through the Go module proxy (the first time takes many minutes)"
  mkdir -p "$TOOLS_DIR"
  # A build cache of its own, removed once the binary is there: only the binary is worth keeping.
  local gocache="$TOOLS_DIR/weed-go-build"
  (cd "$MODULE_DIR" && GOCACHE="$gocache" GOFLAGS=-buildvcs=false "$go" build -mod=readonly -trimpath \
    -ldflags "-s -w" -o "$WEED.new" github.com/seaweedfs/seaweedfs/weed) >&2
  mv "$WEED.new" "$WEED"
  echo "$key" >"$WEED.key"
  rm -rf "$gocache"
}

# --- the running server -----------------------------------------------------------------------------

# Our server's command line names our data dir.
running_pid() { pid_file_process "-dir=$DATA_DIR "; }

# The S3 gateway answers its health check only once it reaches the filer: HTTP 200 on /healthz.
answers() {
  timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT && printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 && head -n 1 <&3" 2>/dev/null |
    grep -q ' 200 '
}

ensure_credentials() {
  [[ -s "$CREDENTIALS" ]] && return 0
  # Hex only: safe in JSON and in an environment line without quoting.
  local access secret
  access="$(head -c 10 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  secret="$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  (umask 077 && printf '%s\n%s\n' "$access" "$secret" >"$CREDENTIALS.tmp")
  mv "$CREDENTIALS.tmp" "$CREDENTIALS"
}

access_key() { sed -n 1p "$CREDENTIALS"; }
secret_key() { sed -n 2p "$CREDENTIALS"; }

write_config() {
  # One identity, allowed everything; no anonymous access. Private: it holds the secret.
  (umask 077 && cat >"$CONFIG.tmp" <<EOF
{"identities": [{"name": "docsum", "credentials": [{"accessKey": "$(access_key)", "secretKey": "$(secret_key)"}],
  "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}
EOF
  )
  mv "$CONFIG.tmp" "$CONFIG"
}

do_start() {
  take_lock
  local pid
  if pid="$(running_pid)"; then
    wait_ready "$pid"
    return 0
  fi
  rm -f "$PID_FILE" # stale: the process is gone (kill -9, reboot)
  do_install
  mkdir -p "$DATA_DIR"
  chmod 700 "$S3_DIR"
  local p
  for p in "$PORT" "$MASTER_PORT" "$VOLUME_PORT" "$FILER_PORT"; do
    for q in "$p" $((p + GRPC_OFFSET)); do
      port_open "$q" && die "port 127.0.0.1:$q is already in use by another process (set DOCSUM_S3_PORT to another port)"
    done
  done
  ensure_credentials
  write_config
  rotate_log
  echo "=== $(date -Is) s3.sh start (127.0.0.1:$PORT) ===" >>"$LOG_FILE"
  # One process: master, volume server, filer and the S3 gateway, every one on 127.0.0.1 only. Volumes of
  # 64 MB (the default is 30 GB each), as many as the disk allows.
  spawn "$WEED" server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$DATA_DIR" \
    -master.port="$MASTER_PORT" -master.port.grpc=$((MASTER_PORT + GRPC_OFFSET)) -master.volumeSizeLimitMB=64 \
    -volume.port="$VOLUME_PORT" -volume.port.grpc=$((VOLUME_PORT + GRPC_OFFSET)) -volume.max=0 \
    -filer -filer.port="$FILER_PORT" -filer.port.grpc=$((FILER_PORT + GRPC_OFFSET)) \
    -s3 -s3.port="$PORT" -s3.port.grpc=$((PORT + GRPC_OFFSET)) -s3.config="$CONFIG" ||
    fail_with_log "the server did not start"
  wait_ready "$(cat "$PID_FILE")"
}

wait_ready() {
  await_ready "$1" "the server exited during start-up" \
    "no S3 answer on 127.0.0.1:$PORT after ${START_TIMEOUT}s (still running as pid $1; 'scripts/s3.sh stop' stops it)" \
    answers
}

do_status() {
  local pid
  if pid="$(running_pid)" && answers; then
    echo "s3 running (pid $pid) on 127.0.0.1:$PORT"
    return 0
  fi
  echo "s3 not running"
  return 1
}

do_env() {
  [[ -s "$CREDENTIALS" ]] || die "no credentials yet: run scripts/s3.sh start first"
  echo "AWS_ENDPOINT_URL=http://127.0.0.1:$PORT"
  echo "AWS_REGION=$REGION"
  echo "AWS_ACCESS_KEY_ID=$(access_key)"
  echo "AWS_SECRET_ACCESS_KEY=$(secret_key)"
}

case "${1:-}" in
  install)
    take_lock
    do_install
    ;;
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  env) do_env ;;
  *)
    echo "usage: $0 {install|start|stop|status|env}" >&2
    exit 2
    ;;
esac
