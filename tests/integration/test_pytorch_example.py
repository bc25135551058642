"""``examples/pytorch/translate.py`` runs where fairseq cannot be imported.

A fresh interpreter blocks ``fairseq`` and its submodules
(:mod:`tests.support.import_blocker`), then runs the example for a few training steps: it
must train (the loss falls), translate with incremental decoding whose steps equal the
full forward, and never try to import fairseq.
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.cli_utils import REPO_ROOT, subprocess_env
from tests.support.import_blocker import blocked_run

EXAMPLE = REPO_ROOT / "examples" / "pytorch" / "translate.py"

BLOCKED = blocked_run(("fairseq",))


def test_example_trains_and_decodes_without_fairseq():
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED, str(EXAMPLE), "--steps", "40"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "blocked imports tried: [] loaded: []" in out, out
    first, last = map(float, re.search(r"loss ([\d.]+) -> ([\d.]+)", out).groups())
    assert last < first - 1.0, out  # 40 steps from a uniform guess over the vocabulary
    difference = float(re.search(r"largest difference ([\d.e+-]+)", out).group(1))
    assert difference < 1e-4, out
    assert len(re.findall(r"  ->  ", out)) == 5, out  # every test sentence translated
