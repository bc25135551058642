"""posenc-compare's launchers, end to end on a tiny corpus: the local launcher's parallel
runs, comparisons killed in mid-training (no training may outlive them, none may run twice
at once), and a real one-node SLURM cluster (Debian's packages, daemons in a temporary
directory) with a job requeued in the middle of its training.

The reference is the same comparison run the default way, one run after the other in one
process, with the same seeds and the same CPU threads per run (one: a run's weights
depend on the threads' summation order in their last bits): every launcher's runs have its
scores and its hypotheses byte for byte, a run that resumed from its checkpoint included.
The killed comparison is the one tests/tools/test_compare.py scores against sacreBLEU,
trained once for both (tests/support/killed_comparison.py, the session fixture
``killed_comparison``).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli_utils import subprocess_env
from tests.support.killed_comparison import (ENCODINGS, UPDATES, command, compare, killed,
                                             scores)
from tests.support.slurm_cluster import cluster
from tests.tools.test_compare import raw  # noqa: F401  (raw: the corpus fixture)


@pytest.fixture(scope="module")
def sequential(raw, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("sequential") / "cmp"
    said, seconds = compare(out, raw)
    assert "run 1/2: sinusoidal seed 1: training" in said
    return out, seconds


@pytest.mark.slow  # two comparisons
def test_parallel_runs_score_as_sequential_runs(raw, sequential, tmp_path):  # noqa: F811
    out = tmp_path / "cmp"
    said, seconds = compare(out, raw, "--parallel", "2")
    # the progress line shows both runs at once
    assert re.search(r"2 running, 0/2 done, \S+ so far: sinusoidal seed 1: .*; t5 seed 1: ",
                     said), said[-3000:]
    assert scores(out) == scores(sequential[0])
    for run in ("sinusoidal", "t5"):
        trained = json.loads((out / "runs" / run / "seed1" / "trained.json").read_text())
        assert trained["batch"] == {"gpus": 0, "max_tokens": 4096, "update_freq": 1,
                                    "tokens_per_update": 4096}
    print(f"\nsequential {sequential[1]:.1f} s, --parallel 2 {seconds:.1f} s")


@pytest.mark.slow  # a comparison with a run that fails
def test_a_failed_run_is_reported_and_the_others_make_the_report(raw, tmp_path):  # noqa: F811
    out = tmp_path / "cmp"
    broken = out / "runs" / "t5" / "seed1" / "checkpoints" / "checkpoint_last.pt"
    broken.parent.mkdir(parents=True)
    broken.write_text("not a checkpoint")  # damaged: the run stops before fairseq-train
    # 2 updates: what is checked is how each run ended, not what it learned
    done = subprocess.run(command(out, raw, "--parallel", "2", "--max-update", "2"),
                          capture_output=True, text=True, env=subprocess_env(), timeout=900)
    assert done.returncode == 1
    assert "t5 seed 1 failed (exit code 1); the others go on" in done.stderr
    assert "damaged" in done.stderr and "Delete it" in done.stderr  # what the run says
    assert "the report leaves out the runs that failed: t5 seed 1" in done.stderr
    report = json.loads((out / "report.json").read_text())
    assert [(r["encoding"], r["finished"]) for r in report["runs"]] == [
        ("sinusoidal", True), ("t5", False)]
    # the next run of the command says how it ended, and runs it again
    broken.unlink()
    again = subprocess.run(command(out, raw, "--parallel", "2", "--max-update", "2"),
                           capture_output=True, text=True, env=subprocess_env(), timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "t5 seed 1: its process ended without finishing; it runs again" in again.stderr
    assert all(r["finished"] for r in json.loads((out / "report.json").read_text())["runs"])


@pytest.mark.slow  # killed_comparison: a comparison killed twice (in turn, then --parallel 2)
def test_a_killed_comparison_leaves_no_training_and_resumes_as_if_uninterrupted(
        killed_comparison, sequential):
    k = killed_comparison
    # in turn: a SIGKILL of the command alone (its fairseq-train is not in the kill)
    first = k["first"]
    assert first["before"]["sinusoidal"][0] == 1, first
    assert first["before"].get("t5", (0, 0)) == (0, 0), first  # not started yet

    # --parallel 2: a SIGKILL of the command's whole group (the workers have their own)
    second = k["second"]
    # fairseq-train and the worker per run, and fairseq-train's data loaders
    assert {e: n for e, (n, _) in second["before"].items()} == {"sinusoidal": 1, "t5": 1}
    assert all(n >= 2 for _, n in second["before"].values()), second

    # the rerun, with t5 still held by a process of an earlier command (as on a system whose
    # kernel does not end a killed command's processes): t5 waits for it, sinusoidal goes on
    rerun, holder = k["rerun"], k["rerun"]["holder"]
    assert rerun["returncode"] == 0, rerun["said"][-4000:]
    assert "sinusoidal seed 1: its process ended without finishing; it runs again" in \
        rerun["said"]
    assert (f"t5 seed 1: still worked on by pid {holder} (the test's holder), not by "
            "this command") in rerun["said"]
    assert f"t5 seed 1: waiting for pid {holder} (the test's holder) to end" in \
        rerun["t5_job_log"]
    held_t5 = rerun["held_t5"]
    assert held_t5 and not any(held_t5), "t5 trained while another process held it"
    # never two trainings of a run at once
    assert rerun["most"] == {"sinusoidal": 1, "t5": 1}, rerun["most"]
    # each run resumed from what the killed commands saved, and ends as if never killed
    for e in ENCODINGS:
        resumed = re.findall(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch \d+ @ (\d+) "
                             r"updates\)", k["train_logs"][e])
        assert resumed and 0 < int(resumed[0]) < UPDATES, (e, resumed)
    # the reference translates the split test only (the killed comparison test_long too)
    reference = scores(sequential[0])
    assert {key for key in k["scores"] if key[2] == "test"} == set(reference)
    assert {key: v for key, v in k["scores"].items() if key[2] == "test"} == reference
    print(f"\nkilled in turn: {first}; killed with --parallel 2: {second}; t5 held during "
          f"{len(held_t5)} samples; commands 1-3 {k['launch_seconds']:.1f} s, the killed "
          f"comparison {k['seconds']:.1f} s")


def validation_losses(run: Path) -> list[tuple[int, float]]:
    """(update, loss) of every validation over the run's training log's parts, a resumed
    part's replacing what it repeats."""
    from fairseq_posenc.tools.experiment.trainlog import parts, validation_losses as losses

    return sorted({u: loss for log in parts(run / "train.log")
                   for u, loss in losses(log)}.items())


