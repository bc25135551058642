"""posenc-compare on a tiny corpus, as a user runs it: two encodings, two seeds, one of the
runs killed in the middle of its training. The comparison is the one that
tests/tools/test_compare_launch.py kills with its launchers, trained once for both
(tests/support/killed_comparison.py, the session fixture ``killed_comparison``).

The references are sacreBLEU's own command line on the files the runs wrote (every run's
BLEU and chrF, the mean and standard deviation over seeds, the paired-bootstrap p-values
seed against seed) and fairseq's own log (a resumed training loads its
``checkpoint_last.pt``). Bad input stops before anything is trained or written.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
from pathlib import Path

import pytest

from tests.support.cli_utils import console_script, subprocess_env
from tests.support.killed_comparison import ENCODINGS, TESTS, UPDATES, compare, files
from fairseq_posenc.tools.compare import cli, settings as settings_mod

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def raw(toy_corpus) -> Path:
    """The toy corpus (tests/tools/conftest.py), under the name this package's tests use."""
    return toy_corpus


def sacrebleu_cli(*args: str) -> list:
    out = subprocess.run([console_script("sacrebleu"), *args], capture_output=True, text=True,
                         check=True, env=subprocess_env())
    return json.loads(out.stdout)


@pytest.mark.slow  # the comparison end to end (killed_comparison: trained once, for two tests)
def test_a_killed_comparison_resumes_and_its_report_is_sacrebleus(killed_comparison, raw,
                                                                  tmp_path):
    k = killed_comparison
    out = k["out"]
    # the first command of seed 1 trains in turn; the one that finishes seed 1 reports
    assert "run 1/2: sinusoidal seed 1: training" in k["first_said"]
    assert f"report: {out / 'report.md'}" in k["rerun"]["said"]

    # one more seed, killed while its first run trains (after a checkpoint_last.pt exists, in
    # its first epoch: checkpoints at every validation, not only at an epoch's end)
    killed = out / "runs" / "sinusoidal" / "seed2"
    assert not k["seed2_trained_before_kill"], "the run finished before it was killed"

    again = k["again"]
    for e in ENCODINGS:  # nothing that finished ran again
        assert f"{e} seed 1: finished before, kept" in again
        assert k["seed1_after"][e] == k["seed1_before"][e]
    assert (killed / "train.1.log").exists()  # the killed part's log, kept
    resumed = re.search(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch \d+ @ (\d+) updates\)",
                        (killed / "train.log").read_text())
    assert resumed and int(resumed.group(1)) > 0, "the killed run did not resume"
    # from the last checkpoint the killed part saved, at its last validation or after it:
    # a checkpoint at every validation, so a kill loses at most one validation interval.
    # fairseq logs "Saved checkpoint" once the checkpoint's copies are written: a kill in
    # between leaves the log a checkpoint behind the checkpoint_last.pt it resumes from
    killed_log = (killed / "train.1.log").read_text()
    saved = re.findall(r"Saved checkpoint \S+ \(epoch \d+ @ (\d+) updates", killed_log)
    validated = re.findall(r"valid on 'valid' subset .* num_updates (\d+)", killed_log)
    assert int(saved[-1]) <= int(resumed.group(1)) >= int(validated[-1]) - 1
    assert re.search(r"Loaded checkpoint \S+ \(epoch 1 @", (killed / "train.log").read_text())
    # the resume line names the update fairseq loads
    assert f"sinusoidal seed 2: training, resuming at update {resumed.group(1)} " in again

    report = json.loads((out / "report.json").read_text())
    assert [(r["encoding"], r["seed"]) for r in report["runs"]] == [
        ("sinusoidal", 1), ("t5", 1), ("sinusoidal", 2), ("t5", 2)]
    assert all(r["finished"] and r["words_per_second"] for r in report["runs"])
    # the validation curves as the trainings kept them: one point per update, in order, the
    # killed parts' validations after their checkpoints replaced by the resumed parts'
    for r in report["runs"]:
        updates = [u for u, _ in r["validation"]]
        assert updates == sorted(set(updates)) and updates[-1] == UPDATES, r["validation"]
    # every run's scores are sacreBLEU's command line on its files
    cli_scores: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for run in report["runs"]:
        for split, result in run["tests"].items():
            ref = out / "data" / "raw" / f"{split}.de"
            bleu, chrf = sacrebleu_cli(str(ref), "-i", str(out / result["hypotheses"]), "-m",
                                       "bleu", "chrf", "-w", "6")
            assert result["bleu"] == pytest.approx(bleu["score"], abs=0.006)
            assert result["chrf"] == pytest.approx(chrf["score"], abs=0.006)
            cli_scores.setdefault((split, run["encoding"]), []).append(
                (bleu["score"], chrf["score"]))
    hyps = {(r["encoding"], r["seed"], s): str(out / t["hypotheses"])
            for r in report["runs"] for s, t in r["tests"].items()}
    for row in report["summary"]:
        scores = cli_scores[(row["split"], row["encoding"])]
        assert row["n"] == 2
        assert row["bleu_mean"] == pytest.approx(statistics.mean(b for b, _ in scores), abs=0.01)
        assert row["chrf_mean"] == pytest.approx(statistics.mean(c for _, c in scores), abs=0.01)
        assert row["chrf_sd"] == pytest.approx(statistics.stdev(c for _, c in scores), abs=0.01)
        if row["encoding"] == "sinusoidal":
            assert row["p_value"] is None
            continue
        ref = str(out / "data" / "raw" / f"{row['split']}.de")
        p_bleu, p_chrf = [], []
        for seed in (1, 2):
            pair = sacrebleu_cli(ref, "-i", hyps[("sinusoidal", seed, row["split"])],
                                 hyps[("t5", seed, row["split"])], "--paired-bs", "-m", "bleu",
                                 "chrf")[1]
            p_bleu.append(pair["BLEU"]["p_value"])
            p_chrf.append(pair["chrF2"]["p_value"])
        assert row["p_value"] == pytest.approx(max(p_bleu))
        assert row["chrf_p_value"] == pytest.approx(max(p_chrf))
    long_rows = [r for r in report["summary"] if r["split"] == "test_long"]
    assert all(r["beyond_training"] == 4 and r["buckets"][-1]["label"] == "beyond training"
               for r in long_rows)

    page = (out / "report" / "index.html").read_text()
    assert page.count('src="data:image/png;base64,') == 2  # lengths and validation loss
    assert not re.search(r'src="(?!data:)', page)  # nothing to fetch: it reads offline
    for link in re.findall(r'href="([^"]+)"', page):
        if link.startswith("#"):  # a section of the page itself ("How to read")
            assert f'id="{link[1:]}"' in page, link
        else:
            assert (out / "report" / link).resolve().is_file(), link
    assert "## test_long: 4 sentences, 4 longer than any training source" in (
        out / "report.md").read_text()

    # a moved OUT works from its new place: nothing trains again, its own files are read
    moved = tmp_path / "moved"
    out.rename(moved)
    said, _ = compare(moved, raw, "--seeds", "2", tests=TESTS)
    assert all(f"{e} seed {k}: finished before, kept" in said for e in ENCODINGS for k in (1, 2))
    runs = json.loads((moved / "report.json").read_text())["runs"]
    assert [(r["tests"], r["checkpoint"]) for r in runs] == [
        (r["tests"], r["checkpoint"]) for r in report["runs"]]
    for r in runs:
        assert (moved / r["checkpoint"]).is_file() and not Path(r["checkpoint"]).is_absolute()
        assert all((moved / t["hypotheses"]).is_file() for t in r["tests"].values())


