#!/usr/bin/env bash
# Run a real single-node Apache Kafka (KRaft, broker+controller in one JVM) for
# local runs and tests.
#
#   scripts/kafka.sh install   fetch the broker jars from Maven Central (cached)
#   scripts/kafka.sh start     install if needed, start in the background, wait until ready
#   scripts/kafka.sh stop      SIGTERM, wait up to 20s, then SIGKILL; fine if not running
#   scripts/kafka.sh status    exit 0 if running and accepting connections
#   scripts/kafka.sh libs      print the folder of the broker's jars (for DOCSUM_KAFKA_LIBS_DIR)
#
# Environment:
#   DOCSUM_STATE_DIR               state dir (default <repo>/.run)
#   DOCSUM_KAFKA_PORT              client listener port (default 9092)
#   DOCSUM_KAFKA_CONTROLLER_PORT   KRaft controller port (default 9093)
#   DOCSUM_KAFKA_START_TIMEOUT     seconds to wait for readiness (default 90)
#   DOCSUM_KAFKA_LIBS_DIR          the broker's jars (default <state dir>/kafka/libs-<version>); point a
#                                  second broker's state dir at the first's jars to download nothing
#   KAFKA_BOOTSTRAP_SERVERS        if set, an external broker is used: start does nothing
#
# Secured mode (a state dir is formatted in one mode and keeps it):
#   DOCSUM_KAFKA_SASL=1            the client listener is SASL_PLAINTEXT with SCRAM-SHA-512, and every
#                                  request is authorized by ACLs (StandardAuthorizer; none, no access)
#   DOCSUM_KAFKA_ADMIN_PASSWORD    password of the super user `admin` (required with DOCSUM_KAFKA_SASL=1;
#                                  the broker's own inter-broker login uses it too)
#   DOCSUM_KAFKA_SCRAM_USERS       more SCRAM users, created at format time: "docsum=PW,ingest=PW"
#   Passwords: letters, digits and . _ ~ + / - only (they go into the JAAS config as they are). The
#   controller listener stays PLAINTEXT on loopback: it is the broker's own link to its controller, whose
#   unauthenticated principal (User:ANONYMOUS) is therefore a super user; never expose that port.
#
# Kafka is assembled from Maven Central (scripts/kafka/pom.xml) because that is
# the only source of Kafka we can download from; there is no tarball install.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/daemon.sh"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$SCRIPT_DIR")"
STATE_DIR="${DOCSUM_STATE_DIR:-$REPO_DIR/.run}"

KAFKA_VERSION="4.1.1"
PORT="${DOCSUM_KAFKA_PORT:-9092}"
CONTROLLER_PORT="${DOCSUM_KAFKA_CONTROLLER_PORT:-9093}"
START_TIMEOUT="${DOCSUM_KAFKA_START_TIMEOUT:-90}"

KAFKA_DIR="$STATE_DIR/kafka"
# One folder per version: two Kafka versions in one classpath folder would mix
# classes at random.
LIBS_DIR="${DOCSUM_KAFKA_LIBS_DIR:-$KAFKA_DIR/libs-$KAFKA_VERSION}"
LIBS_MARKER="$LIBS_DIR/.complete"
DATA_DIR="$KAFKA_DIR/data"
PROPS="$KAFKA_DIR/server.properties"
CLUSTER_ID_FILE="$KAFKA_DIR/cluster-id"
# The mode the data dir was formatted in (plaintext when absent: formatted before secured mode existed).
SECURITY_FILE="$KAFKA_DIR/security"
SASL="${DOCSUM_KAFKA_SASL:-0}"
ADMIN_PASSWORD="${DOCSUM_KAFKA_ADMIN_PASSWORD:-}"
SCRAM_USERS="${DOCSUM_KAFKA_SCRAM_USERS:-}"
PID_FILE="$STATE_DIR/kafka.pid"
LOG_FILE="$STATE_DIR/kafka.log"
LOCK_FILE="$STATE_DIR/kafka.lock"
POM="$SCRIPT_DIR/kafka/pom.xml"
LOG4J_CONFIG="$SCRIPT_DIR/kafka/log4j2.properties"

