#!/usr/bin/env bash
# Debian's Prometheus (with promtool) for checking deploy/observability/ and for the scrape test.
#
#   scripts/prometheus.sh install   make sure prometheus and promtool exist (Debian's prometheus package)
#   scripts/prometheus.sh check     promtool on deploy/observability/: the rules, their tests, the compose config
#   scripts/prometheus.sh bin NAME  print the path of `prometheus` or `promtool` (installing if needed)
#
# The package starts no service here (no systemd): whoever needs a server runs
#   prometheus --config.file=FILE --storage.tsdb.path=DIR --web.listen-address=127.0.0.1:PORT
# itself (tests/integration/test_prometheus.py does, against the test stack's health ports).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$SCRIPT_DIR")"
STATE_DIR="${DOCSUM_STATE_DIR:-$REPO_DIR/.run}"
OBS_DIR="$REPO_DIR/deploy/observability"
LOCK_FILE="$STATE_DIR/prometheus.lock"

log() { echo "prometheus.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

have() { command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; }

do_install() {
  have && return 0
  # Two test sessions (or make and a test) may install at once: apt takes its own lock, but the second
  # would then fail instead of waiting, so take ours first and look again.
  mkdir -p "$STATE_DIR"
  exec 9>"$LOCK_FILE"
  flock 9
  have && return 0
  apt_install prometheus.sh prometheus || exit 1
  have || die "the prometheus package is installed, but prometheus or promtool is not in PATH"
}

do_check() {
  do_install
  promtool check rules "$OBS_DIR/alerts.yml"
  (cd "$OBS_DIR" && promtool test rules alerts.test.yml)
  promtool check config "$OBS_DIR/prometheus.compose.yml"
  # prometheus.yml is not checked here: Debian builds Prometheus without Kubernetes discovery, so its
  # promtool refuses kubernetes_sd_configs. tests/unit/test_observability.py checks the rest of it,
  # with static targets in place of the discovery.
}

case "${1:-}" in
  install) do_install ;;
  check) do_check ;;
  bin)
    [[ "${2:-}" == prometheus || "${2:-}" == promtool ]] || die "usage: $0 bin prometheus|promtool"
    do_install
    command -v "$2"
    ;;
  *)
    echo "usage: $0 {install|check|bin prometheus|bin promtool}" >&2
    exit 2
    ;;
esac
