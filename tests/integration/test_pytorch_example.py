"""``examples/pytorch/translate.py`` runs where fairseq cannot be imported.

A fresh interpreter puts a finder first on ``sys.meta_path`` that raises ``ImportError``
for ``fairseq`` and its submodules and records each attempt, then runs the example for a
few training steps: it must train (the loss falls), translate with incremental decoding
whose steps equal the full forward, and never try to import fairseq.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

from tests.support.cli_utils import REPO_ROOT, subprocess_env

EXAMPLE = REPO_ROOT / "examples" / "pytorch" / "translate.py"

BLOCKED = textwrap.dedent("""
    import runpy, sys

    attempts = []

    class NoFairseq:
        def find_spec(self, name, path=None, target=None):
            if name == "fairseq" or name.startswith("fairseq."):
                attempts.append(name)
                raise ImportError(f"blocked: {name}")
            return None

    sys.meta_path.insert(0, NoFairseq())
    try:
        import fairseq
    except ImportError:
        pass
    else:
        raise SystemExit("the blocker let fairseq through")
    attempts.clear()
    sys.argv = [sys.argv[1], *sys.argv[2:]]
    runpy.run_path(sys.argv[0], run_name="__main__")
    loaded = [m for m in sys.modules if m == "fairseq" or m.startswith("fairseq.")]
    print("fairseq imports tried:", attempts, "loaded:", loaded)
""")


def test_example_trains_and_decodes_without_fairseq():
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED, str(EXAMPLE), "--steps", "40"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "fairseq imports tried: [] loaded: []" in out, out
    first, last = map(float, re.search(r"loss ([\d.]+) -> ([\d.]+)", out).groups())
    assert last < first - 1.0, out  # 40 steps from a uniform guess over the vocabulary
    difference = float(re.search(r"largest difference ([\d.e+-]+)", out).group(1))
    assert difference < 1e-4, out
    assert len(re.findall(r"  ->  ", out)) == 5, out  # every test sentence translated
