"""Where a comparison's runs train: the launchers of :mod:`fairseq_posenc.tools.launch` applied
to its runs.

A run's job is :func:`run_job`: every step of the run that has not finished (train,
translate and score every test split, inspect, the run's ``--variants``), as
:func:`.execute.run_one` does them in this process. The local launcher runs it one run
after the other in this process (today's default), or in N processes at once
(``--parallel``); the SLURM launcher submits it as a job per run, and the command returns.
A job translates and scores where it trained: the checkpoints are there, the GPU too, and a
run is finished when its job ends, so that collecting the runs is only assembling the
report.

Before anything starts, each run's state (:func:`fairseq_posenc.tools.launch.dispatch.statuses`):
finished runs are kept, a run whose SLURM job is queued or running is left to it (nothing
trains a run twice at once), a run that ended without finishing is reported with the end of
its logs and runs again, a new run runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..launch import slurm
from ..launch.dispatch import Outcome, dispatch, follow, statuses
from ..launch.launcher_flags import Launcher
from ..launch.tasks import Status, Task
from . import execute, plan, variants as variants_mod
from .data import Corpus
from .execute import complete, say
from .plan import Run
from .settings import Settings
from .variants import Variant


def run_job(settings: Settings, corpus: Corpus, run: Run, out: Path,
            variants: Sequence[Variant], gpus: int) -> None:
    """Every unfinished step of ``run`` on ``gpus`` GPUs (0: the CPU); the comparison's
    ``--user-dir`` imported first (a worker process or SLURM job starts without it: its
    checkpoints' encodings are read in process)."""
    plan.import_user_dir(settings)
    execute.run_one(settings, corpus, run, out, plan.batch(settings, gpus),
                    lambda what: say(f"{run.label}: {what}"))
    variants_mod.translate_all(settings, corpus, [run], variants, out)


def tasks(settings: Settings, corpus: Corpus, runs: Sequence[Run], out: Path,
          variants: Sequence[Variant], gpus: int) -> list[Task]:
    return [Task(run.label, run.dir(out), run_job,
                 (settings, corpus, run, out, tuple(variants), gpus), log=run.train_log(out))
            for run in runs]


def states(settings: Settings, corpus: Corpus, runs: Sequence[Run],
           out: Path) -> list[Status]:
    return statuses(tasks(settings, corpus, runs, out, (), 0),
                    [complete(r, out, settings) for r in runs])


def run_all(settings: Settings, corpus: Corpus, runs: Sequence[Run], out: Path,
            variants: Sequence[Variant], launcher: Launcher) -> Outcome:
    """Every unfinished run, as ``launcher`` says (see the module docstring)."""
    by_label = {r.label: r for r in runs}

    def in_turn(todo: list[Task]) -> None:
        execute.run_all(settings, corpus, [by_label[t.label] for t in todo], out,
                        plan.batch(settings, launcher.gpus_per_run))

    outcome = dispatch(tasks(settings, corpus, runs, out, variants, launcher.gpus_per_run),
                       [complete(r, out, settings) for r in runs], launcher,
                       tool="posenc-compare", folder=out / "slurm", say=say, in_turn=in_turn)
    if outcome.pending:
        follow(outcome.pending, out / "slurm", say)
        say("rerun this command when they have finished: it resubmits what ended without "
            "finishing and writes the report; --report-only reports on what has finished")
    return outcome


def pending_lines(settings: Settings, corpus: Corpus, runs: Sequence[Run],
                  out: Path) -> list[str]:
    """Each unfinished run and its state, for ``--report-only``."""
    return [f"{run.label}: {status.describe() if status.kind != 'new' else 'not started'}"
            for run, status in zip(runs, states(settings, corpus, runs, out))
            if status.kind != "finished"]


def queued_jobs(out: Path) -> list[str]:
    """The SLURM jobs of ``out``'s runs that are queued or running."""
    import json

    records = [json.loads(p.read_text()) for p in (out / "runs").glob("*/seed*/job.json")]
    ids = [r["job_id"] for r in records if r.get("launcher") == "slurm"]
    if not ids:
        return []
    queue = slurm.queued()
    return [job for job in ids if queue is None or job in queue]
