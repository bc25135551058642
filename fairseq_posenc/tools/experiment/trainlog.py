"""Reading ``fairseq-train``'s log (``--log-format simple``, as the recipes and the demo
write it): the training speed, the validation losses and how far the training got.

The lines read, as fairseq writes them (the logger's name is the statistics' tag)::

    ... | INFO | train_inner | epoch 001:     10 / 28 loss=9.259, ..., wps=344.1, ..., num_updates=10
    ... | INFO | train | epoch 001 | loss 8.43 | ... | wps 623.7 | ... | num_updates 28 | ...
    ... | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.754 | ... | num_updates 20
    ... | INFO | fairseq.trainer | Loaded checkpoint .../checkpoint_last.pt (epoch 2 @ 40 updates)
    ... | INFO | fairseq_cli.train | early stop since valid performance hasn't improved for last 5 runs

``train_inner`` is a progress line (every ``--log-interval`` updates), ``train`` the
average of an epoch, ``valid`` a validation. Where a training will resume is not read here:
fairseq logs "Saved checkpoint" only once every copy of a checkpoint (``checkpoint_last.pt``,
``checkpoint_best.pt``) is written, so a killed training's log can end a checkpoint behind
its ``checkpoint_last.pt``; the checkpoint's own count says it
(:func:`~fairseq_posenc.tools.experiment.checkpoints.checkpoint_update`).
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Iterator, Optional, Sequence

_PROGRESS = re.compile(r"\| train_inner \| .*\bwps=([^,\s]+)")
_EPOCH = re.compile(r"\| train \| .*\| wps ([^\s|]+)")
_VALID = re.compile(r"\| valid on 'valid' subset \|")
_LOSS = re.compile(r"\| loss ([^\s|]+)")
_UPDATES = re.compile(r"\bnum_updates[= ](\d+)")
_LOADED = re.compile(r"\| Loaded checkpoint .* \(epoch \d+ @ (\d+) updates\)")
_EARLY_STOP = "early stop since valid performance hasn't improved"


def _lines(log: Path) -> Iterator[str]:
    with open(log, encoding="utf-8", errors="replace") as f:
        yield from f


def words_per_second(log: Path) -> Optional[float]:
    """The median target words per second of the training progress lines; of the epochs'
    averages where the training was shorter than one ``--log-interval``; None without
    either."""
    progress, epochs = [], []
    for line in _lines(log):
        if match := _PROGRESS.search(line):
            progress.append(float(match.group(1)))
        elif match := _EPOCH.search(line):
            epochs.append(float(match.group(1)))
    speeds = progress or epochs
    return statistics.median(speeds) if speeds else None


def validation_losses(log: Path) -> list[tuple[int, float]]:
    """``(num_updates, loss)`` of every validation on the ``valid`` subset, in order."""
    out = []
    for line in _lines(log):
        if _VALID.search(line):
            loss, updates = _LOSS.search(line), _UPDATES.search(line)
            if loss and updates:
                out.append((int(updates.group(1)), float(loss.group(1))))
    return out


def history(logs: Sequence[Path]) -> list[tuple[int, float]]:
    """The validations ``(num_updates, loss)`` of a training logged in parts (``logs``,
    oldest first: :func:`parts`), as the training that went on kept them: a part that
    resumed from a checkpoint of update ``U`` (or from nothing: ``U = 0``) discards what the
    parts before it validated after ``U``, since fairseq trains those updates again."""
    kept: list[tuple[int, float]] = []
    for log in logs:
        start = resumed_at(log) or 0
        kept = [(u, loss) for u, loss in kept if u <= start] + validation_losses(log)
    return kept


def resumed_at(log: Path) -> Optional[int]:
    """The update of the checkpoint the training that wrote ``log`` started from (None: it
    started from nothing)."""
    for line in _lines(log):
        if match := _LOADED.search(line):
            return int(match.group(1))
    return None


def stopped_early(log: Path) -> bool:
    """Whether fairseq stopped the training that wrote ``log`` by ``--patience``."""
    return any(_EARLY_STOP in line for line in _lines(log))


def last_update(log: Path) -> Optional[int]:
    """The highest ``num_updates`` the log reports (None if it reports none)."""
    found = [int(m.group(1)) for line in _lines(log) for m in _UPDATES.finditer(line)]
    return max(found, default=None)


def parts(log: Path) -> list[Path]:
    """Every part of a training's log, oldest first: ``train.N.log`` for each part before a
    resume (:func:`keep_earlier`), then ``log`` itself where it exists."""
    stem, suffix = log.stem, log.suffix
    earlier = sorted((p for p in log.parent.glob(f"{stem}.*{suffix}")
                      if p.name[len(stem) + 1:-len(suffix)].isdigit()),
                     key=lambda p: int(p.name[len(stem) + 1:-len(suffix)]))
    return earlier + ([log] if log.exists() else [])


def keep_earlier(log: Path) -> None:
    """Before a training resumes into ``log``: its earlier part becomes ``train.N.log``
    (N counting the parts from 1), so that every part's log is kept."""
    if log.exists():
        log.rename(log.with_name(f"{log.stem}.{len(parts(log))}{log.suffix}"))


def finished(log: Path) -> bool:
    """Whether the training that wrote ``log`` reached its end (fairseq's last line)."""
    return log.exists() and any("done training in" in line for line in _lines(log))
