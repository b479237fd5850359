#!/usr/bin/env bash
# The whole docsum stack on one machine: PostgreSQL, Kafka and the five services as processes.
#   scripts/stack.sh up      start whatever is not running (idempotent); returns when the gateway answers
#   scripts/stack.sh down    stop what `up` started
#   scripts/stack.sh infra   start only PostgreSQL and Kafka
#   scripts/stack.sh env     print the environment the services run with (for `eval`)
#   scripts/stack.sh observe Debian's Prometheus with deploy/observability/alerts.yml, scraping the running
#                            stack's processes; prints its URL (`down` stops it with the rest)
#   scripts/stack.sh with-infra CMD...   run CMD with PostgreSQL and Kafka running, then stop whichever of
#                            the two this started (what ran before keeps running): `make test`
# Each process writes its pid to .run/<name>.pid and its log to .run/<name>.log (mode 0600). A pid file
# whose process is gone — killed, a zombie not yet reaped, or its pid reused by another program — is
# stale: `up` starts that process again, and no signal goes to the pid (runs, alive). `up` fails
# (exit 1, naming the service and showing what it wrote) when a service it starts dies at start, e.g. on
# a bad setting, and then stops what it had started. Every process serves /healthz, /readyz and /metrics on
# 127.0.0.1, from DOCSUM_HEALTH_PORT_BASE (8100) up: parser, chunker, summarizer, merger, gateway, then
# the extra replicas; `up` ends by printing each one's /metrics URL once it answers (base 0: no such port). PARSER_REPLICAS,
# CHUNKER_REPLICAS, SUMMARIZER_REPLICAS and MERGER_REPLICAS (default 1) start more processes of a
# service: summarizer, summarizer-2, summarizer-3...
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${DOCSUM_STATE_DIR:-$ROOT/.run}
PY=$ROOT/.venv/bin/python
SERVICES=(parser chunker summarizer merger gateway)
mkdir -p "$STATE"

# What the command line of process NAME holds, and no other program's does.
program() {
  case $1 in
    prometheus) echo "--config.file=$STATE/prometheus/prometheus.yml" ;;
    *) echo "-m docsum_${1%%-*}" ;;
  esac
}

# Process PID runs and is ours (its command line holds WANT). kill -0 is not enough: it answers for a
# process killed a moment ago that its parent has not reaped yet (a zombie: a supervisor that restarts at
# once meets one), and once reaped, its pid may be given to another program.
runs() {
  local pid=$1 want=$2 stat fields cmdline
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  [ -d /proc/self ] || return 0  # no /proc (not Linux): kill -0 is all there is to ask
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  read -r -a fields <<< "${stat##*)}"  # the state follows the command's name, which may hold spaces and ')'
  case ${fields[0]:-} in Z | X | x | "") return 1 ;; esac
  cmdline=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) || return 1
  [[ " $cmdline" == *" $want "* ]]
}

# NAME's process runs. A pid file naming no such process (killed, a zombie, or its pid reused) is stale:
# it is removed, so `up` starts NAME again instead of waiting on a process that is gone.
alive() {
  local pidfile="$STATE/$1.pid"
  [ -f "$pidfile" ] || return 1
  runs "$(cat "$pidfile")" "$(program "$1")" && return 0
  rm -f "$pidfile" "$STATE/$1.health"
  return 1
}

