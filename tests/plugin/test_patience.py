"""``--patience`` counts on across a resume (``plugin/patience.py``).

The reference is the uninterrupted training with fairseq's own ``--patience``: its
validation losses and the update where it stops early. A training stopped at a checkpoint
after its best validation (the count at 1, not 0) and resumed with a larger
``--max-update`` must validate the same losses and stop at the same update; fairseq alone
would take the first validation after the resume as its best and count again from there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.cli_utils import (create_parallel_corpus, preprocess_translation_data,
                                     train_translation_model)
from fairseq_posenc.plugin import patience

EVERY, PATIENCE = 5, 3
#: validation every EVERY updates and nowhere else; a checkpoint at each
FLAGS = ["--validate-interval-updates", str(EVERY), "--save-interval-updates", str(EVERY),
         "--keep-interval-updates", "1", "--validate-interval", "1000000",
         "--save-interval", "1000000", "--patience", str(PATIENCE), "--lr", "0.003", "--cpu"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("patience")
    # 40 training pairs: a tiny model over-fits them within a few dozen updates
    create_parallel_corpus(root / "raw", num_train=40, num_valid=20, num_test=5, seed=2)
    preprocess_translation_data(root / "raw", root / "bin")
    return root / "bin"


def train(data: Path, save_dir: Path, max_update: int, caplog) -> list[tuple[int, float]]:
    """One fairseq-train in this process, as a new process starts (no count in memory);
    the validations ``(update, loss)`` it logged."""
    import logging

    patience.restore(None)
    from fairseq import checkpoint_utils

    if hasattr(checkpoint_utils.save_checkpoint, "best"):
        del checkpoint_utils.save_checkpoint.best
    caplog.clear()
    with caplog.at_level(logging.INFO):
        train_translation_model(data, save_dir, "transformer_tiny_sinusoidal", max_update,
                                extra_flags=FLAGS)
    found = []
    for record in caplog.records:
        message = record.getMessage()
        if "valid on 'valid' subset" in message:
            loss = float(re.search(r"\| loss ([\d.]+)", message).group(1))
            found.append((int(re.search(r"num_updates (\d+)", message).group(1)), loss))
    return found


@pytest.mark.slow  # three tiny trainings
def test_a_resumed_training_stops_where_the_uninterrupted_one_does(data, tmp_path, caplog):
    whole = train(data, tmp_path / "whole", 400, caplog)
    stop = whole[-1][0]
    assert stop < 400, whole  # it stopped early
    best = min(range(len(whole)), key=lambda i: whole[i][1])
    assert len(whole) - 1 - best == PATIENCE  # stopped by the count, as fairseq's rule says

    resume_at = whole[best + 1][0]  # a checkpoint after the best: the count stands at 1
    first = train(data, tmp_path / "split", resume_at, caplog)
    assert first == whole[:best + 2]
    rest = train(data, tmp_path / "split", 400, caplog)
    assert first + rest == whole  # the same losses, and the same stop
