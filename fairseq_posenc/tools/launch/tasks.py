"""A run as the launchers see it, and what became of it.

A :class:`Task` is a function and its arguments (pickled by reference: the function lives
in a module, so that a SLURM job or a worker process imports it), a label, and a home
directory where the launcher keeps the task's record (``job.json``: the launcher, the job,
its logs) and, on this machine, its log (``job.log``). A task's function is idempotent: it
skips what finished and continues what did not (a training from its
``checkpoint_last.pt``), so that running it again, after a crash, a requeue or a rerun,
loses nothing and repeats nothing.

What became of a task (:func:`.dispatch.statuses`), from its own files, its lock and
``squeue``: ``finished`` (its tool says so), ``queued`` (its SLURM job is pending or
running), ``running`` (a process on this machine still holds its run's lock,
:func:`.lock.run`: one an earlier command left behind), ``ended`` (it has a record but
neither finished nor is queued nor running: it failed, was cancelled or killed; the end of
its logs says why) or ``new``. SLURM's accounting (``sacct``) is not needed: a cluster
without its database still answers ``squeue``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ..textprep.files import last_lines

#: Lines of a log shown for a task that ended without finishing: a fairseq failure's
#: message and the 20 last lines of fairseq's log that it holds
#: (:func:`fairseq_posenc.tools.experiment.fairseq_run.run_fairseq`).
TAIL_LINES = 25


@dataclass(frozen=True)
class Task:
    label: str  # "sinusoidal seed 2": the progress lines' and the messages' name
    home: Path  # the run's directory: job.json and job.log
    call: Callable[..., Any]  # a module-level function: pickled by reference
    args: tuple = ()
    log: Optional[Path] = None  # the run's own log (train.log), to follow it

    @property
    def record(self) -> Path:
        return self.home / "job.json"

    @property
    def job_log(self) -> Path:
        return self.home / "job.log"


@dataclass
class Status:
    kind: str  # finished, queued, running, ended or new
    job: Optional[str] = None  # the SLURM job id
    state: str = ""  # the SLURM state (squeue's), or why it is unknown; running: who
    tail: list[str] = field(default_factory=list)  # an ended task's logs, their ends

    def describe(self) -> str:
        job = f"SLURM job {self.job}" if self.job else "its process"
        if self.kind == "queued":
            return f"queued as {job} ({self.state})"
        if self.kind == "running":
            return f"still worked on by {self.state}"
        if self.kind == "ended":
            return f"{job} ended without finishing"
        return self.kind


def write_record(task: Task, launcher: str, **fields: Any) -> None:
    task.home.mkdir(parents=True, exist_ok=True)
    record = {"launcher": launcher, "label": task.label, "host": socket.gethostname(),
              "submitted": time.strftime("%Y-%m-%d %H:%M:%S"), **fields}
    tmp = task.record.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, task.record)


def read_record(task: Task) -> Optional[dict[str, Any]]:
    try:
        return json.loads(task.record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def tail(path: Optional[Path], lines: int = TAIL_LINES) -> list[str]:
    if path is None or not path.exists():
        return []
    return [f"{path}:"] + [f"  {line}" for line in last_lines(path, lines)]
