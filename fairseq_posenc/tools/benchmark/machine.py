"""The machine a run measured on: what it is, what else ran on it, and torch's threads."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import torch

#: The checkout the package is installed from (editable: ``pip install -e .``): where
#: ``runs/`` goes by default and whose git commit a run records.
REPO = Path(__file__).resolve().parents[3]
#: Where a run's reports go by default: ``runs/`` of that checkout, or of the current
#: directory where the package is installed from a wheel (no checkout around it).
RUNS = REPO / "runs" if (REPO / "setup.py").exists() else Path("runs")


def make_folders(*paths: Optional[str]) -> None:
    """The folders of the output files given (None: no file), made before any work, so that
    a folder that cannot be made stops a run before it times anything."""
    for path in filter(None, paths):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else all."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class OtherLoad:
    """CPU time other processes used while this one ran (Linux ``/proc/stat``), in cores:
    what competed with the measurements. None where ``/proc/stat`` is missing."""

    def __init__(self) -> None:
        self.start = self._sample()

    @staticmethod
    def _sample() -> Optional[tuple[float, float, float]]:
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        # user nice system idle iowait irq softirq steal ...: busy = all but idle, iowait
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
        own = sum(os.times()[:2])
        return time.perf_counter(), busy, own

    def cores(self) -> Optional[float]:
        end = self._sample()
        if self.start is None or end is None or end[0] <= self.start[0]:
            return None
        wall, busy, own = (b - a for a, b in zip(self.start, end))
        return max(0.0, (busy - own) / wall)


def machine_info(device: torch.device, threads: int) -> dict[str, Any]:
    """CPU, cores, versions, device (and GPU), git commit and load average at the start."""
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    info = {
        "cpu": cpu, "cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "torch_threads": threads, "torch": torch.__version__, "python": platform.python_version(),
        "device": str(device), "platform": platform.platform(),
    }
    with contextlib.suppress(Exception):
        import fairseq
        info["fairseq"] = fairseq.__version__
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    if os.environ.get("POSENC_GIT_COMMIT"):
        # a copy of the checkout whose .git may be missing or older than its files (a lent
        # GPU machine): the commit as told
        info["git_commit"] = os.environ["POSENC_GIT_COMMIT"]
    else:
        with contextlib.suppress(Exception):
            info["git_commit"] = subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                check=True).stdout.strip()
    with contextlib.suppress(OSError):
        info["load_average_start"] = os.getloadavg()
    return info


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` for the block, restored after it."""
    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
