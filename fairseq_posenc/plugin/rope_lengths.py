"""The length bound of each sentence that ``--rope-scaling dynamic`` reads (dynamic NTK:
:mod:`fairseq_posenc.core.rope_scaling`), per stack and per sentence, fixed for a whole
sequence so that a decoding step reads the frequencies of the full forward.

* The encoder: the sentence's real tokens (its ``</s>`` included, its padding not): all
  of them are read at once, so the bound is the length itself.
* The decoder: the longest output the generator allows the sentence, as fairseq's
  ``SequenceGenerator`` computes it, ``max_len = min(int(max_len_a * n_src + max_len_b),
  max_len - 1)`` (``--max-len-a``, ``--max-len-b``, ``--max-len``, whose default is the
  model's ``--max-target-positions``; ``--match-source-len``: ``n_src``), with the
  sentence's own real source tokens ``n_src`` where the generator takes the batch's padded
  width: a sentence's bound does not depend on its batch. The decoder then reads positions
  ``0 .. max_len`` (the leading ``</s>`` and up to ``max_len`` tokens; the generator forces
  ``</s>`` at the last), so its bound is ``max_len + 1``, in the unit of the training length
  (tokens with ``</s>``). fairseq's defaults, ``--max-len-a 0 --max-len-b 200``, bound every
  sentence by 200 tokens and ``</s>`` (201): dynamic NTK rescales the decoder of every
  model trained on shorter sentences.

The plugin's tasks give the generator's settings to each model's decoder when they build
the generator (:func:`set_decode_bound`); a forward without one (teacher forcing, scoring)
uses fairseq's defaults, so the full forward equals incremental decoding under the same
settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from ..core.rope_scaling_registry import ROPE_SCALINGS


@dataclass(frozen=True)
class DecodeBound:
    """The generator's length settings (fairseq's defaults); ``max_len`` None: the
    decoder's ``max_positions()``."""

    max_len_a: float = 0.0
    max_len_b: int = 200
    max_len: Optional[int] = None
    match_source_len: bool = False


def reads_lengths(args: Any) -> bool:
    """Whether a model configuration's scaling (the plugin's tasks set it) reads each
    sequence's length bound (a ``per_sequence`` one: dynamic NTK)."""
    spec = ROPE_SCALINGS.get(str(getattr(args, "rope_scaling", None)))
    return spec is not None and spec.per_sequence


def source_lengths(args: Any, src_tokens: Tensor, padding_idx: int) -> Optional[Tensor]:
    """``(B,)`` the encoder's bounds: each sentence's real tokens; None without dynamic."""
    if not reads_lengths(args):
        return None
    return src_tokens.ne(padding_idx).sum(dim=1)


def decoder_lengths(decoder: Any, encoder_out: Optional[dict]) -> Optional[Tensor]:
    """``(B,)`` the decoder's bounds (module docstring) for the rows of ``encoder_out``
    (reordered by beam search as the decoder's rows are); None without dynamic or without
    an encoder's output."""
    if not reads_lengths(decoder.args) or not encoder_out or not encoder_out.get("src_lengths"):
        return None
    n_src = encoder_out["src_lengths"][0].reshape(-1).to(torch.float64)
    bound: DecodeBound = getattr(decoder, "rope_decode_bound", DecodeBound())
    if bound.match_source_len:
        max_len = n_src
    else:
        limit = bound.max_len or decoder.max_positions()
        max_len = (bound.max_len_a * n_src + bound.max_len_b).trunc().clamp(max=limit - 1)
    return max_len.long() + 1


def set_decode_bound(models: list, generator: Any) -> None:
    """Give ``generator``'s length settings to the decoders of ``models`` that read them."""
    bound = DecodeBound(float(getattr(generator, "max_len_a", 0.0)),
                        int(getattr(generator, "max_len_b", 200)),
                        getattr(generator, "max_len", None) or None,
                        bool(getattr(generator, "match_source_len", False)))
    for model in models:
        decoder = getattr(model, "decoder", None)
        if decoder is not None and reads_lengths(getattr(decoder, "args", None)):
            decoder.rope_decode_bound = bound
