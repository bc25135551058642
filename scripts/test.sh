#!/usr/bin/env bash
# Set up the environment (once; later runs reuse it) and run the test suite.
#   bash scripts/test.sh [pytest args...]   e.g. -m "not slow" (the fast loop), tests/core/encodings
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${POSENC_VENV:-$ROOT/.venv}"
bash "$ROOT/scripts/setup_env.sh"
# The test-only packages (requirements-test.txt): Triton for the kernels' tests, which CUDA
# builds of torch bring (theirs is kept: the file without Triton then), and import-linter for
# the layers' contracts.
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
if ! "$VENV/bin/python" -c "import triton" 2>/dev/null; then
  "${PIP[@]}" -r "$ROOT/requirements-test.txt"
elif ! "$VENV/bin/python" -c "import importlinter" 2>/dev/null; then
  grep -v '^triton==' "$ROOT/requirements-test.txt" | "${PIP[@]}" -r /dev/stdin
fi
cd "$ROOT"
# No path given: pytest.ini's testpaths (tests/); paths given: only those.
exec "$VENV/bin/python" -m pytest "$@"
