"""One command at a time on a directory: the second is refused, with who holds it.

The lock is ``fcntl.flock`` on ``DIR/.posenc.lock``, held while the command runs and
released by the kernel when its process ends, however it ends, so that a killed command
leaves nothing to clean up. The file says who holds it (pid, host, start, command). A command
that made the directory and stops before writing anything else in it (bad input) removes it
again, so that it leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

NAME = ".posenc.lock"


@contextlib.contextmanager
def hold(directory: Path, tool: str) -> Iterator[None]:
    """Hold ``directory``'s lock for the duration, or stop (:class:`SystemExit`) naming the
    process that holds it."""
    made = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / NAME
    f = open(path, "a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise SystemExit(
                f"{tool}: {directory} is in use by {holder}; wait until it ends (a command "
                "that submits SLURM jobs ends once they are submitted), or use another "
                "directory") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()} since "
                f"{time.strftime('%Y-%m-%d %H:%M:%S')} ({' '.join(sys.argv)})\n")
        f.flush()
        yield
    finally:
        if made and [p.name for p in directory.iterdir()] == [NAME]:
            path.unlink()
            directory.rmdir()
        f.close()  # closing releases the lock
