"""``shaw``: relative position representations on keys and values (Shaw et al. 2018).

Shaw et al. 2018, eqs. (3)-(5), with tensor2tensor's ``dot_product_attention_relative``:
``e_ij = q_i.(k_j + aK[c]) / sqrt(d_h)``, ``z_i = sum_j p_ij (v_j + aV[c])``,
``c = clip(j - i, -k, k)``. Separate key and value tables ``(2k+1) x d_h``, one pair per
layer, shared by all heads; ``--shaw-clip`` is ``k`` (default 16); ``--shaw-no-value``
drops the value term (Yang et al. 2019's simplification; then the fused attention path is
used).

No ``len x len x d_h`` tensor is built: the key term is ``q @ aK^T`` (``len x (2k+1)``)
gathered by clipped distance, and the value term sums the probabilities per clipped
distance (``len x (2k+1)``) and multiplies by ``aV``. Both sums by clipped distance (the
value term's, and the key term's gradient) are, on CUDA, a gather and two masked sums, not
a ``scatter_add`` (:func:`~fairseq_posenc.core.positions.sum_by_clipped_distance`). On CUDA in
half precision the same happens inside the fused distance kernel
(:meth:`clipped_tables`, the ``CLIPPED`` kernel family), with no ``len x len`` tensor at all.

Deviations: the causal decoder sees only ``c <= 0``, so its tables have the ``k + 1`` rows
it can use (tensor2tensor allocates ``2k+1`` there and never trains the other ``k``).
Tables start Xavier-uniform (tensor2tensor's default ``uniform_unit_scaling``, fan-avg).
"""

from __future__ import annotations

from typing import Annotated, Optional

import torch
from torch import Tensor, nn

from ..context import FusedKernel, KernelFamily, PositionContext, Window
from ..positions import clipped_index, read_by_clipped_distance, sum_by_clipped_distance
from .kinds import ContentBias, ContentOnProbabilities
from .options import Option
from .distance_rows import clipped_distance_index
from .registry import register_encoding


@register_encoding
class Shaw(ContentOnProbabilities):
    name = "shaw"
    fused_families = frozenset({KernelFamily.CLIPPED})

    def __init__(
        self, *, head_dim: int, causal: bool,
        shaw_clip: Annotated[int, Option(
            "clip relative distances to [-K, K] (default 16)", minimum=1, metavar="K",
            hint="Shaw et al. report flat BLEU for k >= 2 and use k = 16.")] = 16,
        shaw_no_value: Annotated[bool, Option(
            "no relative term on the values (keys only)")] = False,
    ) -> None:
        super().__init__()
        clip, values = shaw_clip, not shaw_no_value
        self.r_lo, self.r_hi = -clip, (0 if causal else clip)
        rows = self.r_hi - self.r_lo + 1
        self.rel_key = nn.Parameter(torch.empty(rows, head_dim))
        nn.init.xavier_uniform_(self.rel_key)
        self.rel_value: Optional[nn.Parameter] = None
        if values:
            self.rel_value = nn.Parameter(torch.empty(rows, head_dim))
            nn.init.xavier_uniform_(self.rel_value)
        # Keys only (--shaw-no-value): a bias that reads q, and no term on the output.
        self.applies_as = ContentOnProbabilities if values else ContentBias
        self.fused_kernel = FusedKernel(KernelFamily.CLIPPED, clipped_rows=rows)

    def _index(self, q_len: int, k_len: int, q_offset: int, ctx: PositionContext) -> Tensor:
        return clipped_distance_index(q_len, k_len, q_offset, self.r_lo, self.r_hi, ctx,
                                      self.rel_key.device)

    def clipped_tables(self, q: Tensor) -> tuple[Tensor, Optional[Tensor], int]:
        value = None if self.rel_value is None else self.rel_value.to(q.dtype)
        return torch.matmul(q, self.rel_key.to(q.dtype).t()), value, self.r_lo

    def rows_by_key(self, q_offset: int, k_len: int, dtype: torch.dtype,
                    ctx: PositionContext) -> tuple[Tensor, Optional[Tensor]]:
        """``aK[c]`` and ``aV[c]`` for each key ``j``, ``c = clip(j - q_offset)``, as
        ``(k_len, d_h)`` in ``dtype``. Content-free, so a slice of one window by distance
        kept in the context (for the whole decoded sequence): a step multiplies by the
        rows and gathers nothing (beam search is bound by kernel launches)."""
        def compute(lo: int, hi: int) -> Window:
            r = torch.arange(lo, hi + 1, device=self.rel_key.device)
            index = clipped_index(r, self.r_lo, self.r_hi)
            tables = [self.rel_key] if self.rel_value is None else [self.rel_key,
                                                                    self.rel_value]
            return Window(torch.stack(tables)[:, index].to(dtype), lo, hi, dim=1)

        lo, hi = -q_offset, k_len - 1 - q_offset
        rows = ctx.window(self, f"rows by key {dtype}", lo, hi, compute).rows(lo, hi)
        return rows[0], (rows[1] if rows.size(0) > 1 else None)

    def logit_bias(self, q: Tensor, k: Tensor, q_offset: int, ctx: PositionContext) -> Tensor:
        k_len = k.size(-2)
        if q.size(-2) == 1:
            key_rows, _ = self.rows_by_key(q_offset, k_len, q.dtype, ctx)
            return torch.matmul(q, key_rows.t())
        idx = self._index(q.size(-2), k_len, q_offset, ctx)
        per_distance = torch.matmul(q, self.rel_key.to(q.dtype).t())  # B, H, q, 2k+1
        return read_by_clipped_distance(per_distance, idx, q_offset, self.r_lo, self.r_hi)

    def value_term(self, probs: Tensor, q_offset: int, ctx: PositionContext) -> Tensor:
        assert self.rel_value is not None
        q_len, k_len = probs.shape[-2:]
        if q_len == 1:
            # A decoding step: the probabilities times the value vector of each key's
            # clipped distance, one product and no sums by clipped distance
            # (docs/decisions.md, "Shaw's terms").
            _, value_rows = self.rows_by_key(q_offset, k_len, probs.dtype, ctx)
            return torch.matmul(probs, value_rows)
        idx = self._index(q_len, k_len, q_offset, ctx)
        per_distance = sum_by_clipped_distance(probs, idx, q_offset, self.r_lo, self.r_hi)
        return torch.matmul(per_distance, self.rel_value.to(probs.dtype))
