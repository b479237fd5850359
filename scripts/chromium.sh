#!/usr/bin/env bash
# Debian's Chromium for the web page's browser test (tests/integration/test_web_page.py): playwright
# drives /usr/bin/chromium, it downloads no browser of its own. Also a small CJK font (WenQuanYi Micro
# Hei, 1.6 MB), so that Chinese summaries show as text and not as boxes in the test's screenshots.
# Idempotent; prints the browser's path.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

# Where Debian's packages put them (the variables exist so that the script can be tried without touching /usr).
CHROMIUM=${DOCSUM_CHROMIUM:-/usr/bin/chromium}
CJK_FONT=${DOCSUM_CJK_FONT:-/usr/share/fonts/truetype/wqy/wqy-microhei.ttc}

missing=()
[[ -x "$CHROMIUM" ]] || missing+=(chromium)
[[ -f "$CJK_FONT" ]] || missing+=(fonts-wqy-microhei)
(( ${#missing[@]} == 0 )) || apt_install chromium "${missing[@]}"
echo "$CHROMIUM"
