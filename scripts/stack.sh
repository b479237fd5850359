#!/usr/bin/env bash
# The whole docsum stack on one machine: PostgreSQL, Kafka and the five services as processes.
#   scripts/stack.sh up      start whatever is not running (idempotent); returns when the gateway answers
#   scripts/stack.sh down    stop what `up` started
#   scripts/stack.sh infra   start only PostgreSQL and Kafka
#   scripts/stack.sh env     print the environment the services run with (for `eval`)
# Each process writes its pid to .run/<name>.pid and its log to .run/<name>.log (mode 0600). `up` fails
# (exit 1, naming the service and showing what it wrote) when a service it starts dies at start, e.g. on
# a bad setting, and then stops what it had started. PARSER_REPLICAS,
# CHUNKER_REPLICAS, SUMMARIZER_REPLICAS and MERGER_REPLICAS (default 1) start more processes of a
# service: summarizer, summarizer-2, summarizer-3...
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${DOCSUM_STATE_DIR:-$ROOT/.run}
PY=$ROOT/.venv/bin/python
SERVICES=(parser chunker summarizer merger gateway)
mkdir -p "$STATE"

alive() { [ -f "$STATE/$1.pid" ] && kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; }

service_env() {
  DATABASE_URL=${DATABASE_URL:-$("$ROOT/scripts/postgres.sh" url)}
  KAFKA_BOOTSTRAP_SERVERS=${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:${DOCSUM_KAFKA_PORT:-9092}}
  export DATABASE_URL KAFKA_BOOTSTRAP_SERVERS
  if [ -z "${DOCSUM_API_KEYS:-}" ]; then
    # A key for the local owner, made once; the CLI finds it in .run/api-key.
    if [ ! -s "$STATE/api-key" ]; then
      (umask 077 && "$PY" -c 'import secrets; print(secrets.token_urlsafe(32))' > "$STATE/api-key")
    fi
    export DOCSUM_API_KEYS="local=$(cat "$STATE/api-key")"
  fi
  if [ -z "${DOCSUM_ADMIN_KEY:-}" ]; then
    # The operator's key for `docsum keys` on the local stack, made once; the CLI finds it in .run/admin-key.
    if [ ! -s "$STATE/admin-key" ]; then
      (umask 077 && "$PY" -c 'import secrets; print(secrets.token_urlsafe(32))' > "$STATE/admin-key")
    fi
    export DOCSUM_ADMIN_KEY="$(cat "$STATE/admin-key")"
  fi
}

infra() {
  "$ROOT/scripts/postgres.sh" start
  "$ROOT/scripts/kafka.sh" start
}

# The process names of a service: its replicas beyond the first are <service>-2, <service>-3...
replicas() {
  local service=$1 var count i
  var="$(echo "$service" | tr '[:lower:]' '[:upper:]')_REPLICAS"
  count=${!var:-1}
  echo "$service"
  for ((i = 2; i <= count; i++)); do echo "$service-$i"; done
}

# A fingerprint of the code and the configuration the services run with: `up` restarts a running
# service whose code or environment (DOCSUM_*, OPENAI_*, DATABASE_URL, KAFKA_*) changed.
code_hash() {
  {
    (cd "$ROOT" && find shared services -name '*.py' -o -name '*.sql' | sort | xargs cat)
    env | grep -E '^(DOCSUM_|OPENAI_|DATABASE_URL=|KAFKA_)' | grep -vE '^DOCSUM_(API_KEY|GATEWAY_URL)=' | sort
  } | cksum | cut -d' ' -f1
}

# The services this `up` started, and where each one's log stood when it did (to show what it wrote).
STARTED=()
STARTED_AT=$SECONDS
declare -A LOG_OFFSET=()

# Logs are private: a service may log what a client sent. Created 0600, and made so if older.
private_log() {
  local log="$STATE/$1.log"
  (umask 077 && touch "$log")
  chmod 600 "$log"
}

