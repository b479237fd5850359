#!/usr/bin/env bash
# The AsyncAPI parser (npm @asyncapi/parser, pinned with its whole tree in scripts/asyncapi/package-lock.json)
# that validates contracts/asyncapi.yaml, installed into .run/asyncapi (git-ignored) with `npm ci`.
#   scripts/asyncapi.sh install              install it, unless the installed tree matches the lock already
#   scripts/asyncapi.sh validate [FILE...]   install if needed, then validate each FILE (default
#                                            contracts/asyncapi.yaml): errors and warnings on stderr, one JSON
#                                            line per file on stdout; exit 1 when any file has an error
# Needs Node.js 18+ and npm; as root, installs Debian's nodejs and npm when they are missing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${DOCSUM_STATE_DIR:-$ROOT/.run}
SPEC=$ROOT/scripts/asyncapi
DIR=$STATE/asyncapi

die() { echo "asyncapi.sh: $*" >&2; exit 1; }

need_node() {
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install asyncapi.sh --recommends nodejs npm || exit 1
  fi
  local major
  major=$(node -p 'process.versions.node.split(".")[0]')
  ((major >= 18)) || die "Node.js $major is too old: @asyncapi/parser needs 18 or newer"
}

installed() {
  cmp -s "$SPEC/package-lock.json" "$DIR/package-lock.json" && [[ -f "$DIR/node_modules/@asyncapi/parser/package.json" ]]
}

install() {
  need_node
  installed && return 0
  mkdir -p "$STATE"
  # One install at a time: several test runs may share the state dir.
  exec 9>"$STATE/asyncapi.lock"
  flock 9
  installed && return 0
  rm -rf "$DIR"
  mkdir -p "$DIR"
  cp "$SPEC/package.json" "$DIR/"
  # --ignore-scripts: no install script of the tree is needed (one only sends usage statistics).
  (cd "$DIR" && cp "$SPEC/package-lock.json" . && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2) \
    || { rm -rf "$DIR"; die "npm ci failed"; }
  echo "asyncapi.sh: installed @asyncapi/parser $(node -p "require('$DIR/node_modules/@asyncapi/parser/package.json').version") into $DIR" >&2
}

case "${1:-}" in
  install) install ;;
  validate)
    shift
    install
    (($#)) || set -- "$ROOT/contracts/asyncapi.yaml"
    exec node "$SPEC/validate.mjs" "$DIR" "$@"
    ;;
  *) die "usage: scripts/asyncapi.sh install | validate [FILE...]" ;;
esac
