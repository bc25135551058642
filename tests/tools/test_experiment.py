"""fairseq_posenc.tools.experiment, the runner posenc-reproduce and posenc-compare share: reading
fairseq-train's log, the checkpoint rules, the fairseq-generate arguments, checkpoint
averaging and a failing fairseq run. The whole chain (train, translate, score) runs in
tests/tools/test_wmt_reproduce.py's smoke mode."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fairseq_posenc.tools.experiment import checkpoints, fairseq_run, trainlog, translate
from fairseq_posenc.plugin.extrapolation import LengthLimits, Untranslatable

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

# --- fairseq-train's log ---------------------------------------------------------------

# Lines of a real fairseq-train --log-format simple --log-interval 10
# --validate-interval-updates 20 run (a tiny model on a toy corpus, 28 updates an epoch),
# with some of the lines between them.
LOG = """\
2026-11-24 06:02:47 | INFO | fairseq_cli.train | {'_name': None, 'common': {'_name': None, 'log_interval': 10, 'log_format': 'simple'}, 'optimization': {'max_update': 60}}
2026-11-24 06:02:49 | INFO | fairseq.trainer | begin training epoch 1
2026-11-24 06:03:31 | INFO | train_inner | epoch 001:     10 / 28 loss=9.259, nll_loss=9.218, ppl=595.45, wps=344.1, ups=0.24, wpb=1427.7, bsz=81.6, num_updates=10, lr=0.0005, gnorm=1.534, train_wall=42, wall=44
2026-11-24 06:03:41 | INFO | train_inner | epoch 001:     20 / 28 loss=8.242, nll_loss=8.085, ppl=271.57, wps=1421.3, ups=1, wpb=1417.1, bsz=71.2, num_updates=20, lr=0.001, gnorm=0.89, train_wall=10, wall=54
2026-11-24 06:03:41 | INFO | fairseq_cli.train | begin validation on "valid" subset
2026-11-24 06:03:41 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.754 | nll_loss 7.54 | ppl 186.17 | wps 6714.9 | wpb 882 | bsz 48 | num_updates 20
2026-11-24 06:03:42 | INFO | fairseq.checkpoint_utils | Saved checkpoint /tmp/rt/ck/checkpoint_1_20.pt (epoch 1 @ 20 updates, score 7.754) (writing took 0.39022247299999435 seconds)
2026-11-24 06:03:55 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.173 | nll_loss 6.858 | ppl 116.02 | wps 8922.3 | wpb 882 | bsz 48 | num_updates 28 | best_loss 7.173
2026-11-24 06:03:56 | INFO | train | epoch 001 | loss 8.43 | nll_loss 8.291 | ppl 313.27 | wps 623.7 | ups 0.43 | wpb 1436.2 | bsz 71.4 | num_updates 28 | lr 0.000845154 | gnorm 1.068 | train_wall 66 | wall 69
2026-11-24 06:04:03 | INFO | train_inner | epoch 002:      2 / 28 loss=7.565, nll_loss=7.317, ppl=159.41, wps=678.9, ups=0.46, wpb=1482.8, bsz=59.2, num_updates=30, lr=0.000816497, gnorm=0.704, train_wall=21, wall=76
2026-11-24 06:04:08 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 6.523 | nll_loss 6.096 | ppl 68.42 | wps 11493 | wpb 882 | bsz 48 | num_updates 40 | best_loss 6.523
2026-11-24 06:04:08 | INFO | valid1 | epoch 002 | valid on 'valid1' subset | loss 6.9 | nll_loss 6.5 | ppl 90.5 | wps 11000 | wpb 880 | bsz 48 | num_updates 40
2026-11-24 06:04:50 | INFO | fairseq_cli.train | Stopping training due to num_updates: 60 >= max_update: 60
2026-11-24 06:04:52 | INFO | valid | epoch 003 | valid on 'valid' subset | loss 5.644 | nll_loss 5.091 | ppl 34.08 | wps 590.9 | wpb 882 | bsz 48 | num_updates 60 | best_loss 5.644
2026-11-24 06:04:52 | INFO | train | epoch 003 | loss 5.936 | nll_loss 5.437 | ppl 43.33 | wps 1221.9 | ups 0.81 | wpb 1511.2 | bsz 58 | num_updates 60 | lr 0.00057735 | gnorm 0.635 | train_wall 2 | wall 125
2026-11-24 06:04:52 | INFO | fairseq_cli.train | done training in 123.3 seconds
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.log"
    path.write_text(text)
    return path


def test_speed_is_the_median_of_the_progress_lines(tmp_path):
    """The progress lines' wps (344.1, 1421.3, 678.9), not the epochs' averages nor the
    validations'."""
    assert trainlog.words_per_second(write(tmp_path, LOG)) == pytest.approx(678.9)


