#!/usr/bin/env bash
# Debian's Chromium for the web page's browser test (tests/integration/test_web_page.py): playwright
# drives /usr/bin/chromium, it downloads no browser of its own (its fonts: scripts/fonts.sh). Idempotent;
# prints the browser's path.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

# Where Debian's packages put them (the variables exist so that the script can be tried without touching /usr).
CHROMIUM=${DOCSUM_CHROMIUM:-/usr/bin/chromium}

[[ -x "$CHROMIUM" ]] || apt_install chromium chromium
echo "$CHROMIUM"
