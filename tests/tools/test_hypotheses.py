"""``posenc-hypotheses``: from what fairseq-generate prints to the file posenc-score reads.

The expected lines are written out here by hand: the ``H-`` texts in id order, and for
``--detokenize`` the raw sentences the joiner-marked tokens stand for.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_utils import REPO_ROOT, run_script, subprocess_env, write_lines
from fairseq_posenc.tools.hypotheses import main
from fairseq_posenc.tools.textprep.text import JOINER, TOKENIZER

J = JOINER
#: fairseq-generate output in batch order (ids 2, 0, 1), with the S-/T-/D-/P- lines it
#: prints beside the H- lines; hypotheses after --remove-bpe, joiners kept.
LOG = (f"S-2\tJa ...\nH-2\t-0.31\tJa {J}, das Haus ist ({J}sehr{J}) groß {J}!\n"
       "D-2\t-0.31\tignored\nP-2\t-0.1 -0.2\n"
       f"S-0\tThe cat runs.\nT-0\tDie Katze läuft.\nH-0\t-0.12\tDie Katze läuft {J}.\n"
       f"H-1\t-0.20\tEin bekannter Hund läuft um 5 {J}:{J}30 {J}.\n")
TOKENS = [f"Die Katze läuft {J}.", f"Ein bekannter Hund läuft um 5 {J}:{J}30 {J}.",
          f"Ja {J}, das Haus ist ({J}sehr{J}) groß {J}!"]
RAW = ["Die Katze läuft.", "Ein bekannter Hund läuft um 5:30.",
       "Ja, das Haus ist (sehr) groß!"]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "generate.log").write_text(LOG, encoding="utf-8")
    write_lines(tmp_path / "test.de", RAW)
    bpe = tmp_path / "bpe"
    bpe.mkdir()
    # the keys posenc-prepare-corpus writes that detokenizing reads
    (bpe / "bpe.json").write_text(json.dumps(
        {"bpe": "subword-nmt", "langs": ["en", "de"], "tokenizer": TOKENIZER}))
    return tmp_path


def test_main_writes_hypotheses_in_test_order(files, capsys):
    assert main([str(files / "generate.log"), "--expected", "3"]) == 0
    assert capsys.readouterr().out.splitlines() == TOKENS
    # --ref counts the sentences instead of --expected
    assert main([str(files / "generate.log"), "--ref", str(files / "test.de")]) == 0
    assert capsys.readouterr().out.splitlines() == TOKENS
    assert main([str(files / "generate.log"), "--ref", str(files / "test.de"),
                 "--detokenize", str(files / "bpe")]) == 0
    assert capsys.readouterr().out.splitlines() == RAW


@pytest.mark.slow  # three interpreters importing fairseq
def test_console_script_and_module(files):
    """The installed ``posenc-hypotheses`` and ``python -m fairseq_posenc.tools.hypotheses``
    print the raw sentences, a file posenc-score takes line for line."""
    args = [files / "generate.log", "--ref", files / "test.de", "--detokenize", files / "bpe"]
    done = run_script("posenc-hypotheses", args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "".join(line + "\n" for line in RAW)
    module = subprocess.run([sys.executable, "-m", "fairseq_posenc.tools.hypotheses",
                             *map(str, args)], capture_output=True, text=True,
                            env=subprocess_env(), cwd=REPO_ROOT)
    assert module.returncode == 0 and module.stdout == done.stdout
    usage = run_script("posenc-hypotheses", ["--help"])
    assert usage.returncode == 0 and usage.stdout.startswith("usage: posenc-hypotheses")


@pytest.mark.parametrize("problem, message", [
    ("one more reference", "3 hypotheses for 4 test sentences"),
    ("missing log", "fairseq-generate output"),
    ("missing ref", "--ref"),
    ("no bpe.json", "has no bpe.json; pass the bpe/ directory"),
    ("no sentences", "--expected 0: pass the number of test sentences"),
])
def test_bad_input_says_what_to_do(files, capsys, problem, message):
    log, ref = files / "generate.log", files / "test.de"
    extra: list[str] = []
    if problem == "one more reference":
        write_lines(ref, [*RAW, "Noch ein Satz."])
    elif problem == "missing log":
        log = files / "nothing.log"
    elif problem == "missing ref":
        ref = files / "nothing.de"
    elif problem == "no bpe.json":
        extra = ["--detokenize", str(files)]
    argv = [str(log), "--ref", str(ref), *extra]
    if problem == "no sentences":
        argv = [str(log), "--expected", "0"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("posenc-hypotheses: error:") and message in captured.err


def test_count_is_required_once(files, capsys):
    """The number of test sentences comes from exactly one of --expected and --ref."""
    for argv in ([str(files / "generate.log")],
                 [str(files / "generate.log"), "--expected", "3", "--ref",
                  str(files / "test.de")]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert "--expected" in capsys.readouterr().err


def test_the_module_imports_only_the_standard_library():
    """Module-level imports of hypotheses.py (``--detokenize`` imports its helpers inside
    ``main``): the command adds no torch or fairseq import of its own."""
    tree = ast.parse((REPO_ROOT / "fairseq_posenc" / "tools" / "hypotheses.py").read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a module-level import from the package"
            names.add(node.module.split(".")[0])
    assert names - {"__future__"} <= set(sys.stdlib_module_names)


#: ``--nbest 2`` output as fairseq-generate prints it: each id's hypotheses best first.
NBEST = ("S-1\tb\nH-1\t-0.40\tzwei\nH-1\t-0.90\tzwei zwei\nD-1\t-0.40\tzwei\n"
         "S-0\ta\nH-0\t-0.10\teins\nH-0\t-0.70\teins eins\n")


def test_with_nbest_the_best_hypothesis_is_read(tmp_path, capsys):
    (tmp_path / "generate.log").write_text(NBEST, encoding="utf-8")
    assert main([str(tmp_path / "generate.log"), "--expected", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == ["eins", "zwei"]


@pytest.mark.slow  # a tiny model trained for 8 updates, translated twice
def test_nbest_output_of_fairseq_generate_reads_as_its_one_best(tmp_path):
    """fairseq-generate's own ``--nbest 3`` output: each sentence's hypothesis read is the
    one ``--nbest 1`` prints, and the highest-scoring of its three (a plain loop over the
    H- lines' scores)."""
    import torch

    from fairseq_posenc.tools.hypotheses import parse

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: more threads only contend on a busy machine
    try:
        one, three = _translated_twice(tmp_path)
    finally:
        torch.set_num_threads(threads)
    lines: dict[int, list[tuple[float, str]]] = {}
    for line in three.splitlines():
        if line.startswith("H-"):
            head, score, text = line.split("\t")
            lines.setdefault(int(head[2:]), []).append((float(score), text))
    assert sorted(lines) == list(range(11)) and {len(v) for v in lines.values()} == {3}
    assert len({text for v in lines.values() for _, text in v}) > 11  # three differ
    best = {i: max(v)[1] for i, v in lines.items()}
    assert parse(three.splitlines()) == best == parse(one.splitlines())


def _translated_twice(tmp_path: Path) -> tuple[str, str]:
    """fairseq-generate's output with --nbest 1 and --nbest 3 of one tiny model."""
    import tests.support.cli_utils as cu

    cu.create_parallel_corpus(tmp_path / "raw", num_train=100, num_valid=10, num_test=11)
    cu.preprocess_translation_data(tmp_path / "raw", tmp_path / "bin")
    cu.train_translation_model(tmp_path / "bin", tmp_path / "ckpt", "transformer_tiny_rope")
    checkpoint = tmp_path / "ckpt" / "checkpoint_last.pt"
    return (cu.generate_main(tmp_path / "bin", checkpoint),
            cu.generate_main(tmp_path / "bin", checkpoint, ["--nbest", "3"]))
