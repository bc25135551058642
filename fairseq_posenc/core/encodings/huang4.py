"""``huang4``: query and key both interact with a relative vector (Huang et al. 2020,
method 4, eq. 16).

``e_ij = (q_i.k_j + q_i.a_{j-i} + k_j.a_{j-i}) / sqrt(d_h)`` with a vector ``a_r`` of size
``d_h`` per head, layer and distance: ``(2n - 1) x d_h`` per head and layer (causal decoder:
``n``), ``--huang4-clip K`` optionally clipping ``j - i`` to ``[-K, K]``. Like Shaw's key term,
both products are ``len x (2n-1)`` matrices gathered by distance: no ``len x len x d_h``
tensor, and only the ``2 len - 1`` distances in use take part; where the fused distance
kernel runs (CUDA, half precision, no clip shorter than the sentence) it reads both
products by distance itself (:meth:`distance_rows`), with no ``len x len`` tensor either.
Tables start as N(0, 0.02) (BERT's initializer range; the paper's code is BERT).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..context import FusedKernel, KernelFamily, PositionContext, Window
from ..positions import distance_range
from .base import init_scalar_table
from .huang1 import Clip, huang_clip
from .kinds import ContentBias
from .distance_rows import DistanceRows, clipped_distance_index
from .registry import register_encoding


@register_encoding
class Huang4(ContentBias):
    name = "huang4"
    fused_kernel = FusedKernel(KernelFamily.ROWS)
    fused_families = frozenset({KernelFamily.ROWS})

    def __init__(self, *, num_heads: int, head_dim: int, causal: bool, max_positions: int,
                 huang4_clip: Clip = None) -> None:
        super().__init__()
        clip = huang_clip(huang4_clip, max_positions)
        self.causal = causal
        self.r_lo, self.r_hi = -clip, (0 if causal else clip)
        self.rel_emb = nn.Parameter(torch.empty(num_heads, self.r_hi - self.r_lo + 1, head_dim))
        init_scalar_table(self.rel_emb)

    def _table(self, q: Tensor, lo: int, hi: int) -> Tensor:
        """The vectors of distances ``lo..hi`` as ``(H, d_h, R)``."""
        return self.rel_emb[:, lo - self.r_lo:hi - self.r_lo + 1].to(q.dtype).transpose(-1, -2)

    def _unmasked(self, q_len: int, k_len: int, q_offset: int) -> tuple[int, int]:
        """Range of ``r = j - i`` this attention has, less the causally masked ones."""
        r_min, r_max = distance_range(q_len, k_len, q_offset)
        return r_min, (min(r_max, 0) if self.causal else r_max)

    def rows_cover(self, q_len: int, k_len: int, q_offset: int) -> bool:
        """No clip shorter than the sentence."""
        r_min, r_max = self._unmasked(q_len, k_len, q_offset)
        return self.r_lo <= r_min and r_max <= self.r_hi

    def distance_rows(self, q: Tensor, k: Tensor, q_offset: int,
                      ctx: PositionContext) -> DistanceRows:
        """``q_i.a_{j-i} + k_j.(a_{j-i} / sqrt(d_h))``."""
        r_min, r_max = self._unmasked(q.size(-2), k.size(-2), q_offset)
        return DistanceRows(q, (q, self._table(q, r_min, r_max)),
                            (k, self._key_table(q, r_min, r_max, ctx)), r_min)

    def _key_table(self, q: Tensor, lo: int, hi: int, ctx: PositionContext) -> Tensor:
        """``a_r / sqrt(d_h)`` for ``r`` in ``lo..hi``, ``(H, d_h, R)``: the key term's
        scale on the table (``H x d_h x R``) rather than on the keys (``B x H x len x
        d_h``, a pass over them in every forward); kept per forward (and decoded
        sequence)."""
        def compute(grown_lo: int, grown_hi: int) -> Window:
            grown_lo, grown_hi = max(grown_lo, self.r_lo), min(grown_hi, self.r_hi)
            table = self._table(q, grown_lo, grown_hi) / math.sqrt(self.rel_emb.size(-1))
            return Window(table, grown_lo, grown_hi)

        return ctx.window(self, f"key table {q.dtype}", lo, hi, compute).rows(lo, hi)

    def logit_bias(self, q: Tensor, k: Tensor, q_offset: int, ctx: PositionContext) -> Tensor:
        q_len, k_len = q.size(-2), k.size(-2)
        # Only the distances this attention has: the table may hold 2n-1 >> 2 len rows.
        r_min, r_max = ctx.distance_range(q_len, k_len, q_offset)
        lo, hi = max(self.r_lo, r_min), min(self.r_hi, r_max)
        idx = clipped_distance_index(q_len, k_len, q_offset, lo, hi, ctx, q.device)
        table = self._table(q, lo, hi)  # H, d_h, R
        q_term = torch.matmul(q, table)  # B, H, q_len, R  (q is already scaled)
        k_term = torch.matmul(k, self._key_table(q, lo, hi, ctx))  # B, H, k_len, R
        shape = (*q.shape[:-2], q_len, k_len)
        from_q = q_term.gather(-1, idx.expand(shape))  # [b,h,i,j] = q_term[b,h,i,idx[i,j]]
        from_k = k_term.transpose(-1, -2).gather(-2, idx.expand(shape))  # k_term[b,h,j,idx[i,j]]
        return from_q + from_k
