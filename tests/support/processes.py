"""The live processes that work on a directory, read from Linux's ``/proc``: what the kill
tests count (a process whose command line names the directory: a local worker's task file,
fairseq-train's ``--save-dir``). A process that has ended and that no one has reaped yet
(a zombie, its parent gone) does not count: it runs nothing. And :func:`at_default`, which
starts a command that a test signals as a terminal would start it."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    args: tuple[str, ...]

    @property
    def fairseq_train(self) -> bool:
        return any(Path(a).name == "fairseq-train" for a in self.args[:2])


def live() -> list[Proc]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        if stat[0] != "Z":
            found.append(Proc(int(entry.name), int(stat[1]),
                              tuple(a.decode(errors="replace") for a in args)))
    return found


def working_on(directory: Path) -> list[Proc]:
    """Every live process whose command line names ``directory`` or a path inside it."""
    name = str(directory)
    return [p for p in live() if any(name in a for a in p.args)]


def trainings(directory: Path) -> list[Proc]:
    """The fairseq-train processes of a run (``directory``: its save directory), their
    data-loading processes (forks, with the same command line) left out while their
    fairseq-train lives (one that outlives it has another parent: it counts)."""
    procs = [p for p in working_on(directory) if p.fairseq_train]
    pids = {p.pid for p in procs}
    return [p for p in procs if p.ppid not in pids]


def at_default(*signals: signal.Signals) -> Callable[[], None]:
    """A ``preexec_fn`` that starts the child with ``signals`` at their default action, as a
    terminal starts a command, however the tests were started: a child keeps a signal ignored
    that its parent ignored (as it should: ``nohup`` relies on it), and a background job of a
    non-interactive shell (``bash scripts/test.sh &``) starts with SIGINT ignored, ``nohup``
    with SIGHUP, a job runner maybe with either. A test that sends a signal to a command
    starts it so, or the signal finds it ignored."""
    def reset() -> None:
        for sig in signals:
            signal.signal(sig, signal.SIG_DFL)
    return reset


def alive(pid: int) -> bool:
    return any(p.pid == pid for p in live())


def wait_for(what: str, check: Callable[[], object], seconds: float) -> float:
    """Seconds until ``check()`` is true; fails the test after ``seconds``."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < seconds, f"{what} within {seconds} s"
        time.sleep(0.05)
    return time.monotonic() - started


def sleeping_run(home: Path, seconds: float) -> None:
    """A stand-in for a run's training: a child process that sleeps, its command line naming
    ``home``, started the way fairseq-train is (``run_fairseq``, its log in ``home``). A
    module-level function: a local worker imports it (the tests run from the repository's
    root, which ``python -m`` puts on the worker's path)."""
    import sys

    from fairseq_posenc.tools.experiment.fairseq_run import run_fairseq

    run_fairseq(sys.executable, ["-c", f"import time; time.sleep({seconds})", str(home)],
                log=home / "train.log", say=lambda _: None)


def hold(directory: Path, stop: Path) -> None:
    """Hold ``directory``'s run lock until ``stop`` exists, as a process that an earlier
    command left on the run does; says ``held`` once it holds it."""
    from fairseq_posenc.tools.launch import lock

    with lock.run(directory, "held", "the test's holder", print):
        print("held", flush=True)
        while not stop.exists():
            time.sleep(0.05)
