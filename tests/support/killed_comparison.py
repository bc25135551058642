"""One posenc-compare comparison on the toy corpus, killed and resumed in every way the
kill tests check, run once per session (``killed_comparison`` in tests/tools/conftest.py)
and asserted on by two tests: tests/tools/test_compare.py (the resumed comparison's report
against sacreBLEU's command line, a killed run resuming from its last checkpoint) and
tests/tools/test_compare_launch.py (no training outlives a kill, none runs twice at once,
the resumed runs score as uninterrupted ones).

Its commands, each as a user types it, with the same settings (two encodings, ``UPDATES``
updates, the splits ``test`` and ``test_long``):

1. seed 1 in turn, the command alone SIGKILLed while sinusoidal trains (t5 not started);
2. seed 1 with ``--parallel 2``, the command's process group SIGKILLed while both train;
3. seed 1 with ``--parallel 2`` again, t5 held by a process of an earlier command: both
   runs finish;
4. ``--seeds 2`` in turn, its process group SIGKILLed in sinusoidal seed 2's first epoch;
5. ``--seeds 2`` again: seed 2 resumes, seed 1 is kept.

What the tests read of commands 1-3 is recorded before command 4 runs (the seed-1 runs'
logs, the scores); OUT is left as command 5 leaves it.

Also here, for every test of posenc-compare's launchers: the toy corpus, the command with
the settings the launchers' tests share, and the kill of a command with the processes it
leaves counted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from tests.support.cli_utils import REPO_ROOT, subprocess_env
from tests.support.processes import alive, trainings, wait_for, working_on

ENCODINGS = ["sinusoidal", "t5"]
#: Updates per run: a checkpoint every few (a run validates 20 times), enough left after
#: the first for a kill or a SLURM requeue to land while the run trains on a loaded machine
#: (at 20, a requeue under load came after the last update), and more than an epoch of the
#: toy corpus (4 updates of the default batch).
UPDATES = 50
#: The splits the killed comparison translates: ``test_long`` holds sentences longer than
#: any training source.
TESTS = ("test", "test_long")


def make_toy_corpus(out: Path) -> Path:
    """The toy corpus the comparison tests train on: 300 training pairs, 20 validation, 10
    test, 4 test_long pairs of 40-50 words."""
    subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "make_toy_corpus.py"), "--out",
                    str(out), "--seed", "3", "--train", "300", "--valid", "20", "--test", "10",
                    "--test-long", "4", "--long-min-len", "40", "--long-max-len", "50"],
                   check=True, capture_output=True)
    return out


def command(out: Path, data: Path, *extra: str, tests: tuple[str, ...] = ("test",)) -> list[str]:
    return [sys.executable, "-m", "fairseq_posenc.tools.compare", str(out), "--data", str(data),
            "-s", "en", "-t", "de", "--encodings", *ENCODINGS, "--max-update", str(UPDATES),
            "--test", *tests, "--cpu", "--bpe-merges", "100", "--workers", "1", *extra]


def compare(out: Path, data: Path, *extra: str, env: dict | None = None,
            tests: tuple[str, ...] = ("test",)) -> tuple[str, float]:
    started = time.monotonic()
    done = subprocess.run(command(out, data, *extra, tests=tests), capture_output=True,
                          text=True, env={**subprocess_env(), **(env or {})}, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stderr, time.monotonic() - started


def scores(out: Path) -> dict:
    """Every run's BLEU, chrF and hypotheses per split."""
    report = json.loads((out / "report.json").read_text())
    return {(r["encoding"], r["seed"], split): (t["bleu"], t["chrf"],
                                                (out / t["hypotheses"]).read_text())
            for r in report["runs"] for split, t in r["tests"].items()}


def files(run_dir: Path) -> dict[Path, int]:
    """Every file of a directory with its modification time."""
    return {p: p.stat().st_mtime_ns for p in run_dir.rglob("*") if p.is_file()}


def two_cores() -> None:
    """At most two cores for the command (none less where there are two): ``--parallel 2``
    then gives each run one thread, as the ``sequential`` reference has."""
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])


def killed(out: Path, data: Path, extra: tuple[str, ...], ready, kill, log: Path,
           seed: int = 1, tests: tuple[str, ...] = ("test",)) -> dict:
    """The command started in a process group of its own (as a terminal starts it), its
    output in ``log``, killed by ``kill(pid)`` once ``ready()``; the processes that work on
    each run of ``seed`` before the kill (fairseq-train's, all), and the seconds until those
    fairseq-train processes have ended, and every process (fairseq-train's data loaders end
    when they see that it has: within 5 s)."""
    with open(log, "w") as f:
        proc = subprocess.Popen(command(out, data, *extra, tests=tests), stdout=f, stderr=f,
                                env=subprocess_env(), start_new_session=True,
                                preexec_fn=two_cores)

        def training() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]
            return bool(ready())

        wait_for("the runs training", training, 600)
        runs = sorted((out / "runs").glob(f"*/seed{seed}"))
        training = {r.parent.name: trainings(r / "checkpoints") for r in runs}
        before = {r.parent.name: (len(training[r.parent.name]), len(working_on(r)))
                  for r in runs}
        kill(proc.pid)
        proc.wait()
    pids = [p.pid for procs in training.values() for p in procs]
    trained = wait_for("the trainings' end", lambda: not any(map(alive, pids)), 2)
    gone = wait_for("no process left on the runs", lambda: not working_on(out / "runs"), 15)
    return {"before": before, "no training after": round(trained, 2),
            "no process after": round(trained + gone, 2)}


