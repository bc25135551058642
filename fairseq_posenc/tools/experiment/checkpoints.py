"""Which checkpoint a run evaluates, by a rule: ``last`` (fairseq's checkpoint_last.pt),
``best`` (checkpoint_best.pt, the lowest validation loss) or ``avgN`` (the parameter-wise
mean of the last N interval checkpoints, written to checkpoint_avgN.pt), and the
``fairseq-train`` flags that keep those interval checkpoints. fairseq's
``scripts/average_checkpoints.py`` is not part of the installed package, hence
:func:`average_checkpoints`. :func:`checkpoint_update` reads the update a checkpoint holds,
where a resumed training starts.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Optional, Sequence

from .fairseq_run import progress

#: The rules, as a help text lists them.
RULES = ("last", "best", "avgN (N >= 2)")
_AVERAGE = re.compile(r"avg([1-9][0-9]*)")


def _averaged(rule: str) -> int:
    """N of ``avgN``; 0 for any other rule."""
    match = _AVERAGE.fullmatch(rule)
    return int(match.group(1)) if match else 0


def check_rule(rule: str) -> None:
    """:class:`ValueError` unless ``rule`` is one of :data:`RULES`."""
    if rule in ("last", "best") or _averaged(rule) >= 2:
        return
    raise ValueError(f"unknown checkpoint rule {rule!r}: expected {', '.join(RULES)}; avgN "
                     "is the average of the last N interval checkpoints, e.g. avg5")


def checkpoint_name(rule: str) -> str:
    """The file name of the checkpoint ``rule`` evaluates."""
    check_rule(rule)
    return f"checkpoint_{rule}.pt"


def interval_flags(rule: str, max_update: int) -> list[str]:
    """``fairseq-train`` flags for ``rule``: for ``avgN``, a checkpoint every hundredth of
    the training, the last N kept; none for the others."""
    check_rule(rule)
    n = _averaged(rule)
    if not n:
        return []
    return ["--save-interval-updates", str(max(1, max_update // 100)),
            "--keep-interval-updates", str(n)]


def final_checkpoint(save_dir: Path, rule: str, *, say: Optional[Callable[[str], None]] = None,
                     how_to_train: str = "") -> Path:
    """The checkpoint ``rule`` evaluates in ``save_dir``: the last, the best on the validation
    set, or the average of the last N interval checkpoints (written here; with fewer than N,
    the average of those there are and a warning through ``say``; with none, the last).
    :class:`SystemExit` when the training has not finished a checkpoint (``how_to_train``:
    the command that trains, for the message) or has no best one."""
    check_rule(rule)
    say = say or progress
    last = save_dir / "checkpoint_last.pt"
    if not last.exists():
        hint = f" ({how_to_train})" if how_to_train else ""
        raise SystemExit(f"{last} does not exist: train first{hint}")
    if rule == "last":
        return last
    if rule == "best":
        best = save_dir / checkpoint_name(rule)
        if not best.exists():
            raise SystemExit(f"{best} does not exist: the checkpoint rule 'best' evaluates the "
                             "checkpoint chosen on the validation set, which fairseq-train "
                             "writes when it validates; train with validation on (no "
                             "--disable-validation)")
        return best
    n = _averaged(rule)

    def updates(p: Path) -> int:
        return int(p.stem.rsplit("_", 1)[1])

    # checkpoint_EPOCH_UPDATES.pt; checkpoint_last/best/avgN.pt have one underscore
    kept = sorted(save_dir.glob("checkpoint_*_*.pt"), key=updates)[-n:]
    if len(kept) < n:
        say(f"warning: {len(kept)} interval checkpoints in {save_dir}, {rule} averages {n}")
    if not kept:
        return last
    return average_checkpoints(kept, save_dir / checkpoint_name(rule))


def average_checkpoints(paths: Sequence[Path], out: Path) -> Path:
    """Parameter-wise mean of ``paths`` (as fairseq's scripts/average_checkpoints.py), the
    rest of the state from the last one. Written to a temporary name, then renamed. A
    damaged one stops with :class:`SystemExit` naming it."""
    import torch

    from ...plugin.checkpoint import DamagedCheckpoint, load

    try:
        states = [load(p) for p in paths]
    except DamagedCheckpoint as e:
        raise SystemExit(str(e)) from None
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


def checkpoint_update(checkpoint: Path) -> Optional[int]:
    """The update ``checkpoint`` was saved at, where ``fairseq-train`` resumes from it (its
    "Loaded checkpoint ... (epoch E @ U updates)"): the count in its last
    ``optimizer_history`` entry, read memory-mapped (the weights are not read). None for a
    file without one (no training's checkpoint); :class:`ValueError` naming a damaged file
    (:class:`~fairseq_posenc.plugin.checkpoint.DamagedCheckpoint`)."""
    from ...plugin.checkpoint import load

    state = load(checkpoint, mmap=True, weights_only=True)
    history = state.get("optimizer_history") if isinstance(state, dict) else None
    last = history[-1] if isinstance(history, list) and history else {}
    updates = last.get("num_updates") if isinstance(last, dict) else None
    return int(updates) if updates is not None else None
