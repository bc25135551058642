"""fairseq's ``--patience``, resumable: a resumed training stops where the uninterrupted one
would.

``fairseq-train --patience P`` stops a training after ``P`` validations in a row without a
new best validation loss (``fairseq_cli.train.should_stop_early``). It keeps the best loss
and the count since it on the function, in memory only: a training resumed from a
checkpoint (a rerun after a kill, a SLURM requeue, a raised ``--max-update``) starts with
neither, takes its first validation as the best and counts ``P`` again from there, so it
trains on past the update where the uninterrupted run stopped.

:func:`persist_patience` keeps the count in every checkpoint and restores it with the
checkpoint: each saved checkpoint's ``extra_state`` gets ``"patience": {"best", "num_runs"}``
(fairseq validates before it saves, so the count includes that checkpoint's validation), and
loading it sets ``should_stop_early``'s state back, exactly when fairseq restores its own best
validation loss from the checkpoint (``checkpoint_utils.load_checkpoint``: not under
``--reset-optimizer``, ``--reset-meters`` or a fine-tuning start). A training that never
resumes is unchanged.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Optional

#: The key of the count in a checkpoint's ``extra_state``.
KEY = "patience"

_persisted = False


def _stopper() -> Optional[Any]:
    """``fairseq_cli.train.should_stop_early`` where this process trains (None elsewhere)."""
    module = sys.modules.get("fairseq_cli.train")
    return getattr(module, "should_stop_early", None)


def state() -> Optional[dict[str, Any]]:
    """The count as fairseq keeps it now: the best loss and the validations since it (None
    before the first validation, or outside a training)."""
    stopper = _stopper()
    if stopper is None or getattr(stopper, "best", None) is None:
        return None
    return {"best": stopper.best, "num_runs": getattr(stopper, "num_runs", 0)}


def restore(saved: Optional[dict[str, Any]]) -> None:
    """Set the count back to ``saved`` (what :func:`state` gave), or clear it (None)."""
    stopper = _stopper()
    if stopper is None:
        return
    if saved is None:
        for name in ("best", "num_runs"):
            if hasattr(stopper, name):
                delattr(stopper, name)
        return
    stopper.best = saved["best"]
    stopper.num_runs = saved["num_runs"]


def persist_patience() -> None:
    """Wrap ``Trainer.save_checkpoint`` and ``checkpoint_utils.load_checkpoint`` (once), as
    the module docstring says."""
    global _persisted
    if _persisted:
        return
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    save = Trainer.save_checkpoint

    @functools.wraps(save)
    def save_checkpoint(self, filename, extra_state):
        now = state()
        if now is not None:
            extra_state = {**extra_state, KEY: now}
        return save(self, filename, extra_state)

    load = checkpoint_utils.load_checkpoint

    @functools.wraps(load)
    def load_checkpoint(cfg, trainer, **passthrough):
        extra_state, epoch_itr = load(cfg, trainer, **passthrough)
        saved = (extra_state or {}).get(KEY)
        best = getattr(checkpoint_utils.save_checkpoint, "best", None)
        # fairseq took its best loss from this checkpoint: no reset, no fine-tuning start
        if saved is not None and best is not None and extra_state.get("best") == best:
            restore(saved)
        return extra_state, epoch_itr

    Trainer.save_checkpoint = save_checkpoint
    checkpoint_utils.load_checkpoint = load_checkpoint
    _persisted = True