# Logged once by KafkaRaftServer when both the controller and the broker are up
# (the broker is unfenced by then, so clients can create topics and join groups).
READY_LINE="Kafka Server started"
START_MARKER="kafka.sh start"
START_OFFSET="" # where this start's output begins in the log

JAVA_OPTS=(
  -Xms256m -Xmx512m
  -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExplicitGCInvokesConcurrent
  # Only the C1 compiler: the JVM starts faster and uses less CPU while warming
  # up, which matters more on a 2-core test machine than peak throughput.
  -XX:TieredStopAtLevel=1
  -XX:+ExitOnOutOfMemoryError
  -Djava.awt.headless=true
  "-Dlog4j2.configurationFile=$LOG4J_CONFIG"
)

DAEMON_NAME="kafka.sh"

# The pid of our broker, if it is running.
running_pid() { pid_file_process "kafka.Kafka $PROPS"; }

ensure_tools() {
  local missing=()
  command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || missing+=(maven)
  if ((${#missing[@]})); then
    apt_install kafka.sh --recommends "${missing[@]}" || exit 1
  fi
  # Kafka 4.x brokers need Java 17+.
  local major
  major="$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
  [[ "${major%%.*}" -ge 17 ]] 2>/dev/null || die "Kafka $KAFKA_VERSION needs Java 17+, found '${major:-unknown}'"
}

do_install() {
  if [[ -f "$LIBS_MARKER" ]]; then
    return 0
  fi
  ensure_tools
  mkdir -p "$KAFKA_DIR"
  log "fetching Kafka $KAFKA_VERSION jars from Maven Central into $LIBS_DIR"
  # Copy into a temporary folder and rename at the end, so an interrupted
  # download never leaves a half-filled classpath that looks installed.
  local tmp="$LIBS_DIR.tmp"
  rm -rf "$tmp"
  # mvn's output goes to a file (even -q prints stray colour codes) and is shown on failure.
  local mvn_log="$KAFKA_DIR/mvn.log"
  if ! (cd "$SCRIPT_DIR/kafka" &&
    mvn -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
      -DoutputDirectory="$tmp" -DincludeScope=runtime >"$mvn_log" 2>&1); then
    tail -n 40 "$mvn_log" >&2
    die "mvn could not fetch the Kafka jars (full output: $mvn_log)"
  fi
  ls "$tmp"/kafka_2.13-"$KAFKA_VERSION".jar >/dev/null 2>&1 || die "kafka_2.13-$KAFKA_VERSION.jar missing after mvn"
  rm -rf "$LIBS_DIR"
  mv "$tmp" "$LIBS_DIR"
  touch "$LIBS_MARKER"
}

run_java_tool() {
  # Short-lived JVM for StorageTool (random-uuid, format); same classpath and
  # logging config as the broker.
  java -Xmx256m -XX:TieredStopAtLevel=1 "-Dlog4j2.configurationFile=$LOG4J_CONFIG" \
    -cp "$LIBS_DIR/*" "$@"
}

security_mode() { if [[ "$SASL" == 1 ]]; then echo sasl; else echo plaintext; fi; }

SAFE_SECRET='^[A-Za-z0-9._~+/-]+$'

check_sasl_settings() {
  [[ "$SASL" == 1 ]] || return 0
  [[ -n "$ADMIN_PASSWORD" ]] || die "DOCSUM_KAFKA_SASL=1 needs DOCSUM_KAFKA_ADMIN_PASSWORD (the super user admin's password)"
  [[ "$ADMIN_PASSWORD" =~ $SAFE_SECRET ]] || die "DOCSUM_KAFKA_ADMIN_PASSWORD: use only letters, digits and . _ ~ + / -"
  local pair
  for pair in ${SCRAM_USERS//,/ }; do
    [[ "$pair" == *=* && "${pair%%=*}" =~ ^[A-Za-z0-9._-]+$ && "${pair#*=}" =~ $SAFE_SECRET ]] ||
      die "DOCSUM_KAFKA_SCRAM_USERS: '${pair%%=*}=...' is not name=password (letters, digits and . _ ~ + / - only)"
  done
}

# The client listener and, in secured mode, SASL/SCRAM and the authorizer.
listener_config() {
  if [[ "$SASL" != 1 ]]; then
    cat <<EOF
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
EOF
    return 0
  fi
  cat <<EOF
listeners=SASL_PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_PLAINTEXT
listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$ADMIN_PASSWORD";
# Every request is checked against the ACLs kept in the metadata log; without one, nothing is allowed.
# admin is the operator (and the broker's own login); ANONYMOUS is the broker talking to its
# controller over the loopback PLAINTEXT controller listener.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:ANONYMOUS
allow.everyone.if.no.acl.found=false
EOF
}

write_config() {
  # Rewritten on every start so that port changes take effect; node id and
  # cluster id never change, so the data dir stays valid. Private: in secured
  # mode it holds the admin password.
  (umask 077 && : >"$PROPS")
  chmod 600 "$PROPS"
  cat >"$PROPS" <<EOF
# Generated by scripts/kafka.sh on every start; edit the script, not this file.
process.roles=broker,controller
node.id=1
$(listener_config)
# Static quorum of one voter: storage format needs no --standalone.
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
log.dirs=$DATA_DIR

# Single node: every internal topic with one replica.
default.replication.factor=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Fewer internal partitions: quicker first group join / first transaction.
offsets.topic.num.partitions=10
transaction.state.log.num.partitions=10

# Topics are created explicitly by the services (admin client).
auto.create.topics.enable=false
num.partitions=3

# Fast group joins for classic-protocol consumers (aiokafka): no initial
# rebalance delay, and allow short session timeouts in tests.
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
# Same for KIP-848 (consumer protocol) groups, should a client use them.
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=1000
group.consumer.min.session.timeout.ms=3000
group.consumer.session.timeout.ms=10000

# Broker and controller share one JVM, so only a stall of the whole JVM can
# miss heartbeats; but on a loaded 2-core machine (load average 15) stalls of
# over 3s happen, and a fenced broker refuses every request ("larger than
# available brokers: 0") until it re-registers. 10s rides those out; the price
# is that after a kill -9 the restarted broker waits for the old registration's
# session to end (up to 10s) before it can register.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=10000

# Small machine: few threads, small retention.
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.retention.hours=24
EOF
}

ensure_formatted() {
  # meta.properties marks a formatted log dir. A dir without it holds nothing
  # of value (e.g. an interrupted format), so start it over.
  if [[ -f "$DATA_DIR/meta.properties" ]]; then
    local formatted
    formatted="$(cat "$SECURITY_FILE" 2>/dev/null || echo plaintext)"
    [[ "$formatted" == "$(security_mode)" ]] ||
      die "$DATA_DIR was formatted for a $formatted broker, not a $(security_mode) one: use another DOCSUM_STATE_DIR (or delete $DATA_DIR)"
    return 0
  fi
  if [[ ! -s "$CLUSTER_ID_FILE" ]]; then
    # Log lines share stdout with the id: keep only the 22-char base64url uuid.
    run_java_tool kafka.tools.StorageTool random-uuid | grep -E '^[A-Za-z0-9_-]{22}$' >"$CLUSTER_ID_FILE.tmp" ||
      die "could not generate a cluster id"
    mv "$CLUSTER_ID_FILE.tmp" "$CLUSTER_ID_FILE"
  fi
  rm -rf "$DATA_DIR"
  log "formatting $DATA_DIR (cluster id $(cat "$CLUSTER_ID_FILE"))"
  # SCRAM credentials live in the metadata log: the first ones are written by the format itself (they
  # are on that short-lived JVM's command line while it runs).
  local scram=() pair
  if [[ "$SASL" == 1 ]]; then
    scram+=(--add-scram "SCRAM-SHA-512=[name=admin,password=$ADMIN_PASSWORD]")
    for pair in ${SCRAM_USERS//,/ }; do
      scram+=(--add-scram "SCRAM-SHA-512=[name=${pair%%=*},password=${pair#*=}]")
    done
  fi
  run_java_tool kafka.tools.StorageTool format -t "$(cat "$CLUSTER_ID_FILE")" -c "$PROPS" "${scram[@]}" >>"$LOG_FILE" 2>&1 ||
    fail_with_log "storage format failed"
  security_mode >"$SECURITY_FILE"
}

# Replaces daemon.sh's: the cause is usually an ERROR line followed by a long shutdown sequence,
# so show the first errors of this start as well as the tail.
fail_with_log() {
  log "error: $1"
  if [[ -n "$START_OFFSET" ]]; then
    local errors
    errors="$(tail -c +"$((START_OFFSET + 1))" "$LOG_FILE" | grep -E -A 3 '^\[[^]]*\] (ERROR|FATAL) ' | head -n 16 || true)"
    [[ -n "$errors" ]] && printf 'kafka.sh: first errors in this start:\n%s\n' "$errors" >&2
  fi
  show_log_tail 30
  exit 1
}

do_start() {
  if [[ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ]]; then
    log "KAFKA_BOOTSTRAP_SERVERS is set: using the broker at $KAFKA_BOOTSTRAP_SERVERS, not starting one"
    return 0
  fi
  take_lock
  local pid
  if pid="$(running_pid)"; then
    if port_open "$PORT"; then
      log "already running (pid $pid) on 127.0.0.1:$PORT"
      return 0
    fi
    # Started but not ready yet: wait, reading the log from that start's marker.
    local marker
    marker="$(grep -b -F "$START_MARKER" "$LOG_FILE" | tail -n 1 | cut -d: -f1 || true)"
    START_OFFSET="${marker:-0}"
    wait_ready "$pid" "$START_OFFSET"
    return 0
  fi
  rm -f "$PID_FILE" # stale: the process is gone (kill -9, reboot)

  check_sasl_settings
  do_install
  mkdir -p "$KAFKA_DIR"
  # A port still taken means another program (or another state dir's broker).
  # Retry briefly: right after kill -9 the dying JVM can hold it for a moment.
  local p i setting
  for p in "$PORT" "$CONTROLLER_PORT"; do
    for ((i = 0; i < 25; i++)); do
      port_open "$p" || continue 2
      sleep 0.2
    done
    setting=DOCSUM_KAFKA_PORT
    [[ "$p" == "$CONTROLLER_PORT" ]] && setting=DOCSUM_KAFKA_CONTROLLER_PORT
    die "port 127.0.0.1:$p is already in use by another process (set $setting to another port)"
  done
  write_config

  rotate_log
  touch "$LOG_FILE"
  ensure_formatted
  # Readiness is judged only from what this start appends to the log.
  local offset
  offset="$(stat -c %s "$LOG_FILE")"
  echo "=== $(date -Is) $START_MARKER (Kafka $KAFKA_VERSION, 127.0.0.1:$PORT) ===" >>"$LOG_FILE"
  START_OFFSET="$offset"

  spawn java "${JAVA_OPTS[@]}" -cp "$LIBS_DIR/*" kafka.Kafka "$PROPS" || fail_with_log "broker did not start"
  wait_ready "$(cat "$PID_FILE")" "$offset"
}

# Ready: this start (from byte OFFSET of the log) logged READY_LINE and the client port accepts connections.
started_since() {
  tail -c +"$(($1 + 1))" "$LOG_FILE" | grep -F "$READY_LINE" >/dev/null && port_open "$PORT"
}

wait_ready() {
  await_ready "$1" "broker exited during start-up" \
    "broker not ready after ${START_TIMEOUT}s (still running as pid $1; 'scripts/kafka.sh stop' to stop it)" \
    started_since "$2"
}

do_status() {
  if [[ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ]]; then
    # External broker: check that its first address accepts connections.
    local first="${KAFKA_BOOTSTRAP_SERVERS%%,*}"
    first="${first#*://}"
    if timeout 2 bash -c "exec 3<>/dev/tcp/${first%:*}/${first##*:}" 2>/dev/null; then
      echo "external broker $first is reachable"
      return 0
    fi
    echo "external broker $first is not reachable"
    return 1
  fi
  local pid
  if pid="$(running_pid)" && port_open "$PORT"; then
    echo "kafka running (pid $pid) on 127.0.0.1:$PORT"
    return 0
  fi
  echo "kafka not running"
  return 1
}

case "${1:-}" in
  install)
    take_lock
    do_install
    ;;
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  libs) echo "$LIBS_DIR" ;;
  *)
    echo "usage: $0 {install|start|stop|status|libs}" >&2
    exit 2
    ;;
esac
