"""The launchers' common course: what became of each task, then the unfinished ones run,
as the launcher says.

A finished task is kept; a task whose SLURM job is queued or running is left to it (nothing
runs a task twice at once); a task that a process on this machine still works on (one an
earlier command left behind: its run's lock, :func:`.lock.run`, is held) is waited for,
then continued; a task that ended without finishing is reported with the end of its logs
and runs again; a new task runs. The local launcher runs them in turn in this process
(``in_turn``, the tool's own loop, with every run's lock held) or N at once
(:mod:`.local`, each worker holding its run's lock); the SLURM launcher waits for the
runs still worked on here, submits (:mod:`.slurm`) and returns. While the runs run here,
SIGTERM and SIGHUP stop them as Ctrl-C does (:mod:`.lifetime`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from . import lifetime, local, lock, slurm
from .launcher_flags import Launcher
from .tasks import Status, Task, read_record, tail


@dataclass
class Outcome:
    pending: list[tuple[Task, Status]] = field(default_factory=list)  # in SLURM's queue
    failed: list[Task] = field(default_factory=list)  # ended without finishing, this time


def statuses(tasks: Sequence[Task], finished: Sequence[bool]) -> list[Status]:
    """What became of each task (see the module docstring). ``squeue`` is asked once, and
    only when a task has a SLURM job; without ``squeue`` here such a task counts as queued
    (its job may still run: nothing may train it a second time). A task is running while
    its lock is held, finished or not (a finished run's process may still translate its
    variants)."""
    records = [None if done else read_record(t) for t, done in zip(tasks, finished)]
    jobs = {r["job_id"] for r in records if r and r.get("launcher") == "slurm"}
    queue: Optional[dict[str, str]] = None
    if jobs:
        queue = slurm.queued()
    out = []
    for task, record, done in zip(tasks, records, finished):
        holder = None if record and record.get("launcher") == "slurm" else lock.busy(task.home)
        if holder:
            out.append(Status("running", state=holder))
        elif done:
            out.append(Status("finished"))
        elif record is None:
            out.append(Status("new"))
        elif record.get("launcher") == "slurm":
            job = record["job_id"]
            if queue is None:
                out.append(Status("queued", job, "unknown: no squeue here"))
            elif job in queue:
                out.append(Status("queued", job, queue[job]))
            else:
                # the job's own output: the run's failure (with its log's end), a requeue,
                # SLURM's word on a cancellation or a time limit
                out.append(Status("ended", job, tail=tail(Path(record["stderr"]))))
        else:
            out.append(Status("ended", tail=tail(task.job_log)))
    return out


def slots(launcher: Launcher, tool: str) -> local.Slots:
    """The local launcher's runs at once (on the CPU where no GPU is visible: the tools
    check before that their runs may train there). :class:`SystemExit` when the GPUs are
    too few for one run."""
    gpus = local.visible_gpus() if launcher.gpus_per_run else []
    try:
        return local.Slots.plan(launcher.parallel, launcher.gpus_per_run if gpus else 0,
                                gpus, local.cores())
    except ValueError as e:
        raise SystemExit(f"{tool}: {e}") from None


def dispatch(tasks: Sequence[Task], finished: Sequence[bool], launcher: Launcher, *,
             tool: str, folder: Path, say: Callable[[str], None],
             in_turn: Callable[[list[Task]], None]) -> Outcome:
    """Every unfinished task, as ``launcher`` says (see the module docstring). ``folder``:
    submitit's files; ``in_turn``: runs the given tasks (those not queued, finished ones
    included) one after the other in this process."""
    found = statuses(tasks, finished)
    outcome = Outcome()
    for task, status in zip(tasks, found):
        if status.kind == "queued":
            say(f"{task.label}: {status.describe()}: left to it")
            outcome.pending.append((task, status))
        elif status.kind == "running":
            say(f"{task.label}: {status.describe()}, not by this command: waited for, then "
                "continued")
        elif status.kind == "ended":
            say("\n".join([f"{task.label}: {status.describe()}; it runs again",
                           *status.tail]))
    todo = [t for t, s in zip(tasks, found) if s.kind in ("new", "ended", "running")]
    if launcher.kind == "slurm":
        busy = [(t.home, t.label) for t, s in zip(tasks, found) if s.kind == "running"]
        with lifetime.stop_on_signals(tool), lock.runs(busy, tool, say):
            pass  # a SLURM job must not train what a process here still trains
        ids = slurm.submit(todo, launcher.slurm, folder, tool, say) if todo else []
        outcome.pending += [(t, Status("queued", job, "submitted")) for t, job in zip(todo, ids)]
        return outcome
    where = slots(launcher, tool)
    with lifetime.stop_on_signals(tool):
        if len(where.envs) == 1:
            here = [t for t, s in zip(tasks, found) if s.kind != "queued"]
            with lock.runs([(t.home, t.label) for t in todo],  # a finished run: untouched
                           f"{tool}, which runs its runs in turn", say):
                in_turn(here)
        else:
            outcome.failed = local.run(todo, where, say)
    return outcome


def follow(pending: Sequence[tuple[Task, Status]], folder: Path,
           say: Callable[[str], None]) -> None:
    """How to follow the SLURM jobs."""
    ids = [s.job for _, s in pending if s.job]
    say(f"{len(pending)} run(s) in SLURM's queue, jobs {' '.join(ids)}; follow them with")
    say(f"  squeue -j {','.join(ids)}")
    for task, status in pending:
        say(f"  {task.label}: job {status.job}, log {task.log or task.home}")
    say(f"  and each job's own output in {folder}/JOBID_0_log.err")
