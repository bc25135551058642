#!/usr/bin/env bash
# Set up the environment (once; later runs reuse it) and run the test suite.
#   bash scripts/test.sh [pytest args...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${POSENC_VENV:-$ROOT/.venv}"
bash "$ROOT/scripts/setup_env.sh"
cd "$ROOT"
exec "$VENV/bin/python" -m pytest tests "$@"
