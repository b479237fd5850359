#!/usr/bin/env bash
# Builds compose-config (compose-go, the library of `docker compose config`) into .run/tools from the
# committed go.mod/go.sum, through the Go module proxy; ~30 s the first time, nothing when up to date.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="$root/.run/tools/compose-config"
if [[ -x "$bin" && "$bin" -nt "$here/main.go" && "$bin" -nt "$here/go.sum" ]]; then
  exit 0
fi
command -v go >/dev/null || { echo "compose-config: Go is needed (Debian: apt-get install -y golang-go)" >&2; exit 1; }
mkdir -p "$root/.run/tools"
(cd "$here" && go build -mod=readonly -o "$bin" . >&2)  # stdout stays empty
