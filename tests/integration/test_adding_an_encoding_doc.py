"""``docs/adding-an-encoding.md`` runs as written.

The page's fenced blocks say what they are in their info string: ``python
file=myenc/laplace.py`` is a file of the user's directory, ``python test=NAME`` or ``bash
test=NAME`` code to run, ``text output=NAME`` what block ``NAME`` prints. Each test writes
the files into a fresh directory and runs code blocks there in a subprocess with this
interpreter (the registrations stay out of the test process), checking the exit status and
the output the page shows: the Python blocks in one interpreter, in the page's order, as a
reader runs them (the PyTorch usage, a rotation at positions a training forward chooses,
``check_encoding`` on the four encodings and on a mistake, and the attention's error for a
method's result of the wrong shape, each message as the page shows it), and, slow,
``fairseq-train`` and ``fairseq-generate`` from the user directory on a small synthetic
corpus, checked in the checkpoint (the flag's value reached the encoding's parameters) and
in the translations (every test sentence).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tests.support.cli_utils as cu

PAGE = cu.REPO_ROOT / "docs" / "adding-an-encoding.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def blocks(kind: str) -> dict[str, str]:
    """The page's blocks with ``kind=NAME`` in their info string, by NAME."""
    found: dict[str, str] = {}
    for _language, info, body in FENCE.findall(PAGE.read_text(encoding="utf-8")):
        attributes = dict(item.split("=", 1) for item in info.split() if "=" in item)
        if kind in attributes:
            assert attributes[kind] not in found, f"two blocks {kind}={attributes[kind]}"
            found[attributes[kind]] = body
    return found


def write_files(root: Path) -> None:
    files = blocks("file")
    assert set(files) == {"myenc/__init__.py", "myenc/laplace.py", "myenc/pair_table.py",
                          "myenc/pair_factors.py", "myenc/rope_halves.py"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def env() -> dict[str, str]:
    """This checkout's package first, the interpreter's console scripts on PATH, one thread."""
    variables = cu.subprocess_env()
    variables["PYTHONPATH"] = os.pathsep.join(
        [str(cu.REPO_ROOT)] + [p for p in [variables.get("PYTHONPATH")] if p])
    variables["PATH"] = os.pathsep.join([str(cu.BIN_DIR), variables.get("PATH", "")])
    return variables


def run(command: list[str], root: Path, timeout: float) -> str:
    """``command`` run in ``root``; its standard output, after a zero exit status."""
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=timeout,
                          env=env())
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


#: Printed between two Python blocks.
SEPARATOR = "----- next block: "


def test_the_page_marks_its_blocks():
    assert list(blocks("test")) == ["nn", "positions", "check", "mistake", "fairseq",
                                    "shape"]  # the page's order
    assert set(blocks("output")) == {"nn", "positions", "mistake", "shape"}


def test_the_python_blocks_run_and_print_what_the_page_shows(tmp_path):
    write_files(tmp_path)
    names = [name for name in blocks("test") if name != "fairseq"]
    for name in names:
        (tmp_path / f"block_{name}.py").write_text(blocks("test")[name], encoding="utf-8")
    driver = ("import runpy\n"
              f"for name in {names!r}:\n"
              f"    print({SEPARATOR!r} + name, flush=True)\n"
              "    runpy.run_path(f'block_{name}.py', run_name='__main__')\n")
    out = run([sys.executable, "-c", driver], tmp_path, timeout=120)
    printed = dict(part.split("\n", 1) for part in out.split(SEPARATOR)[1:])
    assert list(printed) == names, out
    want = {**{name: "" for name in names}, "check": "all checks passed\n",
            **blocks("output")}
    for name in names:
        assert printed[name] == want[name], f"block {name} printed:\n{printed[name]}"


@pytest.mark.slow
def test_fairseq_trains_and_translates_from_the_user_directory(tmp_path):
    write_files(tmp_path)
    raw, data = tmp_path / "raw", tmp_path / "data-bin" / "toy"
    sizes = cu.create_parallel_corpus(raw)
    cu.preprocess_translation_data(raw, data)
    run(["bash", "-euo", "pipefail", "-c", blocks("test")["fairseq"]], tmp_path, timeout=300)

    state = torch.load(tmp_path / "checkpoints" / "laplace" / "checkpoint_last.pt",
                       map_location="cpu", weights_only=False)
    args = state["cfg"]["model"]
    assert (args.arch, args.pos_encoding, args.laplace_init_width) == (
        "transformer_tiny_laplace", "laplace", 1.0)
    assert state["optimizer_history"][-1]["num_updates"] == 6
    # --laplace-init-width 1: the widths started at 1, 2, 4, 8 (the default's 2, 4, 8, 16
    # would be log 2 higher); 6 Adam steps of 1e-3 move each by at most about 0.006.
    for stack in ("encoder", "decoder"):
        for layer in (0, 1):
            log_width = state["model"][f"{stack}.pos_encodings.{layer}.log_width"]
            start = torch.log(torch.tensor([1.0, 2.0, 4.0, 8.0]))
            assert torch.allclose(log_width, start, atol=0.02), (stack, layer, log_width)

    hypotheses = cu.hypotheses((tmp_path / "laplace.gen").read_text(encoding="utf-8"))
    assert sorted(hypotheses) == list(range(sizes["test"]))
    assert all(text.split() for text in hypotheses.values())
