# shellcheck shell=bash
# Sourced by the scripts that run a private server in the background (kafka.sh, postgres.sh, s3.sh): messages,
# the whole-command lock, the pid checks, the start in a session of its own, the wait for readiness, the stop.
#
# The sourcing script sets, before it calls any of these: DAEMON_NAME (its name in messages), STATE_DIR,
# LOCK_FILE, PID_FILE, LOG_FILE, PORT and START_TIMEOUT. It defines running_pid (print the server's pid, or
# fail when it is not running) and may define, after sourcing, its own stop_server (postgres.sh: pg_ctl) or
# fail_with_log (kafka.sh: the first errors of this start too).

log() { echo "$DAEMON_NAME: $*" >&2; }
die() { log "error: $*"; exit 1; }

show_log_tail() {
  log "last lines of $LOG_FILE:"
  tail -n "$1" "$LOG_FILE" >&2 2>/dev/null || true
}

# The cause of a failed start or stop is usually at the end of the server's log.
fail_with_log() {
  log "error: $1"
  show_log_tail "${LOG_TAIL_LINES:-30}"
  exit 1
}

# Whole-command lock: make (or two test runs) may call start/stop concurrently.
take_lock() {
  mkdir -p "$STATE_DIR"
  exec 9>"$LOCK_FILE"
  flock 9
}

# kill -0 is not enough: on machines whose init reaps late (containers, VMs with
# a minimal pid 1) a dead process stays a zombie for a while and kill -0 still
# succeeds. A zombie counts as dead.
pid_alive() {
  local state
  state="$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" || return 1
  [[ -n "$state" && "$state" != Z ]]
}

port_open() {
  # bash's /dev/tcp: no client tools needed. timeout guards against a hung connect.
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# Prints the pid in PID_FILE if that process is alive and its command line contains $1. The command line,
# not just that the pid exists: after kill -9 or a reboot the pid may belong to something else.
pid_file_process() {
  [[ -s "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] && pid_alive "$pid" || return 1
  # No grep -q in pipes: it exits at the first match, the writer gets SIGPIPE
  # and pipefail turns the match into a failure.
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -F -- "$1" >/dev/null || return 1
  echo "$pid"
}

# Keep one old log around instead of letting it grow without bound (only while the server is stopped: a
# running one keeps writing to the file it opened).
rotate_log() {
  if [[ -f "$LOG_FILE" ]] && (($(stat -c %s "$LOG_FILE") > 20 * 1024 * 1024)); then
    mv -f "$LOG_FILE" "$LOG_FILE.1"
  fi
}

# Starts the command given in the background, its output appended to LOG_FILE; fails if it wrote no pid
# within 5 s. setsid: its own session, so the server outlives the calling shell/make and gets no SIGHUP or
# terminal signals. The wrapper writes its own pid and then execs the command, so PID_FILE holds the
# server's pid whether or not setsid forked. Lock fd 9 is closed for the server, otherwise it would hold
# the lock for its whole life.
spawn() {
  # shellcheck disable=SC2016 # $$ and $@ are for the inner bash
  setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$PID_FILE" "$@" \
    </dev/null >>"$LOG_FILE" 2>&1 9>&- &
  local i
  for ((i = 0; i < 50; i++)); do
    [[ -s "$PID_FILE" ]] && return 0
    sleep 0.1
  done
  return 1
}

# await_ready PID EXITED TIMED_OUT CHECK...: runs CHECK every 0.2 s until it succeeds, up to START_TIMEOUT
# seconds. Fails with the log and the message EXITED if the process PID exits first, TIMED_OUT at the end.
await_ready() {
  local pid="$1" exited="$2" timed_out="$3" start=$SECONDS
  shift 3
  while ((SECONDS - start < START_TIMEOUT)); do
    if ! pid_alive "$pid"; then
      rm -f "$PID_FILE"
      fail_with_log "$exited"
    fi
    if "$@"; then
      log "ready on 127.0.0.1:$PORT (pid $pid, ${SECONDS}s)"
      return 0
    fi
    sleep 0.2
  done
  fail_with_log "$timed_out"
}

# SIGTERM = controlled shutdown: logs are flushed and the next start needs no recovery. SIGKILL after 20 s,
# then up to 5 s more for the process to be gone.
stop_server() {
  local pid="$1" i
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 200; i++)); do
    pid_alive "$pid" || break
    sleep 0.1
  done
  if pid_alive "$pid"; then
    log "still running after 20s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      pid_alive "$pid" || break
      sleep 0.1
    done
  fi
}

do_stop() {
  take_lock
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$PID_FILE"
    log "not running"
    return 0
  fi
  log "stopping pid $pid"
  stop_server "$pid"
  rm -f "$PID_FILE"
  log "stopped"
}
