"""An encoding written as a user writes one (``docs/adding-an-encoding.md``), for the tests
that show the package treats it as its own: registered for one test, removed afterwards."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from fairseq_posenc.core.encodings import ENCODINGS
from fairseq_posenc.nn import DistanceBias, register_encoding


class LearnedDecay(DistanceBias):
    """``-s_h |j - i| / w``: a learned slope per head, the width an option."""

    name = "test_learned_decay"

    def __init__(self, *, num_heads: int, test_decay_width: float = 8.0) -> None:
        super().__init__()
        self.width = test_decay_width
        self.scale = torch.nn.Parameter(torch.linspace(0.5, 2.0, num_heads))

    def distance_bias(self, r_lo: int, r_hi: int) -> torch.Tensor:
        r = torch.arange(r_lo, r_hi + 1, device=self.scale.device, dtype=self.scale.dtype)
        return -self.scale[:, None] * r.abs()[None, :] / self.width


@contextlib.contextmanager
def registered(cls: type = LearnedDecay) -> Iterator[str]:
    """``cls`` registered while the block runs; its name."""
    register_encoding(cls)
    try:
        yield cls.name
    finally:
        ENCODINGS.pop(cls.name, None)
