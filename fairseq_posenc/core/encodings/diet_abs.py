"""``diet_abs``: decoupled absolute positional attention (DIET-ABS = ABS-SCALAR).

Chen et al. 2021b (DIET), eq. (1): ``e_ij = q_i.k_j / sqrt(d_h) + (P_Q P_K^T)_ij`` per head,
``P_Q, P_K: n x d_p`` with rank ``d_p`` = ``--diet-abs-rank`` (default ``d_h``, the paper's
default) and ``n`` = ``--diet-abs-max-len`` (default the stack's max positions). The
position term is not scaled. ``--diet-abs-symmetric`` ties ``P_K = P_Q`` (Chen et al.
2021a's ABS-SCALAR, ``P P^T``).

Sharing (``--diet-abs-sharing``, DIET section 5): ``layer`` (default, the paper's choice for
DIET-ABS: one set of per-head tables for all layers), ``none``, or ``head`` (one table per layer
for all heads). The term is low-rank (``LOW_RANK``): the attention either adds ``P_Q P_K^T``, a
content-free ``H x n x n`` matrix computed once per forward for the positions in use (once for
all layers when shared; while decoding, for a window that grows geometrically, so each step
gathers from it), or, in a fused kernel, attends with ``[q_i, P_Q[i]] . [k_j, P_K[j]]``, which
is the same number without any ``len x len`` tensor.

Positions count real tokens (``i``-th real token = position ``i``), so a left-padded source
is encoded exactly like the same source alone. A sequence longer than ``n`` is an error.
The per-head segment term ``E_S`` of eq. (1) is a separate option (segment attention).
Tables start as N(0, 0.02) (BERT's initializer range).
"""

from __future__ import annotations

from typing import Annotated, Optional

import torch
from torch import Tensor, nn

from ..context import FusedKernel, KernelFamily, PositionContext
from .base import init_scalar_table
from .kinds import LowRank
from .options import MAX_LEN_HELP, Option, Sharing
from .registry import register_encoding


#: The rank of ``P_Q, P_K`` (``diet_abs_rank``, ``diet_abs_lin_rank``).
Rank = Annotated[Optional[int], Option("rank d_p of P_Q, P_K (default: head dimension)",
                                       minimum=1, metavar="D")]


@register_encoding
class DietAbs(LowRank):
    name = "diet_abs"
    fused_kernel = FusedKernel(KernelFamily.EXTRA_DIMENSIONS)
    max_len_option = "diet_abs_max_len"

    def __init__(
        self, *, num_heads: int, head_dim: int, max_positions: int,
        diet_abs_rank: Rank = None,
        diet_abs_max_len: Annotated[Optional[int], Option(MAX_LEN_HELP.format(
            "positions in the tables; longer inputs are an error"), minimum=1,
            metavar="N")] = None,
        diet_abs_sharing: Annotated[Sharing, Option(
            "share tables across layers (default, as the DIET paper recommends), heads, or "
            "none")] = "layer",
        diet_abs_symmetric: Annotated[bool, Option(
            "P_K = P_Q (ABS-SCALAR of Chen et al. 2021a)")] = False,
    ) -> None:
        super().__init__()
        num_heads = 1 if diet_abs_sharing == "head" else num_heads
        self.max_len = max_len = diet_abs_max_len or max_positions
        rank, symmetric = diet_abs_rank or head_dim, diet_abs_symmetric
        self.p_q = nn.Parameter(torch.empty(num_heads, max_len, rank))
        init_scalar_table(self.p_q)
        self.p_k: Optional[nn.Parameter] = None
        if not symmetric:
            self.p_k = nn.Parameter(torch.empty(num_heads, max_len, rank))
            init_scalar_table(self.p_k)

    @classmethod
    def shares_layers(cls, values) -> bool:
        return values["diet_abs_sharing"] == "layer"

    def factors(self, length: int, ctx: PositionContext) -> tuple[Tensor, Tensor]:
        p_q = self.p_q[:, :length]
        return p_q, (p_q if self.p_k is None else self.p_k[:, :length])
