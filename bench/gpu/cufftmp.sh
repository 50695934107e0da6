#!/usr/bin/env bash
# Brings cuFFTMp (the FFT peer's library, nvidia-cufftmp-cu13 12.1.3.2: a 205 MB wheel whose
# libcufftMp.so.12 is 299 MB) to a GPU machine whose calls carry at most 64 MiB each: compressed
# here into three pieces of about 56 MB, each carried in its own call and staged in /tmp/stage
# there (kept while the machine stays warm), then assembled into the peer's site beside the
# other nvmath wheels, its sha256 checked.
#
#   bench/gpu/cufftmp.sh pack          here: .tools/stage{0,1,2}/part0{0,1,2}
#   bench/gpu/cufftmp.sh receive K     there, one call each, carrying .tools/stageK: stages piece K
#   bench/gpu/cufftmp.sh install       there, carrying .tools/wheels: the wheels into
#                                      /tmp/nvmath-site (as nvmath_peer.py would), the library
#                                      assembled beside them
set -euo pipefail
cd "$(dirname "$0")/../.."
SITE=${TMPDIR:-/tmp}/nvmath-site
STAGE=${TMPDIR:-/tmp}/stage
LIB=nvidia/cufftmp/cu13/lib/libcufftMp.so.12
# The library of nvidia-cufftmp-cu13 12.1.3.2, the version pinned here.
SHA=f2c27c594f0ee91aec278631dce19a3a99b1a4d4270bcf61357554f664262c4a

case "${1:-}" in
pack)
  work=$(mktemp -d)
  pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_28_x86_64 -d "$work" nvidia-cufftmp-cu13==12.1.3.2
  (cd "$work" && python3 -m zipfile -e nvidia_cufftmp_cu13-*.whl unpacked)
  echo "$SHA  $work/unpacked/$LIB" | sha256sum -c -
  xz -6 -T0 -c "$work/unpacked/$LIB" > "$work/lib.xz"
  (cd "$work" && split -n 3 -d lib.xz part)
  for k in 0 1 2; do
    mkdir -p ".tools/stage$k"
    mv "$work/part0$k" ".tools/stage$k/"
  done
  rm -rf "$work"
  ls -l .tools/stage*/part0*
  ;;
receive)
  mkdir -p "$STAGE"
  cp ".tools/stage$2"/part0* "$STAGE/"
  ls -l "$STAGE"
  ;;
install)
  PY=${PYTHON:-/opt/torch/.venv/bin/python}
  if [ ! -d "$SITE" ]; then
    "$PY" -m pip install -q --no-index --no-deps --target "$SITE" .tools/wheels/*.whl
  fi
  mkdir -p "$(dirname "$SITE/$LIB")"
  cat "$STAGE"/part0* | xz -d > "$SITE/$LIB"
  echo "$SHA  $SITE/$LIB" | sha256sum -c -
  ;;
*)
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'

  exit 2
  ;;
esac
