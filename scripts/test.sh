#!/usr/bin/env bash
# Set up the environment (once; later runs reuse it) and run the test suite.
#   bash scripts/test.sh [pytest args...]   e.g. -m "not slow" (the fast loop), tests/core/encodings
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${POSENC_VENV:-$ROOT/.venv}"
bash "$ROOT/scripts/setup_env.sh"
# The test-only packages (requirements-test.txt): Triton for the kernels' tests, which CUDA
# builds of torch bring (theirs is kept: the file without Triton then), import-linter for
# the layers' contracts, pytest-xdist for the workers below.
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
if ! "$VENV/bin/python" -c "import triton" 2>/dev/null; then
  "${PIP[@]}" -r "$ROOT/requirements-test.txt"
elif ! "$VENV/bin/python" -c "import importlinter, xdist" 2>/dev/null; then
  grep -v '^triton==' "$ROOT/requirements-test.txt" | "${PIP[@]}" -r /dev/stdin
fi
cd "$ROOT"
# Worker processes, each running whole test modules (tests/conftest.py): one per CPU core,
# at most 4 (POSENC_TEST_WORKERS=N chooses; 1 runs the tests in this process; a -n or -p of
# your own replaces this).
WORKERS="${POSENC_TEST_WORKERS:-$("$VENV/bin/python" -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}"
PARALLEL=(-n "$WORKERS")
for arg in "$@"; do
  case "$arg" in -n|-n*|--numprocesses*|-p) PARALLEL=() ;; esac
done
[ "$WORKERS" -le 1 ] && PARALLEL=()
# No path given: pytest.ini's testpaths (tests/); paths given: only those.
exec "$VENV/bin/python" -m pytest "${PARALLEL[@]}" "$@"
