"""``posenc-convert`` (``tools/convert_cli.py``): what it prints, what it writes, and how it
refuses.

The command runs as a user runs it (``main`` with their argument list; once as a process,
``python -m fairseq_posenc.tools.convert_cli``, which is what the console script calls) on stock
checkpoints saved by fairseq's trainer. References: the report and the fine-tuning command of
the library function it fronts (``plugin/convert.py``), the file's own SHA-256, and what is on
disk after a refusal (nothing new, an existing file unchanged).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from fairseq_posenc.plugin.checkpoint import load
from fairseq_posenc.plugin.convert import convert
from fairseq_posenc.tools.convert_cli import main
from tests.support.cli_utils import REPO_ROOT, subprocess_env
from tests.support.conversion import VARIANTS, write_stock


def run(argv, capsys) -> tuple[int, str, str]:
    """``main(argv)``: its exit status (a refusal's ``SystemExit`` message as status 1) and
    what it printed."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return code, out, err


def test_it_prints_what_it_did_and_ends_with_the_fine_tuning_command(tmp_path, capsys):
    write_stock(tmp_path / "stock.pt", VARIANTS["learned-unscaled"][0])
    code, out, err = run([tmp_path / "stock.pt", tmp_path / "out.pt", "--pos-encoding", "t5",
                          "--t5-num-buckets", "16"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    digest = hashlib.sha256((tmp_path / "stock.pt").read_bytes()).hexdigest()
    assert lines[0] == (f"posenc-convert: read {tmp_path / 'stock.pt'}: fairseq's transformer "
                        "(--arch transformer), input positions learned, 0 updates (sha256 "
                        f"{digest})")
    assert lines[1] == ("converted to --pos-encoding t5; new parameters start as fairseq-train "
                        "--seed 1 starts them")
    reference = convert(tmp_path / "stock.pt", ["--pos-encoding", "t5", "--t5-num-buckets", "16"])
    assert lines[2:2 + len(reference.report.lines())] == [
        f"  {line}" for line in reference.report.lines()]
    assert "  new:" in lines and "  dropped:" in lines
    assert ("    encoder.embed_positions.weight [26, 16] (tensor): the encoder's input "
            "positions: t5 turns them off (--keep-input-positions keeps them)") in lines
    assert lines[-1] == reference.finetune_command(tmp_path / "out.pt")
    assert "--t5-num-buckets 16" in lines[-1] and lines[-1].startswith("fairseq-train ")
    written = load(tmp_path / "out.pt")
    assert written["cfg"]["model"].t5_num_buckets == 16
    assert not (tmp_path / "out.pt.tmp").exists()  # written as a temporary file, renamed


def test_an_existing_output_is_replaced_only_with_force(tmp_path, capsys):
    write_stock(tmp_path / "stock.pt")
    (tmp_path / "out.pt").write_text("an earlier file")
    code, out, err = run([tmp_path / "stock.pt", tmp_path / "out.pt", "--pos-encoding", "rope"],
                         capsys)
    assert (code, out) == (1, "")
    assert err.strip() == (f"posenc-convert: error: {tmp_path / 'out.pt'} exists: give another "
                           "path, or --force to replace it")
    assert (tmp_path / "out.pt").read_text() == "an earlier file"
    code, _, err = run([tmp_path / "stock.pt", tmp_path / "out.pt", "--pos-encoding", "rope",
                        "--force"], capsys)
    assert code == 0, err
    assert load(tmp_path / "out.pt")["cfg"]["model"].pos_encoding == "rope"


@pytest.mark.parametrize("make, flags, message", [
    ("cut", ["--pos-encoding", "rope"], "cut.pt is damaged: torch cannot read it"),
    ("stock", ["--pos-encoding", "learned", "--max-source-positions", "30"],
     "learned encoder positions are a table of 24"),
    ("stock", ["--pos-encoding", "nope"], "argument --pos-encoding: invalid choice: 'nope'"),
    ("missing", ["--pos-encoding", "rope"], "missing.pt: no such file"),
])
def test_a_refusal_is_one_line_and_writes_nothing(tmp_path, capsys, make, flags, message):
    write_stock(tmp_path / "stock.pt", VARIANTS["learned-unscaled"][0])
    whole = (tmp_path / "stock.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(whole[: len(whole) // 3])
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = run([tmp_path / f"{make}.pt", tmp_path / "out" / "new.pt", *flags], capsys)
    assert (code, out) == (1, "")
    assert len(err.strip().splitlines()) == 1 and err.startswith("posenc-convert: error: ")
    assert message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.slow  # a process that imports fairseq, torch and the plugin
def test_the_command_refuses_in_one_line_without_a_traceback(tmp_path):
    write_stock(tmp_path / "stock.pt")
    (tmp_path / "out.pt").write_text("kept")
    done = subprocess.run(
        [sys.executable, "-m", "fairseq_posenc.tools.convert_cli", str(tmp_path / "stock.pt"),
         str(tmp_path / "out.pt"), "--pos-encoding", "rope"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == (f"posenc-convert: error: {tmp_path / 'out.pt'} exists: give "
                                   "another path, or --force to replace it"), done.stderr
    assert (tmp_path / "out.pt").read_text() == "kept"


def test_an_encoding_option_before_in_and_out_is_refused_not_read_as_in(tmp_path, capsys):
    write_stock(tmp_path / "stock.pt")
    code, out, err = run(["--t5-num-buckets", "8", tmp_path / "stock.pt", tmp_path / "out.pt",
                          "--pos-encoding", "t5"], capsys)
    assert code == 2 and out == ""
    assert "give IN and OUT first, then the encodings' options (--t5-num-buckets came" in err
    assert not (tmp_path / "out.pt").exists()
    # a known option before them is read as argparse reads it
    code, out, err = run(["--pos-encoding", "t5", tmp_path / "stock.pt", tmp_path / "out.pt",
                          "--t5-num-buckets", "8"], capsys)
    assert code == 0, err
    assert load(tmp_path / "out.pt")["cfg"]["model"].t5_num_buckets == 8


def test_a_conversion_in_process_leaves_fairseqs_log_level_as_it_was(tmp_path, capsys):
    import logging

    write_stock(tmp_path / "stock.pt")
    fairseq_log = logging.getLogger("fairseq")
    before = fairseq_log.level
    code, _, err = run([tmp_path / "stock.pt", tmp_path / "out.pt", "--pos-encoding", "t5"],
                       capsys)
    assert code == 0, err
    assert fairseq_log.level == before