def test_speed_of_a_training_shorter_than_one_log_interval(tmp_path):
    """No progress line: the epochs' averages; nothing at all: None."""
    epochs = "".join(line + "\n" for line in LOG.splitlines() if "train_inner" not in line)
    assert trainlog.words_per_second(write(tmp_path, epochs)) == pytest.approx(
        (623.7 + 1221.9) / 2)
    assert trainlog.words_per_second(write(tmp_path, "")) is None


def test_validation_losses_of_the_valid_subset_in_order(tmp_path):
    assert trainlog.validation_losses(write(tmp_path, LOG)) == [
        (20, 7.754), (28, 7.173), (40, 6.523), (60, 5.644)]
    assert trainlog.validation_losses(write(tmp_path, "")) == []


def test_last_update(tmp_path):
    assert trainlog.last_update(write(tmp_path, LOG)) == 60
    cut = "".join(line + "\n" for line in LOG.splitlines()[:9])  # killed in epoch 1
    assert trainlog.last_update(write(tmp_path, cut)) == 28
    assert trainlog.last_update(write(tmp_path, LOG.splitlines()[0] + "\n")) is None


# --- checkpoint rules -----------------------------------------------------------------


def test_rules_name_their_checkpoint():
    assert checkpoints.checkpoint_name("last") == "checkpoint_last.pt"
    assert checkpoints.checkpoint_name("best") == "checkpoint_best.pt"
    assert checkpoints.checkpoint_name("avg5") == "checkpoint_avg5.pt"
    assert checkpoints.checkpoint_name("avg12") == "checkpoint_avg12.pt"
    for rule in ("avg1", "avg0", "avg05", "avg", "avgx", "first", "Last", " best", ""):
        with pytest.raises(ValueError, match="checkpoint rule"):
            checkpoints.check_rule(rule)
        with pytest.raises(ValueError):
            checkpoints.checkpoint_name(rule)


def test_averaging_keeps_the_interval_checkpoints():
    """A checkpoint every hundredth of the training (at least every update), the last N
    kept; the other rules need none."""
    assert checkpoints.interval_flags("avg5", 100_000) == [
        "--save-interval-updates", "1000", "--keep-interval-updates", "5"]
    assert checkpoints.interval_flags("avg2", 50) == [
        "--save-interval-updates", "1", "--keep-interval-updates", "2"]
    assert checkpoints.interval_flags("last", 100_000) == []
    assert checkpoints.interval_flags("best", 100_000) == []
    with pytest.raises(ValueError):
        checkpoints.interval_flags("avg1", 100)


def fake_checkpoint(path: Path, value: float) -> None:
    torch.save({"model": {"w": torch.full((2,), value), "n": torch.tensor([int(value)])},
                "extra": value}, path)


def test_final_checkpoint_by_rule(tmp_path):
    said: list[str] = []
    with pytest.raises(SystemExit, match="checkpoint_last.pt does not exist: train first"):
        checkpoints.final_checkpoint(tmp_path, "last")
    (tmp_path / "checkpoint_last.pt").write_bytes(b"")
    assert checkpoints.final_checkpoint(tmp_path, "last") == tmp_path / "checkpoint_last.pt"
    with pytest.raises(SystemExit, match="validation set.*--disable-validation"):
        checkpoints.final_checkpoint(tmp_path, "best")
    (tmp_path / "checkpoint_best.pt").write_bytes(b"")
    assert checkpoints.final_checkpoint(tmp_path, "best") == tmp_path / "checkpoint_best.pt"
    # no interval checkpoint: the last one, with a warning
    assert checkpoints.final_checkpoint(tmp_path, "avg2", say=said.append) == (
        tmp_path / "checkpoint_last.pt")
    assert said == [f"warning: 0 interval checkpoints in {tmp_path}, avg2 averages 2"]
    # the last two by their number of updates (90 before 100), written as checkpoint_avg2.pt
    for epoch, updates, value in ((1, 80, 0.0), (2, 90, 1.0), (3, 100, 3.0)):
        fake_checkpoint(tmp_path / f"checkpoint_{epoch}_{updates}.pt", value)
    said.clear()
    out = checkpoints.final_checkpoint(tmp_path, "avg2", say=said.append)
    assert out == tmp_path / "checkpoint_avg2.pt" and said == []
    assert torch.load(out)["model"]["w"].tolist() == [2.0, 2.0]
    # the average is no interval checkpoint: a second call averages the same two
    assert torch.load(checkpoints.final_checkpoint(tmp_path, "avg2"))["extra"] == 3.0
    with pytest.raises(ValueError):
        checkpoints.final_checkpoint(tmp_path, "avg1")


