#!/usr/bin/env bash
# Debian's Chromium for the web page's browser test (tests/integration/test_web_page.py): playwright
# drives /usr/bin/chromium, it downloads no browser of its own. Also a small CJK font (WenQuanYi Micro
# Hei, 1.6 MB), so that Chinese summaries show as text and not as boxes in the test's screenshots.
# Idempotent; prints the browser's path.
set -euo pipefail

# Where Debian's packages put them (the variables exist so that the script can be tried without touching /usr).
CHROMIUM=${DOCSUM_CHROMIUM:-/usr/bin/chromium}
CJK_FONT=${DOCSUM_CJK_FONT:-/usr/share/fonts/truetype/wqy/wqy-microhei.ttc}
log() { echo "chromium: $*" >&2; }

missing=()
[[ -x "$CHROMIUM" ]] || missing+=(chromium)
[[ -f "$CJK_FONT" ]] || missing+=(fonts-wqy-microhei)
if (( ${#missing[@]} )); then
  if [[ $(id -u) -ne 0 ]]; then
    log "missing ${missing[*]}; install as root: apt-get install -y --no-install-recommends ${missing[*]}"
    exit 1
  fi
  log "installing ${missing[*]} with apt-get"
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
echo "$CHROMIUM"
