"""Where each run trained, and whether their training speeds compare.

The report's time-per-word column divides the baseline's words per second by an
encoding's. That is a speed comparison only when the runs had their devices alike: one
after the other on this machine, each on a GPU of its own, or on the CPU with the same
threads. Runs that shared a GPU (``--parallel`` above the GPUs) slowed each other by what
the others did, so their ratio says nothing about the encodings. Each run's
``trained.json`` records its ``placement`` (:func:`here`): the launcher's slot says how
many runs it shared the machine and its GPU with (:data:`ENV`, set by
:mod:`fairseq_posenc.tools.launch.local`); a SLURM job names its node. :func:`speeds`
decides the column from them, and says why where it leaves the ratio out.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any, Optional, Sequence

from ..launch.local import PLACEMENT

#: The environment variable of a local launcher's slot: ``{"at_once": N, "per_gpu": K}``.
ENV = PLACEMENT


def here(gpus: int) -> dict[str, Any]:
    """This process's placement: the launcher's slot (none: one run at a time), its
    threads, its GPUs (0: the CPU) and its host (SLURM's job id when a job)."""
    import torch

    slot = json.loads(os.environ.get(ENV) or "{}")
    return {"at_once": slot.get("at_once", 1), "per_gpu": slot.get("per_gpu", 1) if gpus else 0,
            "gpus": gpus, "threads": torch.get_num_threads(), "host": socket.gethostname(),
            "slurm_job": os.environ.get("SLURM_JOB_ID")}


def describe(p: dict[str, Any]) -> str:
    """A placement in words: ``one at a time, 2 threads``, ``2 at once, 1 thread each``,
    ``4 at once, 2 per GPU``, ``a SLURM job on node7``."""
    if p.get("slurm_job"):
        return f"a SLURM job on {p['host']}"
    threads = f"{p['threads']} thread" + ("s" if p["threads"] != 1 else "")
    if p["at_once"] == 1:
        return f"one at a time, {'on a GPU' if p['gpus'] else threads}"
    if p["gpus"]:
        return f"{p['at_once']} at once, {p['per_gpu']} per GPU"
    return f"{p['at_once']} at once, {threads} each"


def speeds(placements: Sequence[Optional[dict[str, Any]]]) -> tuple[bool, str]:
    """Whether the runs' words per second compare, and the report's line on how they were
    placed (or why the ratio is left out)."""
    if not placements:
        return False, "no run has finished its training"
    if any(p is None for p in placements):
        return False, ("left out: some runs were trained before posenc-compare recorded where "
                       "runs train, so whether they shared a device is unknown")
    shared = [p for p in placements if p["gpus"] and p["per_gpu"] > 1]
    if shared:
        return False, (f"left out: runs shared a GPU ({describe(shared[0])}), so each one's "
                       "speed depends on what the others did; time the encodings apart "
                       "with posenc-benchmark, or rerun with --parallel at most the GPUs")
    kinds = sorted({describe(p) for p in placements})
    if len(kinds) > 1 and not all(p.get("slurm_job") for p in placements):
        return False, ("left out: the runs were placed differently (" + "; ".join(kinds)
                       + "), so their speeds do not compare")
    if placements[0].get("slurm_job"):
        hosts = sorted({p["host"] for p in placements})
        return True, ("runs as SLURM jobs on " + ", ".join(hosts)
                      + (": nodes may differ in speed" if len(hosts) > 1 else ""))
    return True, f"runs trained {kinds[0]}"
