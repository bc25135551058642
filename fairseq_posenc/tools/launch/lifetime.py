"""The processes of a command end with it: the local launcher's workers, each run's
``fairseq-train``, whatever kills the command.

* **On Linux a child dies with its parent.** A child started with
  :func:`die_with_parent` as its ``preexec_fn`` asks the kernel (``prctl(PR_SET_PDEATHSIG,
  SIGKILL)``) for SIGKILL when the thread that started it ends, however it ends: a SIGKILL
  of the command's process group, a batch system's kill, a closed terminal. The request
  survives the child's ``exec`` (not a set-uid one, which no child here is), and it is
  the *thread* that counts: a child must be started from a thread that outlives it, as
  ``subprocess.run`` (which waits for it) and the local launcher's loop (which stops its
  workers before it returns) do. SIGKILL, not SIGTERM, because nobody is left to hear what
  the child does, nothing the child does with a handler is wanted, and a run continues
  from its last checkpoint anyway. A worker's ``fairseq-train`` asks the same of the
  worker, so that they end in a chain; fairseq-train's own processes follow it (torch's
  multi-GPU processes ask for SIGINT, its data loaders look for their parent every 5 s).
* **Everywhere, a stopped command stops what it started.** :func:`stop_on_signals` turns
  SIGTERM and SIGHUP into :class:`Stopped`, as Python turns Ctrl-C into
  :class:`KeyboardInterrupt`, so that the launcher's own cleanup runs: the local launcher
  stops each worker by its process group, ``subprocess.run`` kills its child.
* macOS has no such request: a SIGKILL of the command there leaves its workers and their
  trainings running. What holds on every system is each run's lock
  (:func:`.lock.run`): held by whatever works on the run and by its ``fairseq-train``,
  released by the kernel when the last of them ends, waited for by the command's next
  run, so that a run never trains twice at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from typing import Callable, Iterator, Optional

#: ``prctl``'s option for the signal a process gets when its parent thread ends
#: (``<linux/prctl.h>``).
PR_SET_PDEATHSIG = 1


def die_with_parent() -> Optional[Callable[[], None]]:
    """A ``preexec_fn`` for :class:`subprocess.Popen` that makes the child get SIGKILL when
    the calling thread ends; None where the kernel offers no such request (not Linux).

    The function runs in the child between ``fork`` and ``exec``: it calls ``prctl`` and
    ``getppid`` only (libc resolved here, in the parent), and glibc's ``fork`` leaves its
    allocator usable in the child, so that the parent's other threads (the progress
    watcher) cannot deadlock it. A parent that ended before the request was made (its
    ``getppid`` is no longer the parent) is answered at once with the same SIGKILL."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def request() -> None:
        if prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return request


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where this process is, like Ctrl-C's
    :class:`KeyboardInterrupt` (which ``except Exception`` and the tools' ``except
    SystemExit`` let through, as they must)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stop_on_signals(tool: str) -> Iterator[None]:
    """For the duration, SIGTERM and SIGHUP raise :class:`Stopped` in the main thread (the
    ``finally`` blocks inside stop what they started), and leaving it that way stops the
    tool: a line on stderr and :class:`SystemExit` with the shell's status for the signal
    (143 for SIGTERM). A signal that is not at its default action keeps its handler
    (``nohup``'s ignored SIGHUP stays ignored); outside the main thread nothing changes
    (Python runs handlers there only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame) -> None:
        for sig in saved:  # one stop: a second signal does not break the cleanup off
            signal.signal(sig, signal.SIG_IGN)
        raise Stopped(signum)

    saved = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            saved[sig] = signal.signal(sig, stop)
    try:
        yield
    except Stopped as stopped:
        print(f"{tool}: stopped by {stopped}; what it started has stopped too; rerun the "
              "same command to continue", file=sys.stderr, flush=True)
        raise SystemExit(128 + stopped.signum) from None
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
