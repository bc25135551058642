"""Position information added to the input embeddings: ``sinusoidal``, ``learned``, ``none``.

These use fairseq's own embeddings (``SinusoidalPositionalEmbedding`` and
``LearnedPositionalEmbedding``, both counting positions from the first real token, so a
left-padded source is encoded like the same source alone); self-attention stays stock.

* ``sinusoidal`` -- Vaswani et al. 2017, section 3.5: ``x_i + PE_i``. Deviation (fairseq's,
  from tensor2tensor): ``PE[p] = [sin(p w_0), .., sin(p w_{h-1}), cos(p w_0), .., cos(p w_{h-1})]``
  with ``h = d/2`` and ``w_i = 10000^(-i/(h-1))`` -- sines and cosines concatenated rather
  than interleaved, and ``h - 1`` where the paper has ``h``. Like every fairseq position
  embedding it numbers the first real token ``padding_idx + 1`` (2 with the default
  dictionary), not 0: a constant shift, which sinusoids encode as well as any other origin.
* ``learned`` -- Gehring et al. 2017 / Devlin et al. 2018: ``x_i + P_i``, ``P`` of size
  ``(max_positions + padding_idx + 1) x d`` (fairseq's rows start at ``padding_idx + 1``).
  Sequences longer than ``--max-source-positions`` / ``--max-target-positions`` have no
  embedding: the model raises a clear error.
* ``none`` -- the "Non-PE" baseline of the AT5 paper (Wu et al. 2021): no position
  information at all; the decoder keeps only its causal mask.
"""

from __future__ import annotations

from typing import Optional

from .kinds import InputEmbedding
from .registry import register_encoding


@register_encoding
class Sinusoidal(InputEmbedding):
    name = "sinusoidal"
    fairseq_flags = (False, False)


@register_encoding
class Learned(InputEmbedding):
    name = "learned"
    fairseq_flags = (False, True)

    @classmethod
    def max_length(cls, values, max_positions: int) -> Optional[int]:
        return max_positions


@register_encoding
class NoPosition(InputEmbedding):
    name = "none"
    fairseq_flags = (True, False)

    @classmethod
    def random_positions_refusal(cls, values) -> Optional[str]:
        return "the model has no positions to draw"