service_env() {
  DATABASE_URL=${DATABASE_URL:-$("$ROOT/scripts/postgres.sh" url)}
  KAFKA_BOOTSTRAP_SERVERS=${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:${DOCSUM_KAFKA_PORT:-9092}}
  export DATABASE_URL KAFKA_BOOTSTRAP_SERVERS
  # Each process's health port is DOCSUM_HEALTH_PORT_BASE + its place in all_names (exported, so a change
  # of base restarts the services: it is part of the code hash).
  export DOCSUM_HEALTH_PORT_BASE=${DOCSUM_HEALTH_PORT_BASE:-8100}
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

# Every process of the stack, in the order of their health ports: one of each service (so the first five
# ports never move), then the extra replicas.
all_names() {
  local service
  printf '%s\n' "${SERVICES[@]}"
  for service in "${SERVICES[@]}"; do replicas "$service" | tail -n +2; done
}

# A fingerprint of the code and the configuration the services run with: `up` restarts a running
# service whose code or environment (DOCSUM_*, OPENAI_*, DATABASE_URL, KAFKA_*) changed.
code_hash() {
  {
    (cd "$ROOT" && find shared llm services -name '*.py' -o -name '*.sql' | sort | xargs cat)
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
  local port=${HEALTH_PORT[$name]:-}
  if [ -n "$port" ]; then echo "$port" > "$STATE/$name.health"; else rm -f "$STATE/$name.health"; fi
  LOG_OFFSET[$name]=$(stat -c %s "$STATE/$name.log")
  # setsid: the service outlives this shell and gets its own process group for `down`.
  DOCSUM_HEALTH_PORT=$port setsid nohup "$PY" -m "docsum_${name%%-*}" >>"$STATE/$name.log" 2>&1 < /dev/null &
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

# bash's /dev/tcp: no client tools needed; timeout guards against a hung connect.
port_taken() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

answers() { "$PY" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" "$1" 2>/dev/null; }

# Once every running process's /metrics answers (each serves it once connected to PostgreSQL), their URLs.
print_metrics() {
  local name port url waiting deadline=$((SECONDS + 60))
  echo "metrics of each process (/healthz and /readyz on the same port):"
  while read -r name; do
    alive "$name" && [ -s "$STATE/$name.health" ] || continue
    port=$(cat "$STATE/$name.health")
    url="http://127.0.0.1:$port/metrics"
    waiting=1
    while ((SECONDS < deadline)); do
      if answers "$url"; then waiting=0; break; fi
      alive "$name" || break
      sleep 0.3
    done
    if ((waiting)); then
      printf '  %-13s %s  (not answering: see %s)\n' "$name" "$url" "$STATE/$name.log"
    else
      printf '  %-13s %s\n' "$name" "$url"
    fi
  done < <(all_names)
  echo "make observe: Prometheus scraping them, with docsum's alert rules"
}

# Debian's Prometheus with the shipped alert rules, scraping every running process of the stack.
observe() {
  local port=${DOCSUM_PROMETHEUS_PORT:-9090} dir="$STATE/prometheus" prometheus name config
  local scrape=${DOCSUM_PROMETHEUS_SCRAPE_S:-5}  # seconds between scrapes (and rule evaluations)
  [[ $scrape =~ ^[1-9][0-9]*$ ]] || { echo "observe: DOCSUM_PROMETHEUS_SCRAPE_S must be a whole number of seconds, not '$scrape'" >&2; exit 1; }
  prometheus=$("$ROOT/scripts/prometheus.sh" bin prometheus)
  mkdir -p "$dir/data"
  config="$dir/prometheus.yml"
  {
    echo "# Written by scripts/stack.sh observe: the local stack's processes, on their health ports."
    echo "global: {scrape_interval: ${scrape}s, evaluation_interval: ${scrape}s}"
    echo "rule_files: ['$ROOT/deploy/observability/alerts.yml']"
    echo "scrape_configs:"
    echo "  - job_name: docsum-local"
    echo "    static_configs:"
    while read -r name; do
      alive "$name" && [ -s "$STATE/$name.health" ] || continue
      echo "      - {targets: ['127.0.0.1:$(cat "$STATE/$name.health")'], labels: {app: ${name%%-*}, process: $name}}"
    done < <(all_names)
  } > "$config.new"
  mv "$config.new" "$config"
  if alive prometheus; then
    kill -HUP "$(cat "$STATE/prometheus.pid")"  # Prometheus reads its configuration again on SIGHUP
  else
    port_taken "$port" && { echo "observe: port 127.0.0.1:$port is already in use by another process (set DOCSUM_PROMETHEUS_PORT to another port)" >&2; exit 1; }
    private_log prometheus
    setsid nohup "$prometheus" --config.file="$config" --storage.tsdb.path="$dir/data" \
      --storage.tsdb.retention.time=2d --web.listen-address="127.0.0.1:$port" \
      >>"$STATE/prometheus.log" 2>&1 < /dev/null &
    echo $! > "$STATE/prometheus.pid"
    echo "$port" > "$STATE/prometheus.port"
  fi
  port=$(cat "$STATE/prometheus.port")
  for _ in $(seq 1 100); do
    if answers "http://127.0.0.1:$port/-/ready"; then
      echo "Prometheus at http://127.0.0.1:$port (targets: /targets, alerts: /alerts); make down stops it"
      return 0
    fi
    alive prometheus || break
    sleep 0.3
  done
  echo "observe: Prometheus did not become ready; the end of $STATE/prometheus.log:" >&2
  tail -n 15 "$STATE/prometheus.log" | sed 's/^/  | /' >&2 || true
  exit 1
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

# Signals go only to a process that runs and is ours (runs): never to a zombie, nor to another program
# that got a dead service's pid.
stop_service() {
  local name=$1 pid want
  [ -f "$STATE/$name.pid" ] || return 0
  pid=$(cat "$STATE/$name.pid")
  want=$(program "$name")
  if runs "$pid" "$want"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do runs "$pid" "$want" || break; sleep 0.25; done
    if runs "$pid" "$want"; then kill -KILL "$pid" 2>/dev/null || true; fi
    echo "stopped $name"
  fi
  rm -f "$STATE/$name.pid" "$STATE/$name.health"
}

case "${1:-}" in
  up)
    infra
    service_env
    CODE=$(code_hash)
    declare -A HEALTH_PORT=()
    i=0
    if [ "$DOCSUM_HEALTH_PORT_BASE" != 0 ]; then
      while read -r name; do HEALTH_PORT[$name]=$((DOCSUM_HEALTH_PORT_BASE + i)); i=$((i + 1)); done < <(all_names)
    fi
    # A port taken by another program stops `up` before it starts anything, in one line naming the setting.
    taken=()
    for name in "${!HEALTH_PORT[@]}"; do
      alive "$name" || ! port_taken "${HEALTH_PORT[$name]}" ||
        taken+=("127.0.0.1:${HEALTH_PORT[$name]} ($name's health port) is already in use by another process (set DOCSUM_HEALTH_PORT_BASE to another range)")
    done
    alive gateway || ! port_taken "${DOCSUM_GATEWAY_PORT:-8000}" ||
      taken+=("127.0.0.1:${DOCSUM_GATEWAY_PORT:-8000} is already in use by another process (set DOCSUM_GATEWAY_PORT to another port)")
    if [ ${#taken[@]} -gt 0 ]; then
      printf 'up: %s\n' "${taken[@]}" >&2
      exit 1
    fi
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
    [ "$DOCSUM_HEALTH_PORT_BASE" = 0 ] || print_metrics
    ;;
  observe) observe ;;
  with-infra)
    shift
    # Which of the two ran before: those keep running. One named by DATABASE_URL or KAFKA_BOOTSTRAP_SERVERS
    # is not ours to stop.
    ran_pg=0 ran_kafka=0
    if [ -n "${DATABASE_URL:-}" ] || "$ROOT/scripts/postgres.sh" status >/dev/null 2>&1; then ran_pg=1; fi
    if [ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ] || "$ROOT/scripts/kafka.sh" status >/dev/null 2>&1; then ran_kafka=1; fi
    stop_started() {
      ((ran_kafka)) || "$ROOT/scripts/kafka.sh" stop
      ((ran_pg)) || "$ROOT/scripts/postgres.sh" stop
    }
    trap stop_started EXIT
    trap 'exit 130' INT TERM  # Ctrl-C too: the EXIT trap stops what was started
    infra
    status=0
    "$@" || status=$?
    exit $status
    ;;
  down)
    # Every service process and replica that `up` started, side by side (each drains its work in flight
    # on SIGTERM, for a second or more: one after another, their drains added up).
    for pidfile in "$STATE"/*.pid; do
      name=$(basename "$pidfile" .pid)
      case $name in kafka|postgres) ;; *) stop_service "$name" & ;; esac
    done
    wait
    "$ROOT/scripts/s3.sh" stop  # started by the tests that store blobs in S3, if they ran
    "$ROOT/scripts/kafka.sh" stop
    "$ROOT/scripts/postgres.sh" stop
    ;;
  infra) infra ;;
  env)
    service_env
    echo "export DATABASE_URL='$DATABASE_URL' KAFKA_BOOTSTRAP_SERVERS='$KAFKA_BOOTSTRAP_SERVERS'" \
         "DOCSUM_API_KEYS='$DOCSUM_API_KEYS' DOCSUM_ADMIN_KEY='$DOCSUM_ADMIN_KEY'"
    ;;
  *) echo "usage: $0 up|down|infra|env|observe|with-infra CMD..." >&2; exit 2 ;;
esac
