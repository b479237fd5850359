#!/usr/bin/env bash
# Run a real, private PostgreSQL cluster for local runs and tests.
#
#   scripts/postgres.sh install   make sure the server binaries exist (Debian's postgresql package)
#   scripts/postgres.sh start     install if needed, init the cluster once, start, wait until ready
#   scripts/postgres.sh stop      fast shutdown, wait up to 20s, then harder; fine if not running
#   scripts/postgres.sh status    exit 0 if running and accepting connections
#   scripts/postgres.sh url       print the connection URL
#
# Environment:
#   DOCSUM_STATE_DIR   state dir (default <repo>/.run)
#   DOCSUM_PG_PORT     TCP port on 127.0.0.1 (default 5433, so a system cluster on 5432 never clashes)
#   DATABASE_URL       if set, an external database is used: start does nothing, url prints it
#
# The cluster is private: its own data dir, its own socket dir, its own port.
# It never touches a system cluster the Debian package may have created.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib/daemon.sh"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$SCRIPT_DIR")"
STATE_DIR="${DOCSUM_STATE_DIR:-$REPO_DIR/.run}"

PORT="${DOCSUM_PG_PORT:-5433}"
# Where Debian's postgresql packages put their programs (one folder per major version).
PG_LIB_ROOT="${DOCSUM_PG_LIB_ROOT:-/usr/lib/postgresql}"
DB_USER="docsum"
DB_NAME="docsum"

PG_DIR="$STATE_DIR/postgres"
DATA_DIR="$PG_DIR/data"
SOCK_DIR="$PG_DIR/sock"
PW_FILE="$PG_DIR/password"
PID_FILE="$STATE_DIR/postgres.pid"
LOG_FILE="$STATE_DIR/postgres.log"
LOCK_FILE="$STATE_DIR/postgres.lock"
DAEMON_NAME="postgres.sh"
LOG_TAIL_LINES=40

is_root() { [[ $EUID -eq 0 ]]; }

# initdb and postgres refuse to run as root: as root, run the server side as the
# `postgres` system user that Debian's package creates; otherwise as ourselves.
# `cd /` because the caller's cwd (e.g. /root) may not be readable by postgres.
as_pg() {
  if is_root; then
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

# --- finding the binaries ---------------------------------------------------

# Major version printed by `initdb --version` ("initdb (PostgreSQL) 15.18" -> 15).
bin_major() { "$1/initdb" --version 2>/dev/null | awk '{print $NF}' | cut -d. -f1; }

# Candidate bin dirs: the one of an initdb in PATH (Debian does not put one
# there, but other installs do) and every /usr/lib/postgresql/*/bin.
candidate_bindirs() {
  local p d
  if p="$(command -v initdb 2>/dev/null)"; then
    dirname "$(readlink -f "$p")"
  fi
  for d in "$PG_LIB_ROOT"/*/bin; do
    [[ -x "$d/initdb" ]] && echo "$d"
  done
  return 0
}

# Sets PG_BIN. An existing data dir can only be run by its own major version,
# so that wins; otherwise the newest version found.
find_bindir() {
  PG_BIN=""
  local want="" d best="" best_v=0 v
  [[ -f "$DATA_DIR/PG_VERSION" ]] && want="$(cat "$DATA_DIR/PG_VERSION")"
  while read -r d; do
    [[ -n "$d" && -x "$d/pg_ctl" && -x "$d/postgres" ]] || continue
    v="$(bin_major "$d")"
    [[ "$v" =~ ^[0-9]+$ ]] || continue
    if [[ -n "$want" ]]; then
      [[ "$v" == "$want" ]] && { PG_BIN="$d"; return 0; }
    elif ((v > best_v)); then
      best="$d" best_v="$v"
    fi
  done < <(candidate_bindirs)
  if [[ -n "$want" ]]; then
    # Binaries exist but of another major version: do not guess, say so.
    [[ -n "$(candidate_bindirs)" ]] &&
      die "$DATA_DIR was created by PostgreSQL $want, which is not installed (install postgresql-$want, or delete $PG_DIR to start over)"
    return 1
  fi
  [[ -n "$best" ]] && PG_BIN="$best"
  [[ -n "$PG_BIN" ]]
}

do_install() {
  if find_bindir; then
    :
  elif is_root; then
    apt_install postgres.sh --recommends postgresql || exit 1
    find_bindir || die "postgresql installed, but no initdb found under $PG_LIB_ROOT/*/bin"
  else
    die "PostgreSQL server binaries (initdb, pg_ctl) not found; install them as root: apt-get install -y postgresql"
  fi
  if is_root && ! id -u postgres >/dev/null 2>&1; then
    die "running as root needs the 'postgres' system user (created by Debian's postgresql package): apt-get install -y postgresql"
  fi
  # psql is needed for creating the database; Debian ships it in the same bin dir.
  [[ -x "$PG_BIN/psql" ]] || die "psql not found in $PG_BIN (apt-get install -y postgresql-client)"
}

# --- the running server -----------------------------------------------------

# Pid of the postmaster running on OUR data dir, if any. postmaster.pid alone is
# not proof: after kill -9 it is stale and its pid may have been reused. A live
# postmaster always has its data dir as working directory, so check that.
running_pid() {
  local pid
  [[ -f "$DATA_DIR/postmaster.pid" ]] || return 1
  pid="$(head -n 1 "$DATA_DIR/postmaster.pid" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" == "$(readlink -f "$DATA_DIR")" ]] || return 1
  echo "$pid"
}

