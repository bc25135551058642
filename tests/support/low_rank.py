"""The ``LOW_RANK`` terms' kernel choice (``"bias"`` or ``"concat"``) and the layers that
have one to choose."""

from __future__ import annotations

import torch

from fairseq_posenc.plugin.attention import PositionalMultiheadAttention

#: (encoding, flags, causal) of every layer with a low-rank term.
CASES = [
    ("diet_abs", {}, False),
    ("diet_abs", {}, True),
    ("diet_abs", {"diet_abs_sharing": "head", "diet_abs_rank": 3}, False),
    ("diet_abs", {"diet_abs_symmetric": True}, True),
    ("tupe_a", {}, False),
    ("tupe_a", {}, True),
    ("tupe_r", {}, False),
    ("tupe_r", {}, True),
    ("alibi", {}, True),
]


def set_kernel(module: torch.nn.Module, kernel: str) -> None:
    for m in module.modules():
        if isinstance(m, PositionalMultiheadAttention):
            m.low_rank_kernel = kernel
