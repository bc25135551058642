"""scripts/setup_env.sh picks CPython 3.11 or 3.12, or stops before creating anything.

Fake interpreters (small shell scripts that answer the version query) stand in for real
ones: nothing is installed, no network, no venv created. Each run takes milliseconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "setup_env.sh"
BASH = shutil.which("bash")
# What the script runs before it chooses (or refuses) an interpreter.
TOOLS = ("dirname", "cat", "sha256sum", "cut")


def fake_python(directory: Path, name: str, answer: str | None, status: int = 0) -> Path:
    """An executable that prints `answer` (e.g. "CPython 3.13") whatever it is asked."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    body = f"echo '{answer}'\n" if answer is not None else ""
    path.write_text(f"#!/bin/sh\n{body}exit {status}\n")
    path.chmod(0o755)
    return path


def tool_bin(tmp_path: Path) -> Path:
    """A bin folder with the few real tools the script needs, and no Python."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is not on this machine's PATH"
        (bin_dir / tool).symlink_to(found)
    return bin_dir


def run_setup(tmp_path: Path, *args: str, python: str | None = None, path: str | None = None):
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "POSENC_VENV")}
    env["POSENC_VENV"] = str(venv)
    if python is not None:
        env["PYTHON"] = python
    if path is not None:
        env["PATH"] = path
    proc = subprocess.run([BASH, str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    return proc, venv


def assert_refused(proc, venv: Path):
    assert proc.returncode != 0
    assert "[setup] done" not in proc.stderr
    assert "CPython 3.11 or 3.12" in proc.stderr
    assert "uv python install 3.12" in proc.stderr
    assert "conda create -n py312 python=3.12" in proc.stderr
    assert "pyenv install 3.12" in proc.stderr
    assert "Nothing was created" in proc.stderr
    assert not venv.exists()


def test_script_parses():
    subprocess.run([BASH, "-n", str(SCRIPT)], check=True)


def test_python_naming_an_unsupported_version_is_refused(tmp_path):
    fake = fake_python(tmp_path / "fakes", "python3.13", "CPython 3.13")
    proc, venv = run_setup(tmp_path, python=str(fake))
    assert_refused(proc, venv)
    assert f"PYTHON={fake} is CPython 3.13, which is not supported" in proc.stderr


def test_python_naming_a_supported_version_of_another_implementation_is_refused(tmp_path):
    fake = fake_python(tmp_path / "fakes", "pypy3", "PyPy 3.11")
    proc, venv = run_setup(tmp_path, python=str(fake))
    assert_refused(proc, venv)
    assert "is PyPy 3.11, which is not supported" in proc.stderr


def test_python_naming_a_missing_file_is_refused(tmp_path):
    missing = tmp_path / "no" / "python3.12"
    proc, venv = run_setup(tmp_path, python=str(missing))
    assert_refused(proc, venv)
    assert f"PYTHON={missing} does not exist" in proc.stderr


def test_python_that_does_not_run_is_refused_without_fallback(tmp_path):
    # A broken PYTHON is refused even though a supported python3.11 is on the PATH.
    bin_dir = tool_bin(tmp_path)
    fake_python(bin_dir, "python3.11", "CPython 3.11")
    broken = fake_python(tmp_path / "fakes", "python3.12", None, status=127)
    proc, venv = run_setup(tmp_path, python=str(broken), path=str(bin_dir))
    assert_refused(proc, venv)
    assert "did not run as a Python" in proc.stderr


def test_no_supported_python_on_the_path_is_refused_and_lists_what_was_found(tmp_path):
    bin_dir = tool_bin(tmp_path)
    fake_python(bin_dir, "python3", "CPython 3.13")
    fake_python(bin_dir, "python", "CPython 3.10")
    fake_python(bin_dir, "python3.12", None, status=127)  # like a pyenv shim for an inactive version
    proc, venv = run_setup(tmp_path, path=str(bin_dir))
    assert_refused(proc, venv)
    assert "no supported Python on the PATH" in proc.stderr
    assert "python3.11: not on the PATH" in proc.stderr
    assert f"python3.12: {bin_dir}/python3.12 (did not run or answer)" in proc.stderr
    assert f"python3: {bin_dir}/python3 (CPython 3.13)" in proc.stderr
    assert f"python: {bin_dir}/python (CPython 3.10)" in proc.stderr


def test_an_existing_venv_with_an_unsupported_python_is_refused(tmp_path):
    bin_dir = tool_bin(tmp_path)
    fake_python(bin_dir, "python3.11", "CPython 3.11")
    fake_python(tmp_path / "venv" / "bin", "python", "CPython 3.13")
    proc, venv = run_setup(tmp_path, path=str(bin_dir))
    assert proc.returncode != 0
    assert "existing venv" in proc.stderr and "CPython 3.13" in proc.stderr
    assert f"rm -r {venv}" in proc.stderr
    assert sorted(p.name for p in venv.iterdir()) == ["bin"]  # left as it was


@pytest.mark.parametrize("fakes,chosen", [
    # python3.11 comes first
    ({"python3.11": "CPython 3.11", "python3.12": "CPython 3.12", "python3": "CPython 3.12"},
     "python3.11"),
    # python3.12 missing, python3 unsupported: python3.11 is taken
    ({"python3.11": "CPython 3.11", "python3": "CPython 3.13"}, "python3.11"),
    # python3.11 missing: python3.12 before python3
    ({"python3.12": "CPython 3.12", "python3": "CPython 3.11"}, "python3.12"),
    # only the generic names: the first supported one
    ({"python3": "CPython 3.13", "python": "CPython 3.12"}, "python"),
    ({"python3.12": None, "python3": "CPython 3.11"}, "python3"),
])
def test_check_picks_the_first_supported_candidate(tmp_path, fakes, chosen):
    bin_dir = tool_bin(tmp_path)
    for name, answer in fakes.items():
        fake_python(bin_dir, name, answer, status=0 if answer else 127)
    proc, venv = run_setup(tmp_path, "--check", path=str(bin_dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(bin_dir / chosen)
    assert not venv.exists()


def test_check_takes_python_when_it_is_supported(tmp_path):
    bin_dir = tool_bin(tmp_path)
    fake_python(bin_dir, "python3.11", "CPython 3.11")
    chosen = fake_python(tmp_path / "fakes", "python3.12", "CPython 3.12")
    proc, venv = run_setup(tmp_path, "--check", python=str(chosen), path=str(bin_dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(chosen)
    assert not venv.exists()


def test_check_keeps_an_existing_venvs_python(tmp_path):
    bin_dir = tool_bin(tmp_path)
    fake_python(bin_dir, "python3.11", "CPython 3.11")
    venv_python = fake_python(tmp_path / "venv" / "bin", "python", "CPython 3.12")
    proc, _ = run_setup(tmp_path, "--check", path=str(bin_dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(venv_python)
