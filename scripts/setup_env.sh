#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and install the pinned stack.
#
#   bash scripts/setup_env.sh            # creates .venv next to this repository
#   POSENC_VENV=/path/to/venv bash scripts/setup_env.sh
#   PYTHON=/path/to/python3.12 bash scripts/setup_env.sh   # choose the interpreter
#   bash scripts/setup_env.sh --check    # only print the interpreter it would use
#
# Python: CPython 3.11 or 3.12, nothing else. fairseq's wheel (ve-fairseq==0.12.3) exists
# for those two only, and numpy 1.26.4 has no wheel for 3.13. Without PYTHON the first
# supported one of python3.11, python3.12, python3, python on the PATH is used; when there
# is none (or PYTHON names something else) the script stops before creating anything and
# says how to get one beside the system's Python.
#
# Rerunning is quick: the install is skipped while requirements.txt, setup.py and this
# script are unchanged (a stamp file in the venv records their hash).
# GPU users: create the venv (with Python 3.11 or 3.12), install your CUDA build of torch
# 2.13 into it first (pip install torch==2.13.0 --index-url <your CUDA index>), then run
# this script; it keeps that venv's Python, and the torch==2.13.0 requirement below is
# then already satisfied and left alone.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${POSENC_VENV:-$ROOT/.venv}"
CHECK=0
case "${1:-}" in
  "") ;;
  --check) CHECK=1 ;;
  *) echo "usage: bash scripts/setup_env.sh [--check]" >&2; exit 2 ;;
esac

stamp_now="$(cat "$ROOT/requirements.txt" "$ROOT/setup.py" "$ROOT/scripts/setup_env.sh" | sha256sum | cut -c1-16)"
if [ "$CHECK" = 0 ] && [ -f "$VENV/.posenc-stamp" ] && [ "$(cat "$VENV/.posenc-stamp")" = "$stamp_now" ]; then
  exit 0
fi

SUPPORTED="3.11 3.12"
# Prints e.g. "CPython 3.12" (works under Python 2 too, so an old `python` is reported).
VERSION_QUERY='import platform, sys; print(platform.python_implementation() + " %d.%d" % sys.version_info[:2])'

py_version() {  # $1: a command or path -> "CPython 3.12" on stdout, or nothing
  "$1" -c "$VERSION_QUERY" 2>/dev/null || true
}
is_supported() {  # $1: output of py_version
  local v
  for v in $SUPPORTED; do
    [ "$1" = "CPython $v" ] && return 0
  done
  return 1
}
refuse() {  # $1: what went wrong; FOUND: what was looked at
  {
    echo "[setup] error: $1"
    echo "[setup] fairseq-posenc needs CPython 3.11 or 3.12: fairseq's wheel (ve-fairseq==0.12.3)"
    echo "[setup] exists for those two only, and numpy 1.26.4 has no wheel for 3.13 or newer."
    if [ -n "$FOUND" ]; then
      echo "[setup] found:"
      printf '%s' "$FOUND"
    fi
    echo "[setup] Nothing was created or installed. Get Python 3.12 beside the system's, then rerun:"
    echo "[setup]   uv:    uv python install 3.12"
    echo "[setup]          PYTHON=\$(uv python find 3.12) bash scripts/setup_env.sh"
    echo "[setup]   conda: conda create -n py312 python=3.12 && conda activate py312"
    echo "[setup]          bash scripts/setup_env.sh"
    echo "[setup]   pyenv: pyenv install 3.12"
    echo "[setup]          PYTHON=\$(pyenv prefix 3.12)/bin/python3.12 bash scripts/setup_env.sh"
    echo "[setup]   Debian/Ubuntu, where the release packages it: apt install python3.12 python3.12-venv"
  } >&2
  exit 1
}

FOUND=""
PY=""
if [ -n "${PYTHON:-}" ]; then
  # The user chose: use it or stop, never fall back to something else.
  if ! path="$(command -v "$PYTHON" 2>/dev/null)"; then
    if [ -e "$PYTHON" ]; then
      refuse "PYTHON=$PYTHON is not executable."
    fi
    refuse "PYTHON=$PYTHON does not exist (no such file, nor a command on the PATH)."
  fi
  ver="$(py_version "$path")"
  shown="PYTHON=$PYTHON"
  [ "$path" = "$PYTHON" ] || shown+=" -> $path"
  FOUND+="[setup]   $shown (${ver:-did not run or answer})"$'\n'
  [ -n "$ver" ] || refuse "PYTHON=$PYTHON did not run as a Python (no answer to a version query)."
  is_supported "$ver" || refuse "PYTHON=$PYTHON is $ver, which is not supported."
  PY="$path"
fi

if [ -x "$VENV/bin/python" ]; then
  # An existing venv keeps its own Python (it may hold a CUDA torch put there by hand).
  venv_ver="$(py_version "$VENV/bin/python")"
  FOUND+="[setup]   existing venv: $VENV/bin/python (${venv_ver:-did not run or answer})"$'\n'
  is_supported "$venv_ver" ||
    refuse "the existing venv $VENV has ${venv_ver:-a broken Python}: remove it (rm -r $VENV) and rerun."
  if [ -n "$PY" ] && [ "$venv_ver" != "$ver" ]; then
    echo "[setup] error: PYTHON=$PYTHON is $ver, but the existing venv $VENV has $venv_ver:" >&2
    echo "[setup] remove it (rm -r $VENV) or choose another POSENC_VENV. Nothing was changed." >&2
    exit 1
  fi
  PY="$VENV/bin/python"
  ver="$venv_ver"
elif [ -z "$PY" ]; then
  for cand in python3.11 python3.12 python3 python; do
    if ! path="$(command -v "$cand" 2>/dev/null)"; then
      FOUND+="[setup]   $cand: not on the PATH"$'\n'
      continue
    fi
    ver="$(py_version "$path")"
    FOUND+="[setup]   $cand: $path (${ver:-did not run or answer})"$'\n'
    if is_supported "$ver"; then
      PY="$path"
      break
    fi
  done
  [ -n "$PY" ] || refuse "no supported Python on the PATH (PYTHON=/path/to/python3.12 chooses one)."
fi

if [ "$CHECK" = 1 ]; then
  echo "[setup] would use $PY ($ver)" >&2
  echo "$PY"
  exit 0
fi

if [ -x "$VENV/bin/python" ]; then
  echo "[setup] updating environment in $VENV ($ver)" >&2
else
  echo "[setup] creating environment in $VENV with $PY ($ver; once, later runs skip this)" >&2
  "$PY" -m venv "$VENV"
fi
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
