#!/usr/bin/env bash
# Installs the KEDA validator's npm packages from the committed package-lock.json into .run/keda-validate
# (npm ci: exactly the locked versions). Idempotent: does nothing when the lock has not changed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dest="$root/.run/keda-validate"
stamp="$dest/.installed"
mkdir -p "$dest"
cp "$here/validate.mjs" "$dest/"  # always: it may change without the lock
if [[ -f "$stamp" ]] && cmp -s "$here/package-lock.json" "$stamp"; then
  exit 0
fi
command -v npm >/dev/null || { echo "keda-validate: npm is needed (Debian: apt-get install -y nodejs npm)" >&2; exit 1; }
cp "$here/package.json" "$here/package-lock.json" "$dest/"
(cd "$dest" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)  # stdout stays empty
cp "$here/package-lock.json" "$stamp"
