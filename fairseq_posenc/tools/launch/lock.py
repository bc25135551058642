"""One command at a time on a directory, and one process tree at a time on a run.

Both locks are ``fcntl.flock`` on ``DIR/.posenc.lock``, released by the kernel when the last
process holding it ends, however it ends, so that a killed command leaves nothing to clean up.
The file says who holds it (pid, host, start, what).

* :func:`hold` -- the command's lock on its output directory: a second command is refused.
  A command that made the directory and stops before writing anything else in it (bad
  input) removes it again, so that it leaves nothing behind.
* :func:`run` -- a run's lock on the run's directory, held by whatever works on the run (a
  local worker, or the command that runs its runs in turn) and by the ``fairseq-train`` it
  starts (:func:`held_for` gives the lock to the child, :func:`note` names it in the file),
  so that it stays held while any of them lives: on a system where a killed command's
  processes survive it (:mod:`.lifetime`), the next command finds the run busy
  (:func:`busy`) and waits for it, instead of training it a second time at once. Waiting
  rather than refusing: the one left behind ends by itself, and what it saved is where the
  run continues; its pid is named, to stop it instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, TextIO

NAME = ".posenc.lock"

#: Seconds between looks at a busy run's lock, and between the lines that say it is
#: still waited for.
POLL_SECONDS = 1.0
HEARTBEAT = 60.0

#: The runs' locks this process holds: the run's directory (resolved) and its open file.
_held: dict[Path, TextIO] = {}


def _holder(what: str, pid: Optional[int] = None) -> str:
    return (f"pid {pid or os.getpid()} on {socket.gethostname()} since "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {what}\n")


def _take(f: TextIO) -> bool:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _claim(f: TextIO, what: str) -> None:
    f.seek(0)
    f.truncate()
    f.write(_holder(what))
    f.flush()


@contextlib.contextmanager
def hold(directory: Path, tool: str) -> Iterator[None]:
    """Hold ``directory``'s lock for the duration, or stop (:class:`SystemExit`) naming the
    process that holds it."""
    made = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / NAME
    f = open(path, "a+", encoding="utf-8")
    try:
        if not _take(f):
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise SystemExit(
                f"{tool}: {directory} is in use by {holder}; wait until it ends (a command "
                "that submits SLURM jobs ends once they are submitted), or use another "
                "directory") from None
        _claim(f, " ".join(sys.argv))
        yield
    finally:
        if made and [p.name for p in directory.iterdir()] == [NAME]:
            path.unlink()
            directory.rmdir()
        f.close()  # closing releases the lock


def busy(directory: Path) -> Optional[str]:
    """Who holds the run lock of ``directory`` (:func:`holders`), when another process
    holds it; None when it is free (or was never taken: nothing is created)."""
    path = directory / NAME
    if not path.exists() or directory.resolve() in _held:
        return None
    with open(path, "r+", encoding="utf-8") as f:  # writable: NFS's flock wants it
        if _take(f):
            return None  # closing releases it again
        return holders(directory)


def holders(directory: Path) -> str:
    """The processes named in ``directory``'s lock file that live (on this host), as
    ``pid 4242 (fairseq-train ...)``. Where none does, the lock belongs to a process they
    started that the file does not name (fairseq-train's data loaders, which end within
    seconds of it), or to another host's: then what the file says."""
    try:
        lines = (directory / NAME).read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    here = socket.gethostname()
    alive, ended = [], []
    for line in lines:
        m = re.match(r"pid (\d+) on (\S+) since \S+ \S+: (.*)$", line)
        if m and m.group(2) == here:
            named = f"pid {m.group(1)} ({m.group(3)})"
            (alive if _lives(int(m.group(1))) else ended).append(named)
    if alive:
        return " and ".join(alive)
    if ended and len(ended) == len(lines):
        return f"a process started by {' or '.join(ended)}, which ended"
    return "; ".join(lines) or "another process"


def _lives(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a child that ended and that no one has reaped yet
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


@contextlib.contextmanager
def run(directory: Path, label: str, what: str,
        say: Callable[[str], None]) -> Iterator[None]:
    """Hold the run lock of ``directory`` (made with its parents) for the duration, this
    process doing ``what``. While another process holds it, wait, saying so (``label``: the
    run's name) and every :data:`HEARTBEAT` seconds again. Held already by this process:
    nothing more to do."""
    key = directory.resolve()
    if key in _held:
        yield
        return
    directory.mkdir(parents=True, exist_ok=True)
    f = open(directory / NAME, "a+", encoding="utf-8")
    try:
        if not _take(f):
            _wait(f, directory, label, say)
        _claim(f, what)
        _held[key] = f
        yield
    finally:
        _held.pop(key, None)
        f.close()  # closing releases the lock (a child given it keeps it until it ends)


def _wait(f: TextIO, directory: Path, label: str, say: Callable[[str], None]) -> None:
    who = holders(directory)
    say(f"{label}: waiting for {who} to end: it still works on {directory} (an earlier "
        "command's, left behind when it was killed?); kill it to stop it instead")
    started = told = time.monotonic()
    while not _take(f):
        time.sleep(POLL_SECONDS)
        now = time.monotonic()
        if now - told >= HEARTBEAT:
            say(f"{label}: still waiting for {who} ({_minutes(now - started)} so far)")
            told = now
    say(f"{label}: {who} ended after {_minutes(time.monotonic() - started)}; the run "
        "continues from what it saved")


def _minutes(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


@contextlib.contextmanager
def runs(directories: Sequence[tuple[Path, str]], what: str,
         say: Callable[[str], None]) -> Iterator[None]:
    """:func:`run` for each ``(directory, label)`` at once, for the duration."""
    with contextlib.ExitStack() as stack:
        for directory, label in directories:
            stack.enter_context(run(directory, label, what, say))
        yield


def held_for(path: Path) -> list[int]:
    """The file descriptors of the run locks this process holds on ``path`` or a directory
    above it: a child that works on the run gets them (``pass_fds``), so that the run stays
    locked while the child lives, its parent ended or not."""
    target = path.resolve()
    return [f.fileno() for d, f in _held.items() if d == target or d in target.parents]


def note(path: Path, pid: int, what: str) -> None:
    """Name the child ``pid`` (doing ``what``) in the run locks it was given
    (:func:`held_for`), for the messages of a command that finds them busy."""
    target = path.resolve()
    for d, f in _held.items():
        if d == target or d in target.parents:
            f.write(_holder(what, pid))
            f.flush()
