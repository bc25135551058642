"""A one-node SLURM cluster on this machine, for the tests: Debian's packages (installed when
missing, as root through apt), munge and the two daemons in a temporary directory, no
accounting database. Everything it starts is stopped by its own pid afterwards.

Where the machine cannot run the daemons (not root, no apt, the packages not installable),
:func:`cluster` skips the test and says why; under CI (``CI=true``) it fails instead, since
CI runs as root with Debian's packages in reach.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
COMMANDS = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "srun", "munged")
#: Ports away from SLURM's defaults (6817, 6818), so as not to meet a real cluster's.
PORTS = (16817, 16818)


def _cannot(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the SLURM test cannot run here: {reason} (CI must run it)")
    pytest.skip(f"the SLURM test cannot run here: {reason}")


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin")


def install() -> None:
    """Debian's SLURM and munge, unless they are here."""
    if all(_which(c) for c in COMMANDS):
        return
    if os.geteuid() != 0:
        _cannot("SLURM is not installed and installing it needs root")
    if shutil.which("apt-get") is None:
        _cannot("SLURM is not installed and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for attempt in ("install", "update", "install"):
        cmd = ["apt-get", "update"] if attempt == "update" else [
            "apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if attempt == "install" and done.returncode == 0:
            break
    else:
        _cannot(f"apt-get install {' '.join(PACKAGES)} failed: {done.stderr[-500:]}")
    # dpkg may start the packages' own services: theirs run on the default ports, not ours


def _wait(what: str, check, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {seconds:.0f} s")
        time.sleep(0.2)


@contextlib.contextmanager
def cluster(tmp: Path) -> Iterator[dict[str, str]]:
    """A running one-node cluster; yields the environment its clients need (SLURM_CONF)."""
    if os.geteuid() != 0:
        _cannot("the daemons run as root here (SlurmUser=root), and this is not root")
    install()
    tmp.mkdir(parents=True, exist_ok=True)
    os.chmod(tmp, 0o755)
    for d in ("state", "spool", "munge"):
        (tmp / d).mkdir(exist_ok=True)
    key = tmp / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    os.chmod(tmp / "munge", 0o700)
    sock = tmp / "munge" / "munge.socket"
    host = socket.gethostname().split(".")[0]
    cpus = len(os.sched_getaffinity(0))
    with open("/proc/meminfo") as f:
        mem_mb = int(f.readline().split()[1]) // 1024 - 512
    conf = tmp / "slurm.conf"
    conf.write_text(f"""ClusterName=posenc
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
StateSaveLocation={tmp / 'state'}
SlurmdSpoolDir={tmp / 'spool'}
SlurmctldPidFile={tmp / 'slurmctld.pid'}
SlurmdPidFile={tmp / 'slurmd.pid'}
SlurmctldLogFile={tmp / 'slurmctld.log'}
SlurmdLogFile={tmp / 'slurmd.log'}
SlurmctldPort={PORTS[0]}
SlurmdPort={PORTS[1]}
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
KillWait=5
NodeName={host} CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    pids: list[int] = []
    try:
        subprocess.run([_which("munged"), f"--socket={sock}", f"--key-file={key}",
                        f"--pid-file={tmp / 'munge' / 'munged.pid'}",
                        f"--log-file={tmp / 'munge' / 'munged.log'}",
                        f"--seed-file={tmp / 'munge' / 'munged.seed'}", "--force"],
                       check=True, capture_output=True)
        pids.append(int((tmp / "munge" / "munged.pid").read_text()))
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([_which(daemon), "-f", str(conf)], check=True, env=env,
                           capture_output=True)
            pid_file = tmp / f"{daemon}.pid"
            # the daemon creates the file before it writes the number: wait for the number
            _wait(f"{daemon} wrote its pid",
                  lambda f=pid_file: f.exists() and f.read_text().strip().isdigit())
            pids.append(int(pid_file.read_text()))

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                                 text=True).stdout
            return out.strip() == "idle"

        _wait("the node idle", idle)
        yield {"SLURM_CONF": str(conf)}
    finally:
        for pid in reversed(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in pids:
            with contextlib.suppress(TimeoutError):
                _wait(f"pid {pid} ended", lambda pid=pid: not Path(f"/proc/{pid}").exists(), 20)
