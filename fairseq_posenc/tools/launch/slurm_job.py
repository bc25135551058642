"""What a SLURM job runs: one task, in submitit's process on the node.

The job is checkpointable in submitit's sense: when SLURM warns it of its time limit or of
a preemption (``USR2``, ``--signal`` ahead of the end), submitit requeues it, and the same
job (its id unchanged) runs the task again. A task is idempotent (:mod:`.tasks`), so a
requeued job, whoever requeued it (submitit, ``scontrol requeue``, a node failure), continues
the run from its ``checkpoint_last.pt``; its log says that it restarted.

This module imports submitit: only a SLURM job and the submission load it.
"""

from __future__ import annotations

import os
import sys

import submitit

from .tasks import Task


class Job(submitit.helpers.Checkpointable):
    """``task`` with ``threads`` CPU threads (the CPUs SLURM gives it)."""

    def __init__(self, task: Task, threads: int):
        self.task = task
        self.threads = threads

    def __call__(self) -> None:
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        job = os.environ.get("SLURM_JOB_ID", "?")
        if restarts:
            print(f"[launch] {self.task.label}: SLURM job {job} restarted ({restarts} "
                  "time(s)): continuing from what the run saved", file=sys.stderr, flush=True)
        else:
            print(f"[launch] {self.task.label}: SLURM job {job} on {os.uname().nodename}",
                  file=sys.stderr, flush=True)
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # fairseq-train inherits them
            os.environ[name] = str(self.threads)
        import torch

        torch.set_num_threads(self.threads)
        self.task.call(*self.task.args)
