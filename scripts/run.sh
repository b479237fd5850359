#!/usr/bin/env bash
# `make run`: start the stack, summarize the examples through the whole pipeline, keep serving.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

scripts/stack.sh up
# The CLI talks to the gateway the stack just started, wherever DOCSUM_GATEWAY_HOST/PORT put it.
export DOCSUM_GATEWAY_URL=${DOCSUM_GATEWAY_URL:-http://${DOCSUM_GATEWAY_HOST:-127.0.0.1}:${DOCSUM_GATEWAY_PORT:-8000}}
status=0
.venv/bin/docsum summarize --title "docsum examples" examples/* || status=$?
echo
echo "The gateway keeps serving at $DOCSUM_GATEWAY_URL (API key in .run/api-key). Ctrl-C stops the stack."
trap 'echo; scripts/stack.sh down; exit $status' INT TERM
if [ -n "${CI:-}" ] || [ ! -t 0 ]; then   # nobody to press Ctrl-C: stop now
  scripts/stack.sh down
  exit $status
fi
while true; do sleep 3600 & wait $!; done
