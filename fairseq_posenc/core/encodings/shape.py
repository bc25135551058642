"""``shape``: shifted absolute position embedding (Kiyono, Kobayashi, Suzuki and Inui 2021,
EMNLP, "SHAPE: Shifted Absolute Position Embedding for Transformers", arXiv 2109.05644,
Figure 1c and the section that defines SHAPE).

``x_i + PE(i + k)``: the sinusoidal input embedding of ``sinusoidal`` (Vaswani et al. 2017,
section 3.5, in fairseq's form; ``input.py``) read at every position shifted by an offset
``k`` drawn per sequence in training, ``k ~ U{0, .., K}`` (uniform over the integers), and
``k = 0`` in evaluation (validation, ``fairseq-generate``), where ``shape`` is exactly
``sinusoidal``. A model that must translate whatever the offset learns to use the
differences of positions only (shift invariance), with stock self-attention and no
parameter. ``K`` is ``--shape-max-shift`` (default 500, the authors' WMT configuration,
``config_shape/pe_transformer_base_wmt16_pe_500.yaml``).

The offset is drawn per sequence, independently in the encoder and the decoder, as in the
authors' code (butsugiri/shape, an OpenNMT-py fork: ``onmt/modules/embeddings.py``, where
each stack's ``PositionalEncoding`` draws its own offsets, one per sequence of the batch).
Each stack draws once per training forward into its
:class:`~fairseq_posenc.core.context.PositionContext` (``positions``), which its input embedding
reads (:class:`~fairseq_posenc.plugin.input_positions.InputPositions`); a left-padded sequence
gets the positions of the same sequence alone, shifted by its own ``k``.

Deviations:

* fairseq's sinusoid (``input.py``): sines and cosines concatenated, frequencies
  ``10000^(-i/(h-1))``, and the first real token at row ``padding_idx + 1`` (2 with the
  default dictionary), so token ``t`` reads ``PE(padding_idx + 1 + t + k)``; the authors'
  OpenNMT sinusoid interleaves sines and cosines and counts from 0;
* the authors' code draws ``k`` from ``{0, .., K - 1}`` (``torch.randint``'s exclusive
  bound) and, at inference, reads every position shifted by ``K``; here ``k`` is uniform over
  ``{0, .., K}`` and inference is unshifted, as the paper's recipe (no shift at inference).
  Both are shifts by a constant, which the trained model is meant to ignore.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Callable, Optional

import torch
from torch import Tensor

from ..positions import real_positions
from .kinds import InputEmbedding
from .options import Option
from .registry import register_encoding


@dataclass(frozen=True)
class ShiftedPositions:
    """The draw of one training forward: ``0..n-1`` (counting real tokens) plus one offset
    per sequence, ``k ~ U{0, .., max_shift}``: ``(B, T)`` from the ``(B, T)`` padding mask
    (True at padding), padding 0."""

    max_shift: int

    def __call__(self, padding_mask: Tensor,
                 generator: Optional[torch.Generator] = None) -> Tensor:
        batch, length = padding_mask.shape
        device = padding_mask.device
        shift = torch.randint(0, self.max_shift + 1, (batch, 1), device=device,
                              generator=generator)
        return (real_positions(padding_mask, length, device) + shift).masked_fill(
            padding_mask, 0)


@register_encoding
class Shape(InputEmbedding):
    name = "shape"
    fairseq_flags = (False, False)  # fairseq's sinusoidal table, read at shifted positions

    def __init__(self, *, shape_max_shift: Annotated[int, Option(
            "in training each sequence's positions are shifted by k, uniform in 0..K "
            "(default 500, SHAPE's WMT setting); no shift in evaluation", minimum=1,
            metavar="K", hint="SHAPE uses K = 500 for WMT; K = 0 is --pos-encoding "
            "sinusoidal.")] = 500) -> None:
        super().__init__()
        self.max_shift = shape_max_shift

    @classmethod
    def position_draw(cls, values, random_positions: Optional[int]
                      ) -> Optional[Callable[[Tensor], Tensor]]:
        return ShiftedPositions(values["shape_max_shift"])

    @classmethod
    def random_positions_refusal(cls, values) -> Optional[str]:
        return ("SHAPE shifts the positions 0..n-1 itself, and --random-positions draws them "
                "instead; use --pos-encoding sinusoidal --random-positions L")
