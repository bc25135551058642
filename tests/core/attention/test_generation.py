"""``--task translation_gnmt``: beam search ranked by GNMT's length penalty
``((5 + L) / 6) ** alpha`` (tensor2tensor, THUMT) instead of fairseq's ``L ** alpha``.

Reference: each finished hypothesis' score equals the sum of its token log-probabilities
from a full forward of the model, divided by GNMT's penalty written out here."""

from __future__ import annotations

import argparse

import pytest
import torch
from fairseq.tasks.translation import TranslationConfig

from fairseq_posenc.plugin.generation import GNMTLengthPenalty, TranslationGNMTTask
from tests.support.batches import random_source
from tests.support.model_utils import build_model


def test_penalty_is_gnmts():
    for length in (1, 7, 40):
        assert length ** GNMTLengthPenalty(0.6) == pytest.approx(((5 + length) / 6) ** 0.6)
    assert 9 ** GNMTLengthPenalty(0.0) == 1.0


@pytest.mark.parametrize("encoding", ["sinusoidal", "diet_rel"])
def test_beam_scores_are_normalized_by_gnmts_penalty(encoding):
    model, d = build_model(encoding)
    task = TranslationGNMTTask(TranslationConfig(), d, d)
    args = argparse.Namespace(beam=5, lenpen=0.6, max_len_a=0, max_len_b=10)
    generator = task.build_generator([model], args)
    src, lengths = random_source(d)
    with torch.no_grad():
        hypos = generator.generate([model], {"net_input": {"src_tokens": src,
                                                           "src_lengths": lengths}})
    for row_hypos in hypos:
        assert len(row_hypos) == 5
        for hypo in row_hypos:
            total = float(hypo["positional_scores"].sum())
            length = len(hypo["tokens"])  # eos included, as fairseq counts
            assert float(hypo["score"]) == pytest.approx(total / ((5 + length) / 6) ** 0.6,
                                                         abs=1e-4)
        scores = [float(h["score"]) for h in row_hypos]
        assert scores == sorted(scores, reverse=True)  # ranked by the GNMT-normalized score