def rerun_with_t5_held(out: Path, data: Path, root: Path, save: dict[str, Path]) -> dict:
    """Command 3: the rerun with ``--parallel 2``, t5 still held by a process of an earlier
    command (as on a system whose kernel does not end a killed command's processes): t5
    waits for it, sinusoidal goes on. Its output, the holder's pid, t5's job log, the
    trainings of t5 counted while the holder lived and the most trainings of each run at
    once (counted every tenth of a second)."""
    stop = root / "stop"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys; from pathlib import Path; from tests.support.processes import hold\n"
        "hold(Path(sys.argv[1]), Path(sys.argv[2]))"), str(save["t5"].parent), str(stop)],
        cwd=REPO_ROOT, env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip().endswith("held")
    most = {e: 0 for e in ENCODINGS}
    held_t5: list[int] = []
    done = threading.Event()

    def count() -> None:  # every tenth of a second: the trainings of each run
        while not done.wait(0.1):
            for e in ENCODINGS:
                most[e] = max(most[e], len(trainings(save[e])))
            if holder.poll() is None:
                held_t5.append(len(trainings(save["t5"])))

    def release() -> None:  # the holder ends a second after t5's worker waits for it
        log = save["t5"].parent / "job.log"
        wait_for("t5 waiting", lambda: log.exists() and "waiting for pid" in log.read_text(),
                 600)
        time.sleep(1)
        stop.touch()

    threads = [threading.Thread(target=f, daemon=True) for f in (count, release)]
    for t in threads:
        t.start()
    try:
        rerun = subprocess.run(command(out, data, "--parallel", "2", tests=TESTS),
                               capture_output=True, text=True, env=subprocess_env(),
                               timeout=900, preexec_fn=two_cores)
    finally:
        done.set()
        stop.touch()
    holder.wait(10)
    return {"returncode": rerun.returncode, "said": rerun.stderr, "holder": holder.pid,
            "t5_job_log": (save["t5"].parent / "job.log").read_text(), "held_t5": held_t5,
            "most": most}


def run(root: Path, data: Path) -> dict[str, Any]:
    """Commands 1-5 in ``root / "cmp"``; what the tests assert on (see the module's
    docstring)."""
    started = time.monotonic()
    out = root / "cmp"
    save = {e: out / "runs" / e / "seed1" / "checkpoints" for e in ENCODINGS}
    mid: dict[str, Callable[[], Any]] = {
        e: lambda e=e: ((save[e] / "checkpoint_last.pt").exists() and trainings(save[e])
                        and not (save[e].parent / "trained.json").exists())
        for e in ENCODINGS}
    record: dict[str, Any] = {"out": out}

    # 1. in turn: a SIGKILL of the command alone (its fairseq-train is not in the kill)
    record["first"] = killed(out, data, (), mid["sinusoidal"],
                             lambda pid: os.kill(pid, signal.SIGKILL), root / "first.log",
                             tests=TESTS)
    record["first_said"] = (root / "first.log").read_text()
    # 2. --parallel 2: a SIGKILL of the command's whole group (the workers have their own)
    record["second"] = killed(out, data, ("--parallel", "2"),
                              lambda: mid["sinusoidal"]() and mid["t5"](),
                              lambda pid: os.killpg(pid, signal.SIGKILL), root / "second.log",
                              tests=TESTS)
    # 3. the rerun, t5 held
    record["rerun"] = rerun = rerun_with_t5_held(out, data, root, save)
    assert rerun["returncode"] == 0, rerun["said"][-4000:]
    record["train_logs"] = {e: (save[e].parent / "train.log").read_text() for e in ENCODINGS}
    record["scores"] = scores(out)
    record["launch_seconds"] = time.monotonic() - started

    # 4. one more seed, its process group killed while its first run trains (after a
    # checkpoint_last.pt exists, in its first epoch: a checkpoint at every validation, not
    # only at an epoch's end)
    record["seed1_before"] = {e: files(out / "runs" / e / "seed1") for e in ENCODINGS}
    seed2 = out / "runs" / "sinusoidal" / "seed2"
    killed(out, data, ("--seeds", "2"), (seed2 / "checkpoints" / "checkpoint_last.pt").exists,
           lambda pid: os.killpg(pid, signal.SIGKILL), root / "seed2_killed.log", seed=2,
           tests=TESTS)
    record["seed2_trained_before_kill"] = (seed2 / "trained.json").exists()
    # 5. the same command again
    record["again"], _ = compare(out, data, "--seeds", "2", tests=TESTS)
    record["seed1_after"] = {e: files(out / "runs" / e / "seed1") for e in ENCODINGS}
    record["seconds"] = time.monotonic() - started
    return record
