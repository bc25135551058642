"""Running fairseq: ``fairseq-train`` / ``fairseq-generate`` as the console script, or in
this process with the same arguments (no interpreter start-up per run: the smoke tests), each
with everything it prints in a log file, so that the terminal shows one line per run and the
log's end when a run fails.

A console script's process ends with the one that started it (on Linux:
:func:`fairseq_posenc.tools.launch.lifetime.die_with_parent`), and it is given the run locks
its starter holds on the log's directory (:func:`fairseq_posenc.tools.launch.lock.held_for`):
a fairseq-train that outlives its command (where the kernel does not end it) keeps its run
locked, so that the command's next run waits for it instead of training the run a second
time at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, TextIO

from ..launch import lock
from ..launch.lifetime import die_with_parent
from ..textprep.files import last_lines

#: ``--user-dir`` of every fairseq command: this plugin's directory.
USER_DIR = Path(__file__).resolve().parents[2]

#: Lines of the log shown when fairseq fails.
TAIL_LINES = 20


def progress(message: str) -> None:
    """The default reporter: one line on stderr."""
    print(f"[reproduce] {message}", file=sys.stderr, flush=True)


def run_fairseq(tool: str, args: Sequence[str], *, log: Path, in_process: bool = False,
                say: Optional[Callable[[str], None]] = None) -> None:
    """``tool`` (``fairseq-train`` or ``fairseq-generate``) with ``args`` (the program name
    excluded): the console script beside this interpreter (or on the PATH), or in this
    process. Everything fairseq prints (its config, every log line, hydra's warnings) goes
    to ``log``, created with its parents; ``say`` gets one line before and one after. A
    failure raises :class:`SystemExit` with the log's last lines."""
    say = say or progress
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    say(f"{tool} ... (log: {log})")
    try:
        with open(log, "w", encoding="utf-8") as out:
            if in_process:
                with logged_to(out):
                    _run_in_process(tool, args)
            else:
                _run_script(tool, args, out, log)
    # a failed subprocess, or fairseq's error in process (argparse's a SystemExit)
    except (Exception, SystemExit) as failure:
        tail = "\n".join(last_lines(log, TAIL_LINES))
        reason = (f"exit code {failure.code}" if isinstance(failure, SystemExit)
                  else str(failure) or type(failure).__name__)
        raise SystemExit(f"{tool} failed ({reason}); {log} ends with:\n{tail}") from failure
    say(f"{tool} done in {time.monotonic() - started:.0f}s")


def _run_script(tool: str, args: Sequence[str], out: TextIO, log: Path) -> None:
    """The console script, as ``subprocess.run(check=True)`` runs it (killed if this
    process is interrupted), ending with this thread (which waits for it) and holding the
    run locks on ``log``'s directory."""
    exe = Path(sys.executable).parent / tool
    command = [str(exe) if exe.exists() else tool, *args]
    with subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                          pass_fds=lock.held_for(log), preexec_fn=die_with_parent()) as proc:
        lock.note(log, proc.pid, f"{tool}, started by pid {os.getpid()}")
        try:
            code = proc.wait()
        except BaseException:  # Ctrl-C, a SIGTERM (launch.lifetime): the child stops too
            proc.kill()
            raise
    if code:
        raise subprocess.CalledProcessError(code, command)


@contextlib.contextmanager
def logged_to(out: TextIO) -> Iterator[None]:
    """Send this process's output and log records to ``out`` for the duration."""
    root = logging.getLogger()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter(
        "%(asctime)s | %(levelname)s | %(name)s | %(message)s"))
    saved, level = root.handlers[:], root.level
    root.handlers, root.level = [handler], logging.INFO
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            yield
    finally:
        root.handlers, root.level = saved, level


def _run_in_process(tool: str, args: Sequence[str]) -> None:
    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import generate, train

    from ... import register

    # --user-dir imports nothing here: this process imported the package already
    register()

    if tool == "fairseq-train":
        from fairseq import checkpoint_utils

        # fairseq keeps the best validation loss so far on the function; a new process
        # starts without it, so must each in-process training (or it never writes
        # checkpoint_best.pt unless it beats an earlier, unrelated model)
        if hasattr(checkpoint_utils.save_checkpoint, "best"):
            del checkpoint_utils.save_checkpoint.best
        from ...plugin.patience import restore

        restore(None)  # the same for --patience's count
        parsed = options.parse_args_and_arch(options.get_training_parser(), list(args))
        distributed_utils.call_main(convert_namespace_to_omegaconf(parsed), train.main)
    elif tool == "fairseq-generate":
        parsed = options.parse_args_and_arch(options.get_generation_parser(), list(args))
        generate.main(parsed)
    else:
        raise ValueError(tool)
