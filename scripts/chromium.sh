#!/usr/bin/env bash
# Debian's Chromium for the web page's browser test (tests/integration/test_web_page.py): playwright
# drives /usr/bin/chromium, it downloads no browser of its own. Idempotent; prints the binary's path.
set -euo pipefail

CHROMIUM=/usr/bin/chromium
log() { echo "chromium: $*" >&2; }

if [[ ! -x "$CHROMIUM" ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    log "$CHROMIUM is missing; install it as root: apt-get install -y --no-install-recommends chromium"
    exit 1
  fi
  log "installing chromium with apt-get"
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >&2
fi
echo "$CHROMIUM"
