"""The code's shape as rules a change keeps: no module of the package over 500 lines, no
function in ``core/`` over 80 (the Triton kernels of ``core/kernels/`` aside), and the
attention's ``attend`` a dispatcher of at most 60 lines over one function per path."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "fairseq_posenc"


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.end_lineno - node.lineno + 1, node.lineno


def test_no_module_over_500_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500}
    assert not long, f"modules over 500 lines (split them by responsibility): {long}"


def test_no_function_in_core_over_80_lines():
    core = PACKAGE / "core"
    long = [f"{p.relative_to(PACKAGE)}:{line} {name} ({n} lines)"
            for p in core.rglob("*.py") if "kernels" not in p.relative_to(core).parts
            for name, n, line in _functions(p) if n > 80]
    assert not long, f"functions in core/ over 80 lines: {long}"


def test_attend_is_a_dispatcher():
    lengths = {name: n for name, n, _ in _functions(PACKAGE / "core" / "attention_core.py")}
    assert lengths["attend"] <= 60
