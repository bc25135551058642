"""A SLURM job per task, submitted through submitit; the jobs' states read from ``squeue``.

Each task is a job of its own (``sbatch``, one node, one task, the GPUs, CPUs, memory and
time asked for), whose script runs :class:`.slurm_job.Job` in this interpreter (the cluster
shares its file system with this machine). submitit's files (the pickled submission, the
job's stdout and stderr) go to ``FOLDER/JOBID_*``; each task's record (``job.json``) names
its job and logs.

States come from ``squeue``, not from submitit's ``job.state``: submitit reads ``sacct``,
which needs SLURM's accounting database, and a cluster without one answers it with an
error (submitit then says ``UNKNOWN``). A job that ``squeue`` no longer lists has ended; the
task's own files say whether it finished.
"""

from __future__ import annotations

import getpass
import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from .tasks import Task, write_record

#: What every job needs from SLURM and Python.
COMMANDS = ("sbatch", "squeue", "srun")

#: Requeues after a time limit before submitit gives a job up: each part continues the run
#: from its last checkpoint, so a run longer than --slurm-time trains in parts.
MAX_TIMEOUTS = 1000


@dataclass(frozen=True)
class Slurm:
    """What each job asks SLURM for."""

    gpus_per_run: int = 1  # 0: CPUs only
    cpus_per_run: int = 2
    mem: str = "8G"
    time_minutes: int = 240
    partition: Optional[str] = None
    account: Optional[str] = None
    options: tuple[tuple[str, str], ...] = ()  # more sbatch options, --KEY=VALUE
    setup: tuple[str, ...] = ()  # shell lines the job runs first (modules, environments)

    def to_json(self) -> dict:
        return {"gpus_per_run": self.gpus_per_run, "cpus_per_run": self.cpus_per_run,
                "mem": self.mem, "time_minutes": self.time_minutes,
                "partition": self.partition, "account": self.account,
                "options": dict(self.options), "setup": list(self.setup)}


def check(tool: str) -> None:
    """Stop (:class:`SystemExit`) unless SLURM's commands and submitit are here."""
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise SystemExit(f"{tool}: --launcher slurm needs SLURM's {', '.join(missing)} on the "
                         "PATH: run it on the cluster's login node, or use --launcher local")
    if importlib.util.find_spec("submitit") is None:
        raise SystemExit(f"{tool}: --launcher slurm submits through submitit: pip install "
                         "submitit==1.5.4 (requirements.txt)")


def queued() -> Optional[dict[str, str]]:
    """SLURM's jobs of this user that are pending, running or about to be: ``{job id:
    state}``; None without ``squeue`` here."""
    if shutil.which("squeue") is None:
        return None
    done = subprocess.run(["squeue", "--noheader", "--user", getpass.getuser(),
                           "--format", "%i %T"], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"squeue failed (exit code {done.returncode}): {done.stderr.strip()}")
    jobs = {}
    for line in done.stdout.splitlines():
        if line.strip():
            job, state = line.split(None, 1)
            jobs[job] = state.strip()
    return jobs


def parse_time(text: str) -> int:
    """SLURM's time limit in whole minutes, rounded up: ``MINUTES``, ``MINUTES:SECONDS``,
    ``HOURS:MINUTES:SECONDS``, ``DAYS-HOURS[:MINUTES[:SECONDS]]``; :class:`ValueError` for
    another form or no time at all."""
    days, clock = text.split("-", 1) if "-" in text else ("0", text)
    parts = [int(p) for p in clock.split(":")]
    if len(parts) > 3:
        raise ValueError(text)
    if "-" in text:
        hours, minutes, seconds = (parts + [0, 0])[:3]
    else:
        hours, minutes, seconds = ([0, 0] + parts)[-3:] if len(parts) == 3 else (
            0, parts[0], parts[1] if len(parts) == 2 else 0)
    total = (int(days) * 24 + hours) * 60 + minutes + (1 if seconds else 0)
    if total < 1 or min(int(days), hours, minutes, seconds) < 0:
        raise ValueError(text)
    return total


def submit(tasks: Sequence[Task], slurm: Slurm, folder: Path, name: str,
           say: Callable[[str], None]) -> list[str]:
    """One job per task; each task's record names its job. Returns the job ids."""
    import submitit

    from .slurm_job import Job

    folder.mkdir(parents=True, exist_ok=True)
    executor = submitit.SlurmExecutor(folder=folder / "%j", max_num_timeout=MAX_TIMEOUTS)
    params = {"time": slurm.time_minutes, "cpus_per_task": slurm.cpus_per_run,
              "mem": slurm.mem, "nodes": 1, "ntasks_per_node": 1,
              "additional_parameters": dict(slurm.options), "setup": list(slurm.setup)}
    if slurm.gpus_per_run:
        params["gpus_per_node"] = slurm.gpus_per_run
    for key in ("partition", "account"):
        if getattr(slurm, key):
            params[key] = getattr(slurm, key)
    ids = []
    for task in tasks:
        executor.update_parameters(job_name=f"{name}:{task.label.replace(' ', '-')}", **params)
        job = executor.submit(Job(task, slurm.cpus_per_run))
        write_record(task, "slurm", job_id=str(job.job_id), stdout=str(job.paths.stdout),
                     stderr=str(job.paths.stderr), folder=str(folder), cwd=os.getcwd())
        say(f"{task.label}: submitted as SLURM job {job.job_id}")
        ids.append(str(job.job_id))
    return ids