start_service() {
  local name=$1
  private_log "$name"  # also the log of a service already running, made by an older stack.sh
  if alive "$name"; then
    if [ "$(cat "$STATE/$name.code" 2>/dev/null)" = "$CODE" ]; then return; fi
    echo "$name runs older code or settings: restarting it"
    stop_service "$name"
  fi
  echo "$CODE" > "$STATE/$name.code"
  LOG_OFFSET[$name]=$(stat -c %s "$STATE/$name.log")
  # setsid: the service outlives this shell and gets its own process group for `down`.
  setsid nohup "$PY" -m "docsum_${name%%-*}" >>"$STATE/$name.log" 2>&1 < /dev/null &
  echo $! > "$STATE/$name.pid"
  STARTED+=("$name")
  STARTED_AT=$SECONDS
  echo "started $name (pid $!)"
}

# What a service that died at start wrote since it was started (its last lines), on stderr.
report_dead() {
  local name=$1 log="$STATE/$1.log"
  echo "up: $name exited during start-up. The end of what it wrote to $log:" >&2
  tail -c +"$(( ${LOG_OFFSET[$name]:-0} + 1 ))" "$log" 2>/dev/null | tail -n 8 | sed 's/^/  | /' >&2 || true
}

wait_gateway() {
  local url="http://${DOCSUM_GATEWAY_HOST:-127.0.0.1}:${DOCSUM_GATEWAY_PORT:-8000}/healthz"
  for _ in $(seq 1 120); do
    if "$PY" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" "$url" 2>/dev/null; then
      echo "gateway answering at ${url%/healthz}"
      return 0
    fi
    if ! alive gateway; then
      report_dead gateway
      return 1
    fi
    sleep 0.5
  done
  echo "up: the gateway (pid $(cat "$STATE/gateway.pid")) does not answer at $url after 60s;" \
       "the end of $STATE/gateway.log:" >&2
  tail -n 30 "$STATE/gateway.log" | sed 's/^/  | /' >&2 || true
  return 1
}

# Every service this `up` started must still run a moment after its start (a bad setting kills it at once).
check_started() {
  local name ok=0 grace=2
  [ ${#STARTED[@]} -gt 0 ] || return 0
  if (( SECONDS - STARTED_AT < grace )); then sleep $(( grace - (SECONDS - STARTED_AT) )); fi
  for name in "${STARTED[@]}"; do
    [ "$name" = gateway ] && continue  # wait_gateway has reported it
    if ! alive "$name"; then
      report_dead "$name"
      ok=1
    fi
  done
  return $ok
}

stop_service() {
  local name=$1 pid
  [ -f "$STATE/$name.pid" ] || return 0
  pid=$(cat "$STATE/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$pid" 2>/dev/null || true
    echo "stopped $name"
  fi
  rm -f "$STATE/$name.pid"
}

case "${1:-}" in
  up)
    infra
    service_env
    CODE=$(code_hash)
    for service in "${SERVICES[@]}"; do
      for name in $(replicas "$service"); do start_service "$name"; done
    done
    failed=0
    wait_gateway || failed=1
    check_started || failed=1
    if [ $failed -ne 0 ]; then
      # Nothing half-started: stop what this `up` started (what ran before it keeps running).
      for name in "${STARTED[@]}"; do stop_service "$name" >/dev/null; done
      echo "up failed: stopped what it had started (${STARTED[*]}); see the lines above" >&2
      exit 1
    fi
    ;;
  down)
    for pidfile in "$STATE"/*.pid; do  # every service process and replica that `up` started
      name=$(basename "$pidfile" .pid)
      case $name in kafka|postgres) ;; *) stop_service "$name" ;; esac
    done
    "$ROOT/scripts/kafka.sh" stop
    "$ROOT/scripts/postgres.sh" stop
    ;;
  infra) infra ;;
  env)
    service_env
    echo "export DATABASE_URL='$DATABASE_URL' KAFKA_BOOTSTRAP_SERVERS='$KAFKA_BOOTSTRAP_SERVERS'" \
         "DOCSUM_API_KEYS='$DOCSUM_API_KEYS' DOCSUM_ADMIN_KEY='$DOCSUM_ADMIN_KEY'"
    ;;
  *) echo "usage: $0 up|down|infra|env" >&2; exit 2 ;;
esac