def test_average_checkpoints(tmp_path):
    """Floating-point parameters averaged, everything else from the last checkpoint."""
    paths = [tmp_path / "a.pt", tmp_path / "b.pt"]
    fake_checkpoint(paths[0], 1.0)
    fake_checkpoint(paths[1], 2.0)
    out = checkpoints.average_checkpoints(paths, tmp_path / "avg.pt")
    assert out == tmp_path / "avg.pt" and not (tmp_path / "avg.tmp").exists()
    state = torch.load(out)
    assert state["model"]["w"].tolist() == [1.5, 1.5] and state["model"]["w"].dtype == torch.float32
    assert state["model"]["n"].tolist() == [2] and state["extra"] == 2.0


# --- fairseq-generate -----------------------------------------------------------------


USER_DIR = str(Path(__file__).resolve().parents[2] / "fairseq_posenc")


def test_generate_args_decode_every_sentence_with_beam_10():
    """As posenc-reproduce decodes DIET's EN-DE newstest2018 cell (GNMT's penalty)."""
    assert translate.USER_DIR == fairseq_run.USER_DIR and str(fairseq_run.USER_DIR) == USER_DIR
    assert (translate.BEAM, translate.LENPEN) == (10, 0.6)
    args = translate.generate_args(Path("D/wmt18_en_de/bin"), Path("c.pt"), "test1", "en", "de",
                                   Path("R"), task="translation_gnmt")
    assert args == [
        "D/wmt18_en_de/bin", "--user-dir", USER_DIR, "--task", "translation_gnmt",
        "--source-lang", "en", "--target-lang", "de", "--path", "c.pt",
        "--gen-subset", "test1", "--beam", "10", "--lenpen", "0.6", "--remove-bpe",
        "--required-batch-size-multiple", "1", "--max-tokens", "8000",
        "--results-path", "R", "--num-workers", "0"]


def test_generate_args_skip_what_the_model_cannot_represent():
    """SentencePiece data, a source over a 64-position table skipped, outputs capped by the
    table (63) and then by ``max_output`` (32): fairseq reads the last of a repeated flag."""
    limits = Untranslatable(LengthLimits(64, 64, "--max-source-positions",
                                         "--max-target-positions"), frozenset({3}))
    args = translate.generate_args(Path("D/wmt17_en_de/bin"), Path("c.pt"), "test", "en", "de",
                                   Path("R"), bpe="sentencepiece", limits=limits,
                                   max_output=32)
    assert args == [
        "D/wmt17_en_de/bin", "--user-dir", USER_DIR, "--task", "translation",
        "--source-lang", "en", "--target-lang", "de", "--path", "c.pt",
        "--gen-subset", "test", "--beam", "10", "--lenpen", "0.6",
        "--post-process", "sentencepiece",
        "--required-batch-size-multiple", "1", "--max-tokens", "8000",
        "--results-path", "R", "--num-workers", "0",
        "--max-source-positions", "64", "--skip-invalid-size-inputs-valid-test",
        "--max-len-a", "0", "--max-len-b", "63", "--max-len-a", "0", "--max-len-b", "32"]
    # a looser max_output than the table's cap adds nothing; beam and penalty are settable
    args = translate.generate_args(Path("B"), Path("c.pt"), "test", "en", "de", Path("R"),
                                   limits=limits, max_output=100, beam=4, lenpen=1.0)
    assert args.count("--max-len-b") == 1 and args[args.index("--beam") + 1] == "4"
    assert args[args.index("--lenpen") + 1] == "1.0"


def test_missing_hypotheses_stop_the_run(tmp_path):
    out = tmp_path / "generate-test.txt"
    out.write_text("H-1\t-0.2\tsecond\nS-0\ta\nH-0\t-0.1\tfirst\n")
    assert translate.hypotheses(out, 2) == ["first", "second"]
    assert translate.hypotheses(out, 3, frozenset({2})) == ["first", "second", ""]
    with pytest.raises(SystemExit, match="2 hypotheses for 3 test sentences"):
        translate.hypotheses(out, 3)


# --- running fairseq --------------------------------------------------------------------


def test_a_failing_fairseq_run_names_its_log_and_shows_its_end(tmp_path):
    """In process, argparse's error (a SystemExit) is caught like any failure: the log
    (created with its parents) holds fairseq's message, the error shows its end."""
    said: list[str] = []
    log = tmp_path / "run" / "train.log"
    with pytest.raises(SystemExit) as failure:
        fairseq_run.run_fairseq("fairseq-train", [str(tmp_path), "--arch", "transformer_tiny_t5",
                                                  "--no-such-flag"],
                                log=log, in_process=True, say=said.append)
    message = str(failure.value)
    assert message.startswith("fairseq-train failed (exit code 2)") and str(log) in message
    assert "--no-such-flag" in log.read_text() and "--no-such-flag" in message
    assert said == [f"fairseq-train ... (log: {log})"]
    with pytest.raises(ValueError, match="fairseq-preprocess"):
        fairseq_run._run_in_process("fairseq-preprocess", [])
