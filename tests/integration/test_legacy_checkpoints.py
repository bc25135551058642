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

from tests.support.model_utils import ALL_ENCODINGS, build_model, dictionary

PAD = dictionary().pad()

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
    inputs = saved["inputs"]
    with torch.no_grad():
        enc_out = model.encoder(inputs["src_tokens"], inputs["src_lengths"])
        logits = model.decoder(inputs["prev_output_tokens"], enc_out)[0]
    # Padded positions are compared too, except as queries: their outputs are never used
    # (cross-attention and the loss skip them), and no encoding promises anything there.
    src_real = inputs["src_tokens"].ne(PAD).t()  # (T, B), as encoder_out
    tgt_real = inputs["prev_output_tokens"].ne(PAD)  # (B, T), as the logits
    torch.testing.assert_close(enc_out["encoder_out"][0][src_real],
                               saved["encoder_out"][src_real], rtol=0, atol=2e-5)
    torch.testing.assert_close(logits[tgt_real], saved["logits"][tgt_real], rtol=0, atol=2e-5)