# Processes (other than a live postmaster) whose cwd is our data dir: backends
# and auxiliary processes left behind when the postmaster was killed. While they
# hold the old shared memory, a new postmaster refuses to start.
orphan_pids() {
  local real d pid
  real="$(readlink -f "$DATA_DIR")"
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    [[ "$(readlink "$d/cwd" 2>/dev/null)" == "$real" ]] && echo "$pid"
  done
  return 0
}

ready_tcp() { "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -d "$DB_NAME" -U "$DB_USER"; }

sql_socket() {
  # Superuser over the private unix socket (trust auth; only the owner can reach the dir).
  as_pg "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCK_DIR" -p "$PORT" -U "$DB_USER" -d postgres -tA "$@"
}

# --- setup ------------------------------------------------------------------

prepare_dirs() {
  # Unix socket paths are limited to 107 bytes; a deep checkout would break it.
  local sock="$SOCK_DIR/.s.PGSQL.$PORT"
  ((${#sock} <= 107)) || die "socket path $sock is too long for a unix socket; set DOCSUM_STATE_DIR to a shorter path"
  mkdir -p "$PG_DIR"
  chmod 755 "$PG_DIR" # postgres must traverse it; the password file inside is 600
  touch "$LOG_FILE"
  if is_root; then
    # Data and socket dirs belong to the server's user. `install -d` also fixes
    # owner/mode of dirs left by an earlier non-root run.
    install -d -o postgres -g postgres -m 700 "$DATA_DIR" "$SOCK_DIR"
    chown postgres:postgres "$LOG_FILE" # pg_ctl -l opens it as postgres
    if ! as_pg test -x "$DATA_DIR" -a -w "$DATA_DIR"; then
      # Name the first directory from the top that postgres cannot enter.
      local d="" part
      local -a parts
      IFS=/ read -ra parts <<<"${DATA_DIR#/}"
      for part in "${parts[@]}"; do
        d="$d/$part"
        as_pg test -x "$d" || die "the postgres user cannot reach $DATA_DIR: $d is not traversable for it (chmod o+x $d, or set DOCSUM_STATE_DIR to a path under traversable directories)"
      done
      die "the postgres user cannot use $DATA_DIR"
    fi
  else
    mkdir -p "$DATA_DIR" "$SOCK_DIR"
    chmod 700 "$DATA_DIR" "$SOCK_DIR"
  fi
}

NEW_PASSWORD=0
ensure_password() {
  [[ -s "$PW_FILE" ]] && return 0
  # Hex only: safe in a URL and in SQL without quoting. od reads to the end, so
  # no SIGPIPE under pipefail.
  local pw
  pw="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  (umask 077 && printf '%s\n' "$pw" >"$PW_FILE.tmp")
  mv "$PW_FILE.tmp" "$PW_FILE"
  chmod 600 "$PW_FILE"
  NEW_PASSWORD=1
}

password() { head -n 1 "$PW_FILE"; }

ensure_initdb() {
  [[ -f "$DATA_DIR/PG_VERSION" ]] && return 0
  # A data dir without PG_VERSION is an interrupted initdb: nothing to keep.
  find "$DATA_DIR" -mindepth 1 -delete
  log "initialising a new cluster in $DATA_DIR"
  # initdb reads the superuser password from a file the server user can read;
  # the socket dir is private to that user, so it does not leak.
  local pwfile="$SOCK_DIR/.initdb-pw"
  (umask 077 && password >"$pwfile")
  if is_root; then chown postgres:postgres "$pwfile"; fi
  if ! as_pg "$PG_BIN/initdb" -D "$DATA_DIR" -U "$DB_USER" --pwfile="$pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C >>"$LOG_FILE" 2>&1; then
    rm -f "$pwfile"
    fail_with_log "initdb failed"
  fi
  rm -f "$pwfile"
  # Our settings live in docsum.conf (rewritten on each start); included last
  # so they override initdb's auto-tuned values.
  printf "\n# Added by scripts/postgres.sh\ninclude_if_exists = 'docsum.conf'\n" >>"$DATA_DIR/postgresql.conf"
  NEW_PASSWORD=0 # initdb already set it
}

write_config() {
  local conf="$DATA_DIR/docsum.conf"
  cat >"$conf.tmp" <<EOF
# Generated by scripts/postgres.sh on every start; edit the script, not this file.
port = $PORT
listen_addresses = '127.0.0.1'
# Private socket dir: never collides with a system cluster's /var/run/postgresql.
unix_socket_directories = '$SOCK_DIR'
# The suite's three workers each run stacks of services, each service with its own pool.
max_connections = 300
shared_buffers = 128MB
# Kept on: the tests exercise crash recovery and must see real durability.
fsync = on
password_encryption = 'scram-sha-256'
log_line_prefix = '%m [%p] %q%u@%d '
EOF
  if is_root; then chown postgres:postgres "$conf.tmp"; fi
  mv "$conf.tmp" "$conf"
}

# --- commands ---------------------------------------------------------------

do_start() {
  if [[ -n "${DATABASE_URL:-}" ]]; then
    log "DATABASE_URL is set: using that database, not starting one"
    return 0
  fi
  take_lock
  do_install
  prepare_dirs

  local pid
  if pid="$(running_pid)"; then
    if ready_tcp; then
      echo "$pid" >"$PID_FILE"
      log "already running (pid $pid) on 127.0.0.1:$PORT"
      return 0
    fi
    # Running but not accepting connections yet (still starting, or crash
    # recovery): wait like pg_ctl -w would, then do the idempotent steps below.
    local i
    for ((i = 0; i < 300; i++)); do
      ready_tcp && break
      pid_alive "$pid" || break
      sleep 0.2
    done
    ready_tcp || fail_with_log "postmaster pid $pid is running but not accepting connections on 127.0.0.1:$PORT"
  else
    # Not running. After kill -9 the postmaster leaves postmaster.pid and the
    # socket lock file behind. The new postmaster refuses to start while the
    # pid in either still exists: a zombie of the old one (not yet reaped), or
    # an unrelated process of the same user that got the pid. pg_ctl does not
    # handle that, so remove them: we just checked no postmaster uses them.
    rm -f "$DATA_DIR/postmaster.pid" "$PID_FILE" "$SOCK_DIR"/.s.PGSQL.*
    wait_for_orphans
    # Not ours, yet something answers there: say so in one line rather than in PostgreSQL's log.
    port_open "$PORT" && die "port 127.0.0.1:$PORT is already in use by another process (set DOCSUM_PG_PORT to another port)"
  fi

  ensure_password
  ensure_initdb
  write_config

  if ! running_pid >/dev/null; then
    rotate_log
    # pg_ctl -l opens it as postgres: a new one after the rotation must be the server's.
    touch "$LOG_FILE"
    if is_root; then chown postgres:postgres "$LOG_FILE"; fi
    # pg_ctl -w returns once the postmaster reports "ready" in postmaster.pid
    # and answers a connection attempt. fd 9 (our lock) must not be inherited
    # by the postmaster, or it would hold the lock for its whole life.
    as_pg "$PG_BIN/pg_ctl" -D "$DATA_DIR" -l "$LOG_FILE" -w -t 60 start >/dev/null 9>&- ||
      fail_with_log "pg_ctl start failed"
  fi
  pid="$(running_pid)" || fail_with_log "postmaster not running after pg_ctl start"
  echo "$pid" >"$PID_FILE"

  # The password file was lost but the cluster exists: set the new one.
  if ((NEW_PASSWORD)); then
    log "setting a new password for $DB_USER"
    sql_socket -c "ALTER ROLE $DB_USER PASSWORD '$(password)'" >/dev/null
  fi
  if [[ -z "$(sql_socket -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" ]]; then
    sql_socket -c "CREATE DATABASE $DB_NAME" >/dev/null
  fi

  # Final check = what clients do: TCP + scram password login to the database.
  PGPASSWORD="$(password)" PGCONNECT_TIMEOUT=5 "$PG_BIN/psql" -X -q -tA \
    -h 127.0.0.1 -p "$PORT" -U "$DB_USER" -d "$DB_NAME" -c 'SELECT 1' >/dev/null ||
    fail_with_log "server started but a TCP login as $DB_USER to $DB_NAME failed"
  log "ready on 127.0.0.1:$PORT (pid $pid, ${SECONDS}s); URL: scripts/postgres.sh url"
}

# After kill -9 of the postmaster its children notice and exit within moments;
# give them a few seconds, then kill what is left (they belong to a dead server).
wait_for_orphans() {
  local deadline=$((SECONDS + 10))
  local -a pids
  while true; do
    mapfile -t pids < <(orphan_pids)
    ((${#pids[@]} == 0)) && return 0
    ((SECONDS < deadline)) || break
    sleep 0.2
  done
  log "killing leftover processes of the old server: ${pids[*]}"
  kill -KILL "${pids[@]}" 2>/dev/null || true
  sleep 0.5
}

# Replaces daemon.sh's: pg_ctl, then harder.
stop_server() {
  local pid="$1"
  find_bindir || die "PostgreSQL binaries not found, cannot stop pid $pid cleanly"
  # "fast" = SIGINT: disconnect clients, checkpoint, exit. (SIGTERM, "smart",
  # would wait for every client to disconnect first.) Then "immediate"
  # (SIGQUIT, crash recovery on next start), then SIGKILL as a last resort.
  if ! as_pg "$PG_BIN/pg_ctl" -D "$DATA_DIR" -m fast -w -t 20 stop >/dev/null 2>&1; then
    log "fast shutdown did not finish in 20s, trying immediate shutdown"
    as_pg "$PG_BIN/pg_ctl" -D "$DATA_DIR" -m immediate -w -t 10 stop >/dev/null 2>&1 || {
      log "sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      wait_for_orphans
    }
  fi
}

do_status() {
  if [[ -n "${DATABASE_URL:-}" ]]; then
    # External database: pg_isready if we have it, otherwise just say so.
    if find_bindir 2>/dev/null; then
      "$PG_BIN/pg_isready" -q -d "$DATABASE_URL" && { echo "external database is reachable"; return 0; }
      echo "external database is not reachable"
      return 1
    fi
    echo "DATABASE_URL is set (not checked: pg_isready not installed)"
    return 0
  fi
  local pid
  if pid="$(running_pid)" && find_bindir && ready_tcp; then
    echo "postgres running (pid $pid) on 127.0.0.1:$PORT"
    return 0
  fi
  echo "postgres not running"
  return 1
}

do_url() {
  if [[ -n "${DATABASE_URL:-}" ]]; then
    echo "$DATABASE_URL"
    return 0
  fi
  [[ -s "$PW_FILE" ]] || die "no password yet: run 'scripts/postgres.sh start' first"
  echo "postgresql://$DB_USER:$(password)@127.0.0.1:$PORT/$DB_NAME"
}

case "${1:-}" in
  install)
    take_lock
    do_install
    ;;
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  url) do_url ;;
  *)
    echo "usage: $0 {install|start|stop|status|url}" >&2
    exit 2
    ;;
esac
