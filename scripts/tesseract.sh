#!/usr/bin/env bash
# Tesseract's trained data for the parser's OCR of scanned PDF pages: Debian's English and Simplified
# Chinese (tesseract-ocr-eng, tesseract-ocr-chi-sim; 6.4 MB). The engine itself is inside the tesserocr
# wheel; nothing is downloaded at run time. Idempotent; prints the data's directory.
set -euo pipefail

# Where Debian puts it (DOCSUM_OCR_TESSDATA, the parser's setting, points elsewhere if it is elsewhere).
TESSDATA=${DOCSUM_OCR_TESSDATA:-/usr/share/tesseract-ocr/5/tessdata}
log() { echo "tesseract: $*" >&2; }

missing=()
[[ -f "$TESSDATA/eng.traineddata" ]] || missing+=(tesseract-ocr-eng)
[[ -f "$TESSDATA/chi_sim.traineddata" ]] || missing+=(tesseract-ocr-chi-sim)
if (( ${#missing[@]} )); then
  if [[ $(id -u) -ne 0 ]]; then
    log "missing ${missing[*]}; install as root: apt-get install -y --no-install-recommends ${missing[*]}"
    exit 1
  fi
  log "installing ${missing[*]} with apt-get"
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi
echo "$TESSDATA"
