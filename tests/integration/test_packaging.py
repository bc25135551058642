"""``pip install .`` gives a working ``fairseq_posenc.nn`` without fairseq or the tools.

The repository is built into a wheel by pip, as a user's ``pip install .`` builds it. Its
metadata must ask for torch alone and no Python upper bound (the plugin's Pythons are
``scripts/setup_env.sh``'s business). The wheel is then installed, without dependencies,
into a folder outside the repository, and the PyTorch example runs from there in a fresh
interpreter where fairseq and every tool's dependency raise ``ImportError``
(:mod:`tests.support.import_blocker`): the package it imports must be the installed one.
"""

from __future__ import annotations

import email
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.support.cli_utils import REPO_ROOT, subprocess_env
from tests.support.import_blocker import blocked_run

#: what the core must not need: fairseq and the tools' dependencies
NOT_CORE = ("fairseq", "sacrebleu", "sentencepiece", "sacremoses", "subword_nmt",
            "matplotlib", "hydra", "omegaconf", "submitit")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out, source = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("source")
    # a copy of what setup.py packages: setuptools writes build/ next to its setup.py
    for name in ("setup.py", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    shutil.copytree(REPO_ROOT / "fairseq_posenc", source / "fairseq_posenc",
                    ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-q", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = out.glob("fairseq_posenc-*.whl")
    return path


def test_the_wheel_asks_for_torch_alone(wheel):
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(name))
        files = archive.namelist()
    assert metadata.get_all("Requires-Dist") == ["torch>=2.6"]
    assert metadata["Requires-Python"] == ">=3.11"
    assert "fairseq_posenc/nn.py" in files and "fairseq_posenc/core/kernels/distance/forward.py" in files


def test_the_installed_wheel_runs_the_example_without_fairseq(wheel, tmp_path):
    target = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
         "--disable-pip-version-check", "-q", "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    env = subprocess_env()
    env["PYTHONPATH"] = str(target)  # ahead of the editable install of this checkout
    # the example copied out of the repository, so that nothing resolves next to it
    example = tmp_path / "translate.py"
    example.write_text((REPO_ROOT / "examples/pytorch/translate.py").read_text()
                       .replace('Path(__file__).resolve().parents[2] / "scripts"',
                                f'Path({str(REPO_ROOT)!r}) / "scripts"')
                       + "\nprint('from', posenc.__file__)\n")
    done = subprocess.run(
        [sys.executable, "-c", blocked_run(NOT_CORE), str(example), "--steps", "20"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert f"from {target}/fairseq_posenc/nn.py" in out, out
    assert "blocked imports tried: [] loaded: []" in out, out
    difference = float(re.search(r"largest difference ([\d.e+-]+)", out).group(1))
    assert difference < 1e-4, out
