#!/usr/bin/env bash
# Tesseract's trained data for the parser's OCR of scanned PDF pages: Debian's English and Simplified
# Chinese (tesseract-ocr-eng, tesseract-ocr-chi-sim; 6.4 MB). The engine itself is inside the tesserocr
# wheel; nothing is downloaded at run time. Idempotent; prints the data's directory.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

# Where Debian puts it (DOCSUM_OCR_TESSDATA, the parser's setting, points elsewhere if it is elsewhere).
TESSDATA=${DOCSUM_OCR_TESSDATA:-/usr/share/tesseract-ocr/5/tessdata}

missing=()
[[ -f "$TESSDATA/eng.traineddata" ]] || missing+=(tesseract-ocr-eng)
[[ -f "$TESSDATA/chi_sim.traineddata" ]] || missing+=(tesseract-ocr-chi-sim)
(( ${#missing[@]} == 0 )) || apt_install tesseract "${missing[@]}"
echo "$TESSDATA"
