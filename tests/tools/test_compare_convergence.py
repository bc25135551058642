"""posenc-compare's still-improving rule, its marker in the report, and the raise of a finished
comparison's --max-update.

The rule is checked on hand-made validation curves whose falls and spreads are worked out
by hand (and the least-squares line by numpy's polyfit), the marker on a report built from
fairseq-style training logs, the raise on a tiny real comparison: fairseq's own log says
where the continued training started and ended, and its checkpoint files which updates
``avgN`` averages.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.cli_utils import subprocess_env
from tests.support.compare_reports import fake_comparison
from fairseq_posenc.tools.compare import budget, cli, convergence, data, report, settings as settings_mod
from fairseq_posenc.tools.experiment.fairseq_run import run_fairseq
from fairseq_posenc.tools.experiment.trainlog import validation_losses
from fairseq_posenc.tools.compare.plan import Run, train_args
from fairseq_posenc.tools.compare.summary import run_records

ROOT = Path(__file__).resolve().parents[2]


def line(start: float, end: float, first: int = 800, last: int = 1000, step: int = 50):
    """Validations every ``step`` updates from ``step`` on, the loss falling linearly from
    ``start`` (at ``first``) to ``end`` (at ``last``), higher before ``first``."""
    slope = (end - start) / (last - first)
    return [(u, start + slope * (u - first)) for u in range(step, last + 1, step)]


# --- the rule on hand-made curves ------------------------------------------------------------

def test_one_seed_falling_two_percent_is_still_improving():
    found = convergence.verdict(line(5.0, 4.9))
    assert found.still_improving is True
    assert found.window == (800, 1000) and found.points == 5  # 800, 850, ..., 1000
    assert found.fall == pytest.approx(0.1) and found.relative_fall == pytest.approx(0.02)
    assert found.threshold == pytest.approx(0.05)  # 1% of 5.0
    assert "fell 2.0% (800-1000), more than 1%" in found.reason


def test_one_seed_falling_half_a_percent_or_flat_is_not():
    assert convergence.verdict(line(5.0, 4.975)).still_improving is False  # 0.5%
    flat = convergence.verdict(line(4.0, 4.0))
    assert flat.still_improving is False and flat.fall == pytest.approx(0.0)
    assert "not more than 1%" in flat.reason
    rising = convergence.verdict(line(4.0, 4.2))  # over-fitting: not improving
    assert rising.still_improving is False and rising.fall == pytest.approx(-0.2)


def test_the_fall_is_the_least_squares_line_not_its_first_point():
    # a high first validation in the window: first against last is 0.05 / 4.05 = 1.23%;
    # the line through all five falls 0.04 from 4.03 (by hand: slope -0.01 per 50 updates)
    points = [(u, 6.0 - u / 400) for u in range(50, 800, 50)]
    points += [(800, 4.05), (850, 4.0), (900, 4.0), (950, 4.0), (1000, 4.0)]
    found = convergence.verdict(points)
    assert found.fall == pytest.approx(0.04)
    assert found.relative_fall == pytest.approx(0.04 / 4.03, abs=1e-4)
    assert found.still_improving is False
    slope, intercept = np.polyfit([u for u, _ in points[-5:]], [v for _, v in points[-5:]], 1)
    assert found.fall == pytest.approx(-slope * 200, abs=1e-4)
    assert found.relative_fall == pytest.approx(-slope * 200 / (intercept + slope * 800),
                                                abs=1e-4)


def records(finals: list[float], fall: float) -> list[dict]:
    """Trained runs of one encoding, each falling ``fall`` over its last 20% of updates to
    its final loss."""
    return [{"encoding": "t5", "seed": k, "checkpoint": "ckpt",
             "validation": [list(p) for p in line(final + fall, final)]}
            for k, final in enumerate(finals, 1)]


def test_several_seeds_compare_the_fall_with_their_spread():
    # final losses 4.90, 4.95, 5.00: sample sd 0.05, below a fall of 0.1
    tight = records([4.90, 4.95, 5.00], 0.1)
    convergence.annotate(tight)
    assert [r["still_improving"] for r in tight] == [True, True, True]
    assert tight[0]["convergence"]["threshold"] == pytest.approx(0.05)
    assert "the seeds' sd 0.050" in tight[0]["convergence"]["reason"]
    # final losses 4.7, 4.9, 5.1: sd 0.2, above the same fall (2% of 5.1, more than 1%:
    # the spread decides once there are seeds)
    loose = records([4.7, 4.9, 5.1], 0.1)
    convergence.annotate(loose)
    assert [r["still_improving"] for r in loose] == [False, False, False]
    assert loose[2]["convergence"]["threshold"] == pytest.approx(0.2)
    assert loose[2]["convergence"]["threshold_rule"] == \
        "the sd of 3 seeds' final validation losses"


def test_too_few_validations_or_none_is_unknown_with_the_reason():
    per_epoch = [(100 * e, 6.0 - 0.3 * e) for e in range(1, 6)]  # --max-epoch 5
    found = convergence.verdict(per_epoch)
    assert found.still_improving is None and found.points == 2  # 400 and 500
    assert "2 validation(s) in the last 20% of its updates (400-500)" in found.reason
    assert "--max-epoch 10 or more" in found.reason
    ten = [(100 * e, 6.0 - 0.3 * e) for e in range(1, 11)]  # --max-epoch 10: 800, 900, 1000
    assert convergence.verdict(ten).points == 3
    assert convergence.verdict([]).still_improving is None
    unfinished = {"encoding": "t5", "seed": 1, "checkpoint": None,
                  "validation": [[10, 9.0], [20, 8.0], [30, 7.0]]}
    convergence.annotate([unfinished])
    assert unfinished["still_improving"] is None
    assert unfinished["convergence"]["reason"] == "its training has not finished"
    assert "--max-epoch 10" in convergence.epochs_note(5)
    assert convergence.epochs_note(10) is None


def test_a_resumed_part_replaces_the_validations_it_repeats():
    assert convergence.curve([(10, 5.0), (20, 4.0), (20, 4.5), (30, 4.2), (10, 5.1)]) == [
        (10, 5.1), (20, 4.5), (30, 4.2)]


@pytest.mark.parametrize("max_update, every", [(12, 1), (1200, 60), (4000, 200), (25, 1)])
def test_runs_validate_at_least_ten_times_under_max_update(tmp_path, max_update, every):
    settings = settings_of(tmp_path, "--max-update", str(max_update))
    corpus = type("Corpus", (), {"bin": tmp_path, "source_lang": "en", "target_lang": "de"})
    args = train_args(settings, corpus, Run("t5", 1), tmp_path)
    assert args[args.index("--validate-interval-updates") + 1] == str(every)
    assert max_update // every >= 10
    epochs = train_args(settings_of(tmp_path, "--max-epoch", "3"), corpus, Run("t5", 1),
                        tmp_path)
    assert "--validate-interval-updates" not in epochs


# --- the marker in report.json and report.md -------------------------------------------------

def settings_of(data: Path, *extra: str) -> settings_mod.Settings:
    parser = cli.parser()
    args = parser.parse_args([str(data / "out"), "--data", str(data), "-s", "en", "-t", "de",
                              "--encodings", "t5", "--cpu", *extra])
    return cli.settings_of(args, parser)


def test_a_run_still_improving_marks_its_rows_in_every_table_and_report_json(tmp_path):
    out = tmp_path / "cmp"
    fake_comparison(out, {("sinusoidal", 1): line(4.0, 4.0), ("t5", 1): line(5.0, 4.8),
                          ("alibi", 1): line(4.5, 4.5)})
    settings = settings_of(tmp_path, "--max-update", "1000")
    runs = [Run("sinusoidal", 1), Run("t5", 1), Run("alibi", 1)]
    records = run_records(out, settings, runs)
    assert [r["still_improving"] for r in records] == [False, True, False]
    assert records[1]["convergence"]["relative_fall"] == pytest.approx(0.04)  # 0.2 of 5.0
    assert all(r["budgets"] == [1000] and r["earlier"] == [] for r in records)
    json.loads(json.dumps(records))  # what report.json holds

    # t5's row against the baseline is marked; alibi's is not
    rows = [{"split": "test", "encoding": e, "n": 1, "bleu_mean": b, "bleu_sd": None,
             "chrf_mean": b + 10, "chrf_sd": None, "p_value": None if e == "sinusoidal" else 0.001,
             "chrf_p_value": None if e == "sinusoidal" else 0.001, "significant": True,
             "chrf_significant": True, "params_added": 0, "speed_ratio": 1.0,
             "beyond_training": 0, "sentences": 10,
             "buckets": [{"label": "(0, 20]", "sentences": 10, "untranslated": 0,
                          "bleu": b, "chrf": b + 10}],
             **convergence.row_flag(records, [e, "sinusoidal"])}
            for e, b in (("sinusoidal", 30.0), ("t5", 24.26), ("alibi", 29.0))]
    assert [r["still_improving"] for r in rows] == [False, True, False]
    assert rows[1]["still_improving_runs"] == ["t5 seed 1"]
    built = {"settings": settings.to_json(), "baseline": "sinusoidal",
             "encodings": ["sinusoidal", "t5", "alibi"], "seeds": 1, "checkpoint_rule": "last",
             "decoding": "beam 10", "metric": "sacreBLEU", "runs": records, "summary": rows}
    md = report.markdown(report.document(built, tmp_path / "pictures", {}), out)
    table_rows = [r for r in md.splitlines() if r.startswith("| `t5`")]
    assert len(table_rows) == 3  # the split's table, by source length, the runs
    assert all(r.startswith("| `t5` † |") for r in table_rows)
    assert not any(r.startswith(("| `alibi` †", "| `sinusoidal` †")) for r in md.splitlines())
    assert "| yes †: fell 4.0% (800-1000), more than 1% |" in table_rows[2]
    said = "the difference may be training speed, not final quality: train longer (raise " \
           "--max-update"
    assert md.count(said) == 1  # once, under "How to read"; each marked table points there
    assert "in the table of runs, that run was (its validation loss fell" in md
    assert md.count("mean: [above](#how-to-read).") == 2  # the split's table, by source length
    assert md.count("What † means: [above](#how-to-read).") == 1  # the runs


# --- raising --max-update -------------------------------------------------------------------

def refused(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main(args)
    assert stop.value.code != 0
    return str(stop.value.code) + capsys.readouterr().err


@pytest.fixture
def toy(tmp_path) -> Path:
    """Raw files as --data (their content is not read before the refusals)."""
    data = tmp_path / "raw"
    data.mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            (data / f"{split}.{lang}").write_text("a b c\n")
    return data


def finished(out: Path, settings: settings_mod.Settings) -> Path:
    """A comparison trained to its --max-update (one run with its result)."""
    settings_mod.write(out / "settings.json", settings)
    run = Run("t5", 1)
    fake_comparison(out, {("t5", 1): line(5.0, 4.9, last=settings.max_update or 1000,
                                          first=4 * (settings.max_update or 1000) // 5)})
    run.result(out, "test").parent.mkdir(parents=True)
    run.result(out, "test").write_text(json.dumps({"split": "test", "bleu": 20.5,
                                                   "chrf": 40.25}))
    return run.dir(out)


@pytest.mark.parametrize("extra, says", [
    (["--max-update", "500"], "lowering it to 500 is refused (a trained run cannot be "
                              "untrained). Rerun with --max-update 1000 or higher"),
    (["--max-update", "2000", "--report-only"], "drop --report-only to continue the runs"),
    (["--max-update", "2000", "--train-args=--lr-scheduler cosine"],
     "--lr-scheduler cosine lays its schedule over --max-update"),
    (["--max-update", "1049", "--checkpoint", "avg5"],
     "--checkpoint avg5 averages the last 5 checkpoints saved every 1% of --max-update: runs "
     "continued from 1000 to 1049 updates would save fewer than 5 at the new budget's 1%"),
])
def test_a_raise_that_cannot_continue_the_runs_is_refused_and_moves_nothing(
        toy, tmp_path, capsys, extra, says):
    out = tmp_path / "cmp"
    old_extra = [a for a in extra if a.startswith("--train-args")]
    if "avg5" in extra:
        old_extra += ["--checkpoint", "avg5"]
    old = settings_of(toy, "--max-update", "1000", *old_extra)
    run_dir = finished(out, old)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    message = refused([str(out), "--data", str(toy), "-s", "en", "-t", "de", "--encodings",
                       "t5", "--cpu", *extra], capsys)
    assert says in message, message
    # the command's lock (fairseq_posenc.tools.launch.lock) is all it leaves
    assert sorted(p.relative_to(out) for p in out.rglob("*")
                  if p.name != ".posenc.lock") == before
    assert (run_dir / "trained.json").exists()


def test_avg_n_raises_from_n_new_hundredths_of_the_new_budget():
    # avg5 at 1000 updates: 1050 saves every 10 updates, 1010 ... 1050 (five); 1049 four
    assert budget.continues("avg5", 1000, 1050) and not budget.continues("avg5", 1000, 1049)
    assert budget.enough_raise("avg5", 1000) == 1053  # 1000 / 0.95 = 1052.6
    assert all(budget.continues("avg5", 1000, u) for u in range(1053, 5000))
    assert budget.continues("last", 1000, 1001) and budget.enough_raise("avg100", 10) is None


def test_a_raise_moves_each_trained_runs_results_aside_and_keeps_both_budgets(toy, tmp_path):
    out = tmp_path / "cmp"
    old = settings_of(toy, "--max-update", "1000", "--checkpoint", "avg5")
    run_dir = finished(out, old)
    new = settings_of(toy, "--max-update", "1053", "--checkpoint", "avg5")
    said = []
    assert budget.change(out, old, new, False, said.append)
    assert "1 trained run(s) continue from their checkpoint_last.pt" in said[0]
    assert not (run_dir / "trained.json").exists() and not (run_dir / "tests").exists()
    assert (run_dir / "budget1000" / "tests" / "test" / "result.json").exists()
    assert (run_dir / "train.log").exists()  # the log stays: the next part is train.2.log
    assert budget.history(run_dir, 1053, trained=True) == {
        "budgets": [1000, 1053],
        "earlier": [{"max_update": 1000, "last_update": 1000,
                     "tests": {"test": {"bleu": 20.5, "chrf": 40.25}}}]}
    other = settings_of(toy, "--max-update", "2000", "--valid", "dev")
    assert not budget.change(out, old, other, False, said.append)  # another difference


def compare(out: Path, data: Path, max_update: int) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "fairseq_posenc.tools.compare", str(out), "--data", str(data),
         "-s", "en", "-t", "de", "--encodings", "sinusoidal", "--max-update", str(max_update),
         "--checkpoint", "avg2", "--test", "test", "--cpu", "--bpe-merges", "100",
         "--workers", "1"], capture_output=True, text=True, env=subprocess_env(), timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stderr


@pytest.mark.slow  # two tiny trainings, translations and inspections
def test_a_raised_max_update_continues_each_run_from_its_last_checkpoint(tmp_path):
    raw = tmp_path / "raw"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_toy_corpus.py"), "--out",
                    str(raw), "--seed", "3", "--train", "300", "--valid", "20", "--test", "10"],
                   check=True, capture_output=True)
    out = tmp_path / "cmp"
    compare(out, raw, 12)
    run = out / "runs" / "sinusoidal" / "seed1"
    first = (run / "train.log").read_text()
    assert "'validate_interval_updates': 1," in first  # 12 // 20, at least 1
    validated = [int(u) for u in re.findall(r"valid on 'valid' subset .*num_updates (\d+)",
                                            first)]
    assert len(set(validated)) >= 10 and max(validated) == 12

    said = compare(out, raw, 24)
    assert "--max-update 24 raises the budget of 12 updates" in said
    assert "sinusoidal seed 1: training, resuming at update 12" in said
    assert (run / "train.1.log").read_text() == first  # the first budget's log, kept
    log = (run / "train.log").read_text()
    loaded = re.search(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch \d+ @ (\d+) updates\)",
                       log)
    assert loaded and loaded.group(1) == "12"
    assert "Stopping training due to num_updates: 24 >= max_update: 24" in log
    trained = json.loads((run / "trained.json").read_text())
    assert trained["last_update"] == 24 and trained["budgets"] == [12, 24]
    old = json.loads((run / "budget12" / "trained.json").read_text())
    assert old["last_update"] == 12
    # the reference: the same run trained to 24 updates from the start, as the comparison
    # trains it. avg2 averages the same interval checkpoints after the raise, and the
    # continued training follows it (fairseq reseeds each update and restores its batches)
    settings = settings_mod.read(out / "settings.json")
    corpus = data.open_prepared(out / "data", settings, None)
    fresh = tmp_path / "fresh"
    run_fairseq("fairseq-train", train_args(settings, corpus, Run("sinusoidal", 1), fresh),
                log=tmp_path / "fresh.log", say=lambda _: None)

    def kept(save_dir: Path) -> list[int]:
        return sorted(int(p.stem.rsplit("_", 1)[1]) for p in save_dir.glob("checkpoint_*_*.pt"))

    assert kept(run / "checkpoints") == kept(Run("sinusoidal", 1).save_dir(fresh))
    assert len(kept(run / "checkpoints")) == 2
    reference = dict(validation_losses(tmp_path / "fresh.log"))
    continued = dict(validation_losses(run / "train.1.log") + validation_losses(run / "train.log"))
    assert sorted(continued) == sorted(reference) == list(range(1, 25))
    assert all(abs(continued[u] - reference[u]) <= 0.002 for u in reference)

    built = json.loads((out / "report.json").read_text())
    assert built["settings"]["max_update"] == 24
    record = built["runs"][0]
    assert record["budgets"] == [12, 24]
    old_result = json.loads((run / "budget12" / "tests" / "test" / "result.json").read_text())
    assert record["earlier"] == [{"max_update": 12, "last_update": 12, "tests": {
        "test": {"bleu": old_result["bleu"], "chrf": old_result["chrf"]}}}]
    # the verdict against numpy's line through the last 20% of the whole curve
    points = convergence.curve(record["validation"])
    assert points[-1][0] == 24 and any(u == 12 for u, _ in points)
    window = [(u, v) for u, v in points if u >= 0.8 * 24]
    slope, intercept = np.polyfit(*zip(*window), 1)
    fall = -slope * (window[-1][0] - window[0][0])
    start = intercept + slope * window[0][0]
    assert record["convergence"]["fall"] == pytest.approx(fall, abs=1e-3)
    assert record["still_improving"] is bool(fall > 0.01 * start)
    md = (out / "report.md").read_text()
    assert "for 24 updates (raised from 12 updates: each run continued" in md
    assert ("| `sinusoidal` † |" in md) is record["still_improving"]
