"""Checkpoints written by earlier code load into today's models with the same outputs.

``tests/fixtures/legacy/*.pt`` were written by ``fixtures/make_legacy_checkpoints.py`` at
the commit each file records (before position terms were declared by kind): a tiny model
per encoding, its flags, a fixed batch (left-padded sources, right-padded targets) and its
outputs. Each is loaded strictly (every parameter name and shape as saved, nothing missing
or extra) into a model built from the same flags, and must give the saved outputs at every
real (non-padding) position.
"""

from __future__ import annotations

import pathlib

import pytest
import torch

from tests.support.model_utils import ALL_ENCODINGS, assert_same_outputs, build_model

LEGACY = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "legacy"
#: Encodings added after the fixtures were written: no earlier code wrote them.
ADDED_SINCE = {"shape", "fox"}
WRITTEN = [name for name in ALL_ENCODINGS if name not in ADDED_SINCE]


def test_every_encoding_has_a_legacy_checkpoint():
    assert sorted(p.stem for p in LEGACY.glob("*.pt")) == sorted(WRITTEN)
    assert ADDED_SINCE <= set(ALL_ENCODINGS)


@pytest.mark.parametrize("encoding", WRITTEN)
def test_legacy_checkpoint_loads_with_the_same_outputs(encoding):
    saved = torch.load(LEGACY / f"{encoding}.pt", weights_only=True)
    assert saved["encoding"] == encoding
    model, _ = build_model(encoding, saved["flags"])
    # The same parameters in the same order: fairseq's optimizer state is by position.
    assert list(model.state_dict()) == list(saved["state_dict"])
    model.load_state_dict(saved["state_dict"], strict=True)
    assert_same_outputs(model, saved)
