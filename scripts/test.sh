#!/usr/bin/env bash
# Set up the environment (once; later runs reuse it) and run the test suite.
#   bash scripts/test.sh [pytest args...]   e.g. -m "not slow" (the fast loop), tests/core/encodings
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${POSENC_VENV:-$ROOT/.venv}"
bash "$ROOT/scripts/setup_env.sh"
# Triton for the kernels' tests (requirements-test.txt); CUDA builds of torch bring it.
"$VENV/bin/python" -c "import triton" 2>/dev/null ||
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$ROOT/requirements-test.txt"
cd "$ROOT"
# No path given: pytest.ini's testpaths (tests/); paths given: only those.
exec "$VENV/bin/python" -m pytest "$@"
