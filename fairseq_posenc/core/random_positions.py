"""``--random-positions L``: randomized positions (Ruoss et al. 2023, ACL, "Randomized
Positional Encodings Boost Length Generalization of Transformers", arXiv 2305.16843,
section 3 and Figure 1).

In training, a sequence of ``n`` tokens gets the positions

    I = sort(S),   S a subset of {0, .., L - 1} of size n drawn uniformly (without replacement),

token ``t`` (counting real tokens) at ``I_t``, and the encoding reads them in place of
``0..n-1``: an absolute encoding its table (or sinusoid) at ``I_t``, a relative one the
differences ``I_j - I_i``. ``L`` is larger than any test length, so that every position and
distance a long test sentence has was seen in training. In evaluation (``model.eval()``:
validation, ``fairseq-generate``) the positions are ``0..n-1``.

Where it applies: the input encodings ``sinusoidal`` and ``learned`` (``L`` must fit the
learned table: ``--max-source/target-positions``), and every attention-level encoding whose
terms read positions or their differences: the biases and factors by distance (``t5``,
``t5_nob``, ``diet_rel``, ``at5``, ``at5_nob``, ``alibi``, ``huang1``, ``huang2``), the
terms that read queries or keys by distance (``shaw``, ``xl``, ``huang3``, ``huang4``), the
rotation (``rope``) and the absolute low-rank terms (``diet_abs``, ``tupe_a``, ``tupe_r``,
``L`` within their tables). Not to ``none`` (no positions), ``shape`` (which shifts
``0..n-1`` itself), ``diet_abs_lin`` (its keys are a projection along the sequence) and
``tupe_a``/``tupe_r`` with ``--tupe-reset-first`` (it unties position 0): an error that
says so (:meth:`~fairseq_posenc.core.encodings.base.PositionEncoding.random_positions_refusal`).
Segment attention reads no positions and is unchanged.

The mechanism is in one place: each stack draws the positions once per training forward
(:class:`RandomPositions`) into its :class:`~fairseq_posenc.core.context.PositionContext`
(``positions``), which every term of every layer reads
(``docs/architecture.md``, "Positions chosen per sequence").

Deviations from the authors' code (google-deepmind/randomized_positional_encodings):

* one draw per sequence, read by every layer of the stack; the authors draw one set per
  batch, shared by its sequences, and their relative variants draw again in each layer.
  The paper assigns the ordered subset "to each training example" (Figure 1), and a
  sentence has one set of positions, as with an input encoding;
* the encoder and the decoder each draw their own: source and target are different
  sequences (the paper's models have an encoder only);
* evaluation uses ``0..n-1``; the authors' code draws at evaluation too. A decoder that
  generates one token at a time does not know ``n`` before its last step, so it cannot
  draw a sorted subset of size ``n``; ``0..n-1`` also keeps beam search deterministic and
  incremental decoding equal to the full forward;
* their relative-attention variant (Transformer-XL's) draws the distances to one side and
  mirrors them; here every relative encoding reads the differences of the drawn positions;
* positions count from 0 (the code's ``[0, L)``); fairseq's input embeddings put position
  ``p`` at their row ``padding_idx + 1 + p``, as without the option.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .positions import real_positions

FLAG = "--random-positions"


@dataclass(frozen=True)
class RandomPositions:
    """The draw of one training forward: ``(B, T)`` positions from the ``(B, T)`` padding
    mask of the stack's input (True at padding)."""

    span: int

    def __call__(self, padding_mask: Tensor) -> Tensor:
        return draw_positions(padding_mask, self.span)


def draw_positions(padding_mask: Tensor, span: int,
                   generator: Optional[torch.Generator] = None) -> Tensor:
    """For every row with ``n`` real tokens, ``n`` distinct positions drawn uniformly from
    ``[0, span)`` (every subset of size ``n`` equally likely: the first ``n`` entries of a
    uniformly random permutation), sorted and given to its real tokens in order: ``(B, T)``
    long, padding 0. A row longer than ``span`` is an error."""
    batch, length = padding_mask.shape
    real = (~padding_mask).sum(1)
    longest = int(real.max()) if batch else 0
    if longest > span:
        raise ValueError(
            f"a training sequence has {longest} tokens, but {FLAG} {span} draws positions "
            f"from only {span}: give {FLAG} at least the longest training sequence (and "
            "more than the longest test sentence), or skip long inputs (--max-tokens, "
            "--max-source-positions / --max-target-positions)")
    device = padding_mask.device
    permutation = torch.rand(batch, span, device=device, generator=generator).argsort(1)
    kept = torch.arange(span, device=device)[None, :] < real[:, None]
    drawn = permutation.masked_fill(~kept, span).sort(1).values[:, :length]
    index = real_positions(padding_mask, length, device).expand(batch, length)
    return drawn.gather(1, index).masked_fill(padding_mask, 0)
