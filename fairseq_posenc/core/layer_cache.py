"""A self-attention layer's decoding state: the one owner of what beam search carries.

A layer's incremental cache is a dict in fairseq's layout, which fairseq keeps in its
incremental state and beam search reorders along the first dimension of every tensor in it:
``prev_key`` and ``prev_value`` ``(B, H, len, d_h)``, ``prev_key_padding_mask`` ``(B,
len)`` (True at padding), and for a term that reads the layer's input the state it keeps
for every cached key (:data:`~fairseq_posenc.core.encodings.gate_sums.CACHE_KEY`: FoX's cumulative
sums). Everything that differs between hypotheses lives here; the stack's
:class:`~fairseq_posenc.core.context.PositionContext` keeps only content-free values
(tables by distance or position, computed from parameters, the same for every hypothesis),
which a step may recompute and never needs reordered.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

#: A layer's incremental cache: ``prev_key``, ``prev_value``, ``prev_key_padding_mask``.
Buffer = Dict[str, Optional[Tensor]]


def cached_length(saved: Optional[Buffer]) -> int:
    """Positions already in a layer's incremental buffer (None: not decoding)."""
    prev_key = None if saved is None else saved.get("prev_key")
    return 0 if prev_key is None else prev_key.size(2)


def has_padding(saved: Optional[Buffer]) -> bool:
    """Whether the cached positions carry a padding mask."""
    return saved is not None and saved.get("prev_key_padding_mask") is not None


def extend_cache(saved: Buffer, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor],
                 ) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
    """Append this call's keys and values (and padding) to the layer's cache ``saved``, in
    place; the keys, values and padding mask of every cached position."""
    prev_key, prev_value = saved.get("prev_key"), saved.get("prev_value")
    prev_len = 0 if prev_key is None else prev_key.size(2)
    if prev_key is not None and prev_value is not None:
        k = torch.cat([prev_key, k], dim=2)
        v = torch.cat([prev_value, v], dim=2)
    key_padding_mask = _append_padding(saved.get("prev_key_padding_mask"), key_padding_mask,
                                       k.size(0), prev_len, k.size(2) - prev_len)
    saved["prev_key"], saved["prev_value"] = k, v
    saved["prev_key_padding_mask"] = key_padding_mask
    return k, v, key_padding_mask


def _append_padding(prev: Optional[Tensor], new: Optional[Tensor], batch: int,
                    prev_len: int, new_len: int) -> Optional[Tensor]:
    """The cache's padding mask after a call: ``prev`` (``(B, prev_len)``) then ``new``
    (``(B, new_len)``), False (a real token) for the side that has none."""
    if prev is None and new is None:
        return None
    device = (prev if prev is not None else new).device
    if prev is None:
        prev = torch.zeros(batch, prev_len, dtype=torch.bool, device=device)
    if new is None:
        new = torch.zeros(batch, new_len, dtype=torch.bool, device=device)
    return torch.cat([prev.to(torch.bool), new.to(torch.bool)], dim=1)
