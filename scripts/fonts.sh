#!/usr/bin/env bash
# The fonts the tests and the bench draw their scans with (tests/documents.py: DejaVu Serif for English,
# WenQuanYi Micro Hei for Chinese), which the web page's browser test also needs to show Chinese
# summaries as text and not as boxes in its screenshots. Idempotent.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

# Where Debian's packages put them (the variables exist so that the script can be tried without touching /usr).
SERIF=${DOCSUM_SERIF_FONT:-/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf}
CJK_FONT=${DOCSUM_CJK_FONT:-/usr/share/fonts/truetype/wqy/wqy-microhei.ttc}

missing=()
[[ -f "$SERIF" ]] || missing+=(fonts-dejavu-core)
[[ -f "$CJK_FONT" ]] || missing+=(fonts-wqy-microhei)
(( ${#missing[@]} == 0 )) || apt_install fonts "${missing[@]}"