def run_main(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main(args)
    assert stop.value.code != 0
    return str(stop.value.code) + capsys.readouterr().err


def base_args(out: Path, data: Path, *extra: str) -> list[str]:
    return [str(out), "--data", str(data), "-s", "en", "-t", "de", "--max-update", "12",
            "--test", "test", "test_long", "--cpu", "--bpe-merges", "100", "--workers", "1",
            *extra]


@pytest.mark.parametrize("extra, says", [
    (["--encodings", "sinusoidal", "t6"], "unknown encoding t6; choose from"),
    (["--encodings", "sinusoidal", "--arch-prefix", "transformer_huge"],
     "no registered architecture transformer_huge_sinusoidal"),
    (["--encodings", "sinusoidal", "t5", "--baseline", "rope"],
     "--baseline rope is not among --encodings sinusoidal t5"),
    (["--encodings", "t5", "--checkpoint", "avg1"], "--checkpoint"),
    (["--encodings", "t5", "--test", "test", "test_short"], "missing raw files"),
])
def test_bad_input_stops_before_anything_is_written(raw, tmp_path, capsys, extra, says):
    out = tmp_path / "cmp"
    args = base_args(out, raw)
    if "--test" in extra:
        args = args[:args.index("--test")] + args[args.index("--cpu"):]
    assert says in run_main(args + extra, capsys)
    assert not out.exists()


def test_uneven_or_missing_language_files_are_refused(raw, tmp_path, capsys):
    data = tmp_path / "raw"
    data.mkdir()
    for f in raw.iterdir():
        lines = f.read_text().splitlines(keepends=True)
        (data / f.name).write_text("".join(lines[:-1] if f.name == "valid.de" else lines))
    says = run_main(base_args(tmp_path / "cmp", data, "--encodings", "t5"), capsys)
    assert "valid: 20 en lines but 19 de lines" in says
    (data / "valid.de").unlink()
    assert "valid.de" in run_main(base_args(tmp_path / "cmp", data, "--encodings", "t5"), capsys)
    assert not (tmp_path / "cmp").exists()


@pytest.mark.slow  # the comparison prepares its data before it refuses
def test_a_table_of_positions_shorter_than_the_training_data_is_refused(raw, tmp_path, capsys):
    out = tmp_path / "cmp"
    says = run_main(base_args(out, raw, "--encodings", "diet_abs",  # its flag: its own comparison
                              "--train-args=--diet-abs-max-len 8"), capsys)
    assert "diet_abs represents 8 positions (--diet-abs-max-len)" in says
    assert 'raise it with --train-args "--diet-abs-max-len' in says
    assert not (out / "runs").exists() and not (out / "settings.json").exists()


def test_a_rerun_with_other_settings_stops_and_names_them(raw, tmp_path, capsys):
    # a larger --max-update alone continues the runs (test_compare_convergence.py); with
    # another difference it is one of the differences named
    out = tmp_path / "cmp"
    parsed = cli.parser().parse_args(base_args(out, raw, "--encodings", "t5"))
    settings_mod.write(out / "settings.json", cli.settings_of(parsed, cli.parser()))
    args = base_args(out, raw, "--encodings", "t5", "--train-args=--dropout 0.3")
    args[args.index("--max-update") + 1] = "13"
    says = run_main(args, capsys)
    assert "holds a comparison with other settings" in says
    assert "max_update: 12 before, 13 now" in says
    assert "train_args: () before, ('--dropout', '0.3') now" in says
    assert "--force" in says and not (out / "runs").exists()


def test_without_cpu_a_gpu_is_required(raw, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: training on it is allowed")
    args = [a for a in base_args(tmp_path / "cmp", raw, "--encodings", "t5") if a != "--cpu"]
    assert "no CUDA GPU here: pass --cpu" in run_main(args, capsys)
