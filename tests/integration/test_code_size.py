"""The code's shape as rules a change keeps: no module of the package over 500 lines, no
function in ``core/`` over 80 (the Triton kernels of ``core/kernels/`` aside), and the
attention's ``attend`` a dispatcher of at most 60 lines over one function per path, and no
two modules of one file name (a tool package's role names aside)."""

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


#: The names each tool package of ``tools/`` keeps for the same role (its command line, its
#: ``python -m`` entry, what it is asked to do, what runs its work, its records, report and
#: pictures: docs/architecture.md, "Package layout"), shared between those packages alone.
TOOL_ROLES = {"cli.py", "__main__.py", "settings.py", "execute.py", "records.py", "report.py",
              "plots.py"}


def test_no_two_modules_share_a_name():
    """One name per thing: a traceback's or a grep's file name says which module it is."""
    by_name: dict[str, list[str]] = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        by_name.setdefault(p.name, []).append(p.relative_to(PACKAGE).as_posix())
    shared = {name: paths for name, paths in by_name.items()
              if len(paths) > 1 and name not in TOOL_ROLES | {"__init__.py"}}
    assert not shared, f"modules of one name (give each a name that says what it holds): {shared}"
    outside = [p for n in TOOL_ROLES for p in by_name.get(n, [])
               if len(by_name[n]) > 1 and not (p.startswith("tools/") and p.count("/") == 2)]
    assert not outside, f"a tool package's role name shared outside tools/*/: {outside}"