def squeue(env: dict) -> list[str]:
    return subprocess.run(["squeue", "-h", "-o", "%i %T"], env={**subprocess_env(), **env},
                          capture_output=True, text=True, check=True).stdout.split("\n")[:-1]


def wait(what: str, check, seconds: float = 600) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"{what} within {seconds} s"
        time.sleep(0.2)


@pytest.mark.slow  # a SLURM cluster, two jobs, a requeue
def test_slurm_jobs_survive_a_requeue_and_score_as_local_runs(raw, sequential,  # noqa: F811
                                                               tmp_path):
    started = time.monotonic()
    out = tmp_path / "cmp"
    slurm = ("--launcher", "slurm", "--slurm-cpus-per-run", "1", "--slurm-mem", "1G",
             "--slurm-time", "30")
    with cluster(tmp_path / "slurm") as env:
        said, _ = compare(out, raw, *slurm, env=env)
        jobs = dict(re.findall(r"(\S+ seed 1): submitted as SLURM job (\d+)", said))
        assert sorted(jobs) == ["sinusoidal seed 1", "t5 seed 1"], said[-3000:]
        assert f"squeue -j {jobs['sinusoidal seed 1']},{jobs['t5 seed 1']}" in said
        assert not (out / "report.json").exists()  # nothing to report yet

        # the same command again: every run is queued or running, nothing is submitted
        again, _ = compare(out, raw, *slurm, env=env)
        assert "submitted" not in again
        assert re.search(r"sinusoidal seed 1: queued as SLURM job \d+ \(\w+\): left to it",
                         again), again[-2000:]

        # requeue a job in the middle of its training: it continues from checkpoint_last.pt
        run = out / "runs" / "sinusoidal" / "seed1"
        wait("a checkpoint", (run / "checkpoints" / "checkpoint_last.pt").exists)
        job = jobs["sinusoidal seed 1"]
        subprocess.run(["scontrol", "requeue", job], env={**subprocess_env(), **env},
                       check=True)
        # SLURM holds a requeued job back (its BeginTime, cred_expire: 120 s) once the job's
        # processes have ended and it is pending again: then let it go
        wait("the requeued job pending", lambda: f"{job} PENDING" in squeue(env))
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"],
                       env={**subprocess_env(), **env}, check=True)
        pending = subprocess.run(command(out, raw, "--report-only"), capture_output=True,
                                 text=True, env={**subprocess_env(), **env}, timeout=300)
        assert re.search(r"pending: sinusoidal seed 1: queued as SLURM job", pending.stderr), \
            pending.stderr[-2000:]
        wait("the jobs' end", lambda: not squeue(env))

        assert not (run / "trained.json").exists() or (run / "train.1.log").exists()
        resumed = re.search(r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch \d+ @ (\d+) "
                            r"updates\)", (run / "train.log").read_text())
        assert resumed and 0 < int(resumed.group(1)) < UPDATES, "not continued mid-training"
        record = json.loads((run / "job.json").read_text())
        log = Path(record["stderr"]).read_text()
        assert f"SLURM job {job} restarted (1 time(s))" in log
        assert "training, resuming at update" in log

        # collect: the same command writes the report; its scores are the local runs'
        done, _ = compare(out, raw, *slurm, env=env)
        assert "submitted" not in done and (out / "report.json").exists()
    # both runs have the local runs' scores, the requeued one too: a resumed training
    # continues with the uninterrupted run's batches (fairseq_posenc/plugin/resume.py), so
    # its validation losses are the uninterrupted run's, to the last digit fairseq logs
    ours, theirs = scores(out), scores(sequential[0])
    assert ours == theirs
    curves = [validation_losses(d / "runs" / "sinusoidal" / "seed1")
              for d in (out, sequential[0])]
    assert curves[0] == curves[1]
    settings = json.loads((out / "settings.json").read_text())
    assert settings["launch"]["launcher"] == "slurm"
    assert settings["launch"]["batch"]["tokens_per_update"] == settings["batch_tokens"]
    print(f"\nSLURM test {time.monotonic() - started:.1f} s")
