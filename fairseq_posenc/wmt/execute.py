"""Running fairseq for a reproduction: ``fairseq-train`` / ``fairseq-generate`` as the
console scripts (the recipe) or in this process with the same arguments (the smoke mode),
each with its output in a log file (the terminal shows progress, results and the logs), and
the checkpoint each paper evaluates (last, best, or the average of the last ones: fairseq's
``scripts/average_checkpoints.py`` is not part of the installed package, hence
:func:`average_checkpoints`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence, TextIO

from .recipes import Paper
from .runs import Run, Scale, train_args


def run_fairseq(tool: str, args: Sequence[str], in_process: bool, log: Path) -> None:
    """``fairseq-train`` / ``fairseq-generate`` as the console script (the recipe), or in
    this process with the same arguments (the smoke mode: no interpreter start-up per run).
    Everything fairseq prints (its config, every log line, hydra's warnings) goes to ``log``;
    the terminal gets one line before and after, and the log's end when fairseq fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    progress(f"{tool} ... (log: {log})")
    try:
        with open(log, "w", encoding="utf-8") as out:
            if in_process:
                with logged_to(out):
                    _run_in_process(tool, args)
            else:
                exe = Path(sys.executable).parent / tool
                subprocess.run([str(exe) if exe.exists() else tool, *args], check=True,
                               stdout=out, stderr=subprocess.STDOUT)
    except Exception as failure:  # a failed subprocess, or fairseq's error in process
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise SystemExit(f"{tool} failed ({failure}); {log} ends with:\n{tail}") from failure
    progress(f"{tool} done in {time.monotonic() - started:.0f}s")


def progress(message: str) -> None:
    print(f"[reproduce] {message}", file=sys.stderr, flush=True)


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

    if tool == "fairseq-train":
        from fairseq import checkpoint_utils

        # fairseq keeps the best validation loss so far on the function; a new process
        # starts without it, so must each in-process training (or it never writes
        # checkpoint_best.pt unless it beats an earlier, unrelated model)
        if hasattr(checkpoint_utils.save_checkpoint, "best"):
            del checkpoint_utils.save_checkpoint.best
        parsed = options.parse_args_and_arch(options.get_training_parser(), list(args))
        distributed_utils.call_main(convert_namespace_to_omegaconf(parsed), train.main)
    elif tool == "fairseq-generate":
        parsed = options.parse_args_and_arch(options.get_generation_parser(), list(args))
        generate.main(parsed)
    else:
        raise ValueError(tool)


def train(run: Run, data: Path, work: Path, scale: Scale, in_process: bool = False) -> None:
    save = run.save_dir(work)
    save.mkdir(parents=True, exist_ok=True)
    progress(f"train {run.paper.key} {run.row.label} {run.column.dataset} {run.pair} "
             f"seed {run.seed}")
    run_fairseq("fairseq-train", train_args(run, data, work, scale), in_process,
                save / "train.log")


def average_checkpoints(paths: Sequence[Path], out: Path) -> Path:
    """Parameter-wise mean of ``paths`` (as fairseq's scripts/average_checkpoints.py), the
    rest of the state from the last one. Written to a temporary name, then renamed."""
    import torch
    from fairseq_posenc.checkpoint import register_safe_globals

    register_safe_globals()  # fairseq's checkpoint globals for torch.load(weights_only=True)
    states = [torch.load(p, map_location="cpu") for p in paths]
    averaged = dict(states[-1])
    averaged["model"] = {
        k: (sum(s["model"][k].double() for s in states) / len(states)).to(v.dtype)
        if v.is_floating_point() else v
        for k, v in states[-1]["model"].items()
    }
    tmp = out.with_suffix(".tmp")
    torch.save(averaged, tmp)
    os.replace(tmp, out)
    return out


def evaluated_checkpoint(paper: Paper) -> str:
    """The file name of the checkpoint ``paper`` evaluates (see :func:`final_checkpoint`)."""
    if paper.average_last:
        return f"checkpoint_avg{paper.average_last}.pt"
    return "checkpoint_best.pt" if paper.checkpoint == "best" else "checkpoint_last.pt"


def final_checkpoint(run: Run, work: Path) -> Path:
    """The checkpoint the paper evaluates: the last, the best on the validation set, or the
    average of the last interval checkpoints (written here)."""
    save = run.save_dir(work)
    last = save / "checkpoint_last.pt"
    if not last.exists():
        raise SystemExit(f"{last} does not exist: train first (posenc-reproduce train ...)")
    n = run.paper.average_last
    if not n and run.paper.checkpoint == "best":
        best = save / evaluated_checkpoint(run.paper)
        if not best.exists():
            raise SystemExit(f"{best} does not exist: {run.paper.key} evaluates the checkpoint "
                             "chosen on the validation set, which fairseq-train writes when it "
                             "validates; train with validation on (no --disable-validation)")
        return best
    if not n:
        return last

    def updates(p: Path) -> int:
        return int(p.stem.rsplit("_", 1)[1])

    kept = sorted(save.glob("checkpoint_*_*.pt"), key=updates)[-n:]
    if len(kept) < n:
        print(f"[reproduce] warning: {len(kept)} interval checkpoints in {save}, the paper "
              f"averages {n}", file=sys.stderr)
    if not kept:
        return last
    return average_checkpoints(kept, save / evaluated_checkpoint(run.paper))
