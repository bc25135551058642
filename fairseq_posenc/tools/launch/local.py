"""Up to N tasks at once on this machine, each in a process of its own (:mod:`.worker`).

With GPUs, each run gets its own (``CUDA_VISIBLE_DEVICES``): the runs take the GPUs in
turn, so N larger than the GPUs puts several runs on one GPU (tiny models). On the CPU, the
cores are divided between the N runs (``OMP_NUM_THREADS``), so that N runs do not fight
for them. The progress line names every active run with its last step, as each worker's
log (``job.log`` in the run's directory) says; a run that fails is reported with the end of
its logs, and the others go on.

Each worker has a process group of its own, so that Ctrl-C in the terminal reaches this
process alone, which then stops every worker by its group (the worker and its
``fairseq-train``), as it does on SIGTERM and SIGHUP (:func:`.lifetime.stop_on_signals`,
around :func:`run`). A SIGKILL of this process, which no cleanup sees, ends the workers
through the kernel on Linux (:func:`.lifetime.die_with_parent`): none trains on after the
command.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from .lifetime import die_with_parent
from .tasks import Task, tail, write_record

#: The environment variable that tells a run how it shares the machine
#: (:mod:`fairseq_posenc.tools.compare.placement` reads it).
PLACEMENT = "POSENC_PLACEMENT"

#: Seconds between looks at the workers; a progress line is printed when a step changes,
#: or every HEARTBEAT seconds.
POLL_SECONDS = 1.0
HEARTBEAT = 60.0


def cores() -> int:
    return len(os.sched_getaffinity(0))


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` names them."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [n.strip() for n in listed.split(",") if n.strip()] if listed else []
    return names[:count] if names else [str(i) for i in range(count)]


@dataclass(frozen=True)
class Slots:
    """Where the N runs at once go: each slot's environment."""

    envs: tuple[dict[str, str], ...]

    @classmethod
    def plan(cls, parallel: Optional[int], gpus_per_run: int,
             gpus: Sequence[str] = (), ncores: int = 1) -> "Slots":
        """``parallel`` runs at once (None: one per group of ``gpus_per_run`` GPUs, 1 on
        the CPU); ``gpus_per_run`` 0: the CPU. :class:`ValueError` when the GPUs are too
        few for one run."""
        if gpus_per_run:
            groups = [list(gpus[i:i + gpus_per_run])
                      for i in range(0, len(gpus) - gpus_per_run + 1, gpus_per_run)]
            if not groups:
                raise ValueError(f"a run needs {gpus_per_run} GPU(s) and {len(gpus)} are "
                                 "visible here")
            n = parallel or len(groups)
        else:
            groups, n = [], parallel or 1
        threads = str(max(1, ncores // n))
        envs = []
        for i in range(n):
            env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
            sharing = 0
            if groups:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(groups[i % len(groups)])
                sharing = sum(j % len(groups) == i % len(groups) for j in range(n))
            # how the run shares the machine, for the report's speed column
            env[PLACEMENT] = json.dumps({"at_once": n, "per_gpu": sharing})
            envs.append(env)
        return cls(tuple(envs))


def last_step(log: Path) -> str:
    """The last line a worker said (``[tool] ...``), without its tag."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return "starting"
    said = [line.split("] ", 1)[1] for line in lines if line.startswith("[") and "] " in line]
    return said[-1] if said else "starting"


def run(tasks: Sequence[Task], slots: Slots, say: Callable[[str], None]) -> list[Task]:
    """Every task, ``len(slots.envs)`` at once; returns those that failed (each reported
    with the end of its logs when it ends). The workers are started from the calling
    thread, which must outlive them (it does: it waits for them, or stops them)."""
    todo = list(tasks)
    active: dict[int, tuple[Task, subprocess.Popen]] = {}
    failed: list[Task] = []
    finished = 0
    started = time.monotonic()
    shown, shown_at = "", 0.0
    try:
        while todo or active:
            for slot, env in enumerate(slots.envs):
                if slot not in active and todo:
                    active[slot] = (todo[0], _start(todo.pop(0), env))
            time.sleep(POLL_SECONDS)
            for slot, (task, proc) in list(active.items()):
                if proc.poll() is None:
                    continue
                del active[slot]
                finished += 1
                if proc.returncode:
                    failed.append(task)
                    say("\n".join([f"{task.label} failed (exit code {proc.returncode}); "
                                   "the others go on", *tail(task.job_log)]))
                else:
                    say(f"{task.label}: finished")
            line = "; ".join(last_step(t.job_log) for t, _ in active.values())
            now = time.monotonic()
            if active and (line != shown or now - shown_at >= HEARTBEAT):
                elapsed = int(now - started)
                say(f"{len(active)} running, {finished}/{len(tasks)} done, "
                    f"{elapsed // 60}m{elapsed % 60:02d}s so far: {line}")
                shown, shown_at = line, now
    finally:  # interrupted: stop the workers this launcher started, each by its own group
        for _, proc in active.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait()
    return failed


def _start(task: Task, env: dict[str, str]) -> subprocess.Popen:
    task.home.mkdir(parents=True, exist_ok=True)
    pickled = task.home / "task.pkl"
    pickled.write_bytes(pickle.dumps(task))
    log = open(task.job_log, "a", encoding="utf-8")
    with log:
        proc = subprocess.Popen([sys.executable, "-m", "fairseq_posenc.tools.launch.worker",
                                 str(pickled)], env={**os.environ, **env}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_parent())
    write_record(task, "local", pid=proc.pid, env=env)
    return proc
