"""How posenc-compare's runs validate, save and stop (``compare/stopping.py``), and
``--until-converged`` end to end.

References: the patience rule counted by hand on short loss sequences; fairseq's own log
(its "early stop" line, the checkpoint a resumed training loads, the updates it validated
at); the files a finished run left, which a rerun must not touch. Bad input stops before
anything is written.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_utils import subprocess_env
from tests.tools.test_compare import ROOT, files, raw, run_main  # noqa: F401  (raw: fixture)
from fairseq_posenc.tools.compare import cli, execute, stopping
from fairseq_posenc.tools.compare.plan import Run, train_args
from fairseq_posenc.tools.experiment import trainlog
from tests.fixtures.make_record_checkpoints import write_checkpoint
from tests.integration.test_damaged_checkpoints import cut


def settings_of(tmp_path: Path, *extra: str):
    parser = cli.parser()
    args = parser.parse_args([str(tmp_path / "out"), "--data", str(tmp_path), "-s", "en",
                              "-t", "de", "--encodings", "t5", "--cpu", *extra])
    return cli.settings_of(args, parser)


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


# --- the rule and the flags --------------------------------------------------------------

@pytest.mark.parametrize("losses, patience, stop", [
    ([5.0, 4.0, 4.5, 4.2, 4.1], 3, 25),  # best at 10, then three without a new best
    ([5.0, 4.0, 4.5, 3.9, 4.1, 4.0], 3, None),  # 3.9 is a new best: the count starts again
    ([5.0, 4.0, 4.0, 4.0], 2, 20),  # an equal loss is not a new best
    ([5.0, 4.9, 4.8], 1, None),  # every validation a new best
    ([5.0, 5.1], 1, 10),
])
def test_a_run_converges_after_patience_validations_without_a_new_best(losses, patience, stop):
    validations = [(5 * (i + 1), loss) for i, loss in enumerate(losses)]
    assert stopping.stop_point(validations, patience) == stop


@pytest.mark.parametrize("extra, expected", [
    # --max-update: 20 validations, a checkpoint at each, the newest interval file kept
    (["--max-update", "1000"], {"--validate-interval-updates": "50",
                                "--save-interval-updates": "50",
                                "--keep-interval-updates": "1", "--patience": None}),
    # avgN: a checkpoint every hundredth (fairseq validates at each), N kept
    (["--max-update", "1000", "--checkpoint", "avg5"],
     {"--validate-interval-updates": "50", "--save-interval-updates": "10",
      "--keep-interval-updates": "5"}),
    # --max-epoch: fairseq's validation and checkpoint at each epoch's end
    (["--max-epoch", "3"], {"--validate-interval-updates": None,
                            "--save-interval-updates": None}),
    # --until-converged: every --validate-every updates and nowhere else, fairseq's patience
    (["--max-update", "1000", "--until-converged"],
     {"--validate-interval-updates": "100", "--save-interval-updates": "100",
      "--keep-interval-updates": "1", "--patience": "5",
      "--validate-interval": str(stopping.NEVER), "--save-interval": str(stopping.NEVER),
      "--max-update": "1000"}),
    (["--max-update", "1000", "--until-converged", "--patience", "3", "--validate-every",
      "40", "--checkpoint", "avg4"],
     {"--validate-interval-updates": "40", "--save-interval-updates": "40",
      "--keep-interval-updates": "4", "--patience": "3"}),
])
def test_each_mode_validates_and_saves_at_the_same_updates(tmp_path, extra, expected):
    settings = settings_of(tmp_path, *extra)
    corpus = type("Corpus", (), {"bin": tmp_path, "source_lang": "en", "target_lang": "de"})
    args = train_args(settings, corpus, Run("t5", 1), tmp_path)
    for name, value in expected.items():
        assert flag(args, name) == value, name


def test_until_converged_evaluates_the_best_checkpoint_by_default(tmp_path):
    assert settings_of(tmp_path, "--max-update", "500", "--until-converged").checkpoint == "best"
    assert settings_of(tmp_path, "--max-update", "500").checkpoint == "last"
    assert settings_of(tmp_path, "--max-update", "500", "--until-converged",
                       "--checkpoint", "last").checkpoint == "last"


# --- the validations a training kept --------------------------------------------------------

def log_of(path: Path, validations, loaded: int | None = None) -> Path:
    lines = []
    if loaded is not None:
        lines.append(f"2026-11-27 10:00:00 | INFO | fairseq.trainer | Loaded checkpoint "
                     f"x/checkpoint_last.pt (epoch 3 @ {loaded} updates)\n")
    for update, loss in validations:
        lines.append(f"2026-11-27 10:00:01 | INFO | valid | epoch 003 | valid on 'valid' "
                     f"subset | loss {loss} | nll_loss 3.1 | ppl 8.6 | num_updates {update}\n")
        lines.append(f"2026-11-27 10:00:02 | INFO | fairseq.checkpoint_utils | Saved checkpoint "
                     f"x/checkpoint_3_{update}.pt (epoch 3 @ {update} updates, score {loss}) "
                     "(writing took 0.1 seconds)\n")
    path.write_text("".join(lines))
    return path


def test_a_resumed_part_discards_what_the_killed_one_validated_after_its_checkpoint(tmp_path):
    first = log_of(tmp_path / "train.1.log", [(10, 5.0), (20, 4.5), (30, 4.4)])
    # killed after validating at 30 but before that checkpoint was saved: resumes at 20
    second = log_of(tmp_path / "train.2.log", [(30, 4.41), (40, 4.3)], loaded=20)
    # killed before its first checkpoint of a restart from nothing: everything again
    third = log_of(tmp_path / "train.log", [(10, 5.01)])
    assert trainlog.history([first, second]) == [(10, 5.0), (20, 4.5), (30, 4.41), (40, 4.3)]
    assert trainlog.history([first, second, third]) == [(10, 5.01)]
    assert trainlog.resumed_at(second) == 20 and trainlog.resumed_at(first) is None


@pytest.mark.parametrize("logged", [
    20,  # killed after checkpoint_last.pt of update 30 was copied, before the log's line
    40,  # checkpoint_last.pt of update 40 replaced by a copy of an earlier one (update 30)
])
def test_the_resume_line_names_the_update_of_the_checkpoint_fairseq_loads(tmp_path, logged):
    run = Run("t5", 1)
    # as fairseq-train saves it after 30 updates (fairseq's own Trainer.save_checkpoint)
    write_checkpoint("transformer_tiny_t5", [], run.save_dir(tmp_path) / "checkpoint_last.pt",
                     updates=30, epoch=2)
    log = log_of(run.train_log(tmp_path), [(10, 5.0), (logged, 4.5)])
    assert re.findall(r"Saved checkpoint .* @ (\d+) updates", log.read_text())[-1] == str(logged)
    assert execute.resume_note(run.save_dir(tmp_path)) == ", resuming at update 30"
    assert execute.resume_note(tmp_path / "elsewhere") == ""  # nothing to resume from


def test_a_damaged_last_checkpoint_stops_the_run_before_fairseq_starts(tmp_path):
    run = Run("t5", 1)
    write_checkpoint("transformer_tiny_t5", [], tmp_path / "whole.pt", updates=30)
    run.save_dir(tmp_path).mkdir(parents=True)
    last = cut(tmp_path / "whole.pt", run.save_dir(tmp_path) / "checkpoint_last.pt", 0.5)
    settings = settings_of(tmp_path, "--max-update", "60")
    with pytest.raises(SystemExit, match=f"^posenc-compare: t5 seed 1: {last} is damaged: "
                                         ".*Delete it"):
        execute.train(settings, None, run, tmp_path, lambda _: None)
    assert not run.train_log(tmp_path).exists()  # fairseq-train never started


# --- bad input ---------------------------------------------------------------------------

@pytest.mark.parametrize("extra, says", [
    (["--max-epoch", "5", "--until-converged"],
     "pass --max-update instead of --max-epoch"),
    (["--max-update", "300", "--until-converged", "--patience", "0"],
     "--patience 0: a run stops after P validations"),
    (["--max-update", "300", "--until-converged", "--validate-every", "400"],
     "--validate-every 400 is above the cap --max-update 300"),
    (["--max-update", "50", "--until-converged"],  # the tiny default of 100
     "--validate-every 100 is above the cap --max-update 50"),
    (["--max-update", "300", "--patience", "3"], "--patience is for --until-converged"),
    (["--max-update", "300", "--validate-every", "30"],
     "--validate-every is for --until-converged"),
    (["--max-update", "300", "--train-args=--patience 3"],
     "--patience: posenc-compare sets it for every run: set it with posenc-compare's "
     "--until-converged --patience P"),
    (["--max-update", "300", "--train-args=--save-interval-updates 7"],
     "--save-interval-updates: posenc-compare sets it for every run: every run saves a "
     "checkpoint at each validation"),
    (["--max-update", "300", "--until-converged", "--train-args=--validate-interval 2"],
     "--validate-interval: posenc-compare sets it for every run of this comparison"),
])
def test_bad_stopping_options_stop_before_anything_is_written(raw, tmp_path, capsys, extra,
                                                              says):
    out = tmp_path / "cmp"
    said = run_main([str(out), "--data", str(raw), "-s", "en", "-t", "de",
                     "--encodings", "t5", "--cpu", "--test", "test", *extra], capsys)
    assert says in said, said
    assert not out.exists()


# --- end to end ------------------------------------------------------------------------------

def command(out: Path, data: Path, cap: int) -> list[str]:
    # 60 training pairs, a learning rate without warm-up: the runs level off in tens of updates
    return [sys.executable, "-m", "fairseq_posenc.tools.compare", str(out), "--data", str(data),
            "-s", "en", "-t", "de", "--encodings", "sinusoidal", "t5", "--until-converged",
            "--patience", "2", "--validate-every", "5", "--max-update", str(cap),
            "--test", "test", "--cpu", "--bpe-merges", "100", "--workers", "1",
            "--parallel", "2", "--train-args=--warmup-updates 1 --lr 0.01"]


def compare(out: Path, data: Path, cap: int) -> str:
    done = subprocess.run(command(out, data, cap), capture_output=True, text=True,
                          env=subprocess_env(), timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stderr


@pytest.mark.slow  # two tiny runs to convergence, a rerun, a raised cap
def test_runs_stop_when_converged_or_at_the_cap_and_a_raise_continues_only_the_capped(
        tmp_path):
    data = tmp_path / "raw"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_toy_corpus.py"), "--out",
                    str(data), "--seed", "3", "--train", "60", "--valid", "20", "--test", "10",
                    "--test-long", "4", "--long-min-len", "40", "--long-max-len", "50"],
                   check=True, capture_output=True)
    out, cap = tmp_path / "cmp", 50
    compare(out, data, cap)
    runs = {r["encoding"]: r for r in json.loads((out / "report.json").read_text())["runs"]}
    for encoding, record in runs.items():
        log = (out / "runs" / encoding / "seed1" / "train.log").read_text()
        validated = [int(u) for u in re.findall(r"valid on 'valid' subset .* num_updates (\d+)",
                                                log)]
        assert validated == list(range(5, record["stopped_at"] + 1, 5))  # every 5, no more
        if record["stopped"] == "converged":  # fairseq stopped it, where the rule says
            assert "early stop since valid performance hasn't improved for last 2" in log
            assert record["stopped_at"] < cap and record["still_improving"] is False
            losses = [loss for _, loss in record["validation"]]
            assert min(losses[-2:]) >= min(losses[:-2])  # two without a new best
        else:
            assert record["stopped"] == "cap" and record["stopped_at"] == cap
            assert "early stop" not in log
            assert record["still_improving"] is not None  # the fall rule's verdict
        assert record["checkpoint"].endswith("checkpoint_best.pt")
        assert record["best_loss"] == min(loss for _, loss in record["validation"])
    stopped = {e: r["stopped"] for e, r in runs.items()}
    assert sorted(stopped.values()) == ["cap", "converged"], stopped  # one of each, at 50
    converged = next(e for e, s in stopped.items() if s == "converged")
    capped = next(e for e, s in stopped.items() if s == "cap")
    report = (out / "report.md").read_text()
    speed = json.loads((out / "report.json").read_text())["speed"]
    assert speed["comparable"] and speed["placement"].startswith("runs trained 2 at once, ")
    assert f"from fairseq's words per second: {speed['placement']}." in report
    assert f"converged at update {runs[converged]['stopped_at']}" in report
    assert f"cap reached at update {cap}" in report

    before = {e: files(out / "runs" / e / "seed1") for e in runs}
    again = compare(out, data, cap)  # the same command: nothing trains
    assert "training" not in again
    assert all(files(out / "runs" / e / "seed1") == before[e] for e in runs)

    compare(out, data, 400)  # a raised cap: the run at the cap continues, the other stays
    assert files(out / "runs" / converged / "seed1") == before[converged]
    continued = (out / "runs" / capped / "seed1" / "train.log").read_text()
    assert "Loaded checkpoint" in continued and f"@ {cap} updates)" in continued
    raised = {r["encoding"]: r for r in json.loads((out / "report.json").read_text())["runs"]}
    assert raised[capped]["stopped"] == "converged" and cap < raised[capped]["stopped_at"] < 400
    assert raised[capped]["budgets"] == [cap, 400] and raised[converged]["budgets"] == [cap]
