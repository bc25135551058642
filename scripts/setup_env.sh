#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and install the pinned stack.
#
#   bash scripts/setup_env.sh            # creates .venv next to this repository
#   POSENC_VENV=/path/to/venv bash scripts/setup_env.sh
#
# Rerunning is quick: the install is skipped while requirements.txt, setup.py and this
# script are unchanged (a stamp file in the venv records their hash).
# GPU users: create the venv, install your CUDA build of torch 2.13 into it first
# (pip install torch==2.13.0 --index-url <your CUDA index>), then run this script; the
# torch==2.13.0 requirement below is then already satisfied and left alone.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${POSENC_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3

stamp_now="$(cat "$ROOT/requirements.txt" "$ROOT/setup.py" "$ROOT/scripts/setup_env.sh" | sha256sum | cut -c1-16)"
if [ -f "$VENV/.posenc-stamp" ] && [ "$(cat "$VENV/.posenc-stamp")" = "$stamp_now" ]; then
  exit 0
fi

echo "[setup] creating environment in $VENV (once; later runs skip this)" >&2
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
# torch first and pinned: an unpinned torch pulled in by another package can resolve to a
# multi-GB CUDA build. 2.13.0 is the release fairseq-posenc is tested with.
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" -r "$ROOT/requirements.txt"
# fairseq without its declared torchaudio requirement (see requirements.txt).
"${PIP[@]}" --no-deps "ve-fairseq==0.12.3"
"${PIP[@]}" --no-deps -e "$ROOT"
"$VENV/bin/python" -c "import fairseq, fairseq_posenc" 2>/dev/null
echo "$stamp_now" > "$VENV/.posenc-stamp"
echo "[setup] done: $VENV" >&2
