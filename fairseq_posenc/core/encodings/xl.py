"""``xl``: Transformer-XL / XLNet relative attention (Dai et al. 2019, section 3.3, the
equation for ``A^rel_{i,j}``; Yang et al. 2019; as written in Chen et al. 2021a, section
2.2.2, and Huang et al. 2020, eq. 10). Chen et al. write ``W_K`` where Dai et al. and Huang et
al. have a separate ``W_R``; we follow the latter.

``e_ij = (q_i.k_j + q_i.W_R R_{i-j} + u.k_j + v.W_R R_{i-j}) / sqrt(d_h)`` per head, with

* ``R_s`` the Transformer-XL sinusoid of the distance ``s = i - j`` in the model dimension
  ``d``: ``[sin(s w_0) .. sin(s w_{d/2-1}), cos(s w_0) .. cos(s w_{d/2-1})]``,
  ``w_k = 10000^(-2k/d)`` (``PositionalEmbedding`` of the authors' PyTorch code; the TF code
  is the same), no parameters;
* ``W_R`` a ``d x d`` projection without bias (their ``r_net``), one per layer, reshaped to
  heads;
* ``u``, ``v`` (their ``r_w_bias``, ``r_r_bias``): a ``d_h`` vector per head. By default one
  pair per stack shared by all its layers, as in Transformer-XL (PyTorch: one parameter for
  the model; TF: ``untie_r=False``); ``--xl-untie-r`` gives every layer its own pair
  (XLNet's ``untie_r``, used for its pretraining).

The encoder uses both signs of ``i - j`` (XLNet's bidirectional ``relative_positional_
encoding``); the causal decoder only ``i - j >= 0``. ``--xl-clamp-len K`` clips ``|i - j|``
at ``K`` (the authors' ``clamp_len``; default: no clip, as theirs).

Acts through ``logit_bias`` (``q`` arrives scaled by ``1/sqrt(d_h)``, so the position term
``(q_i + v).W_R R`` is ``(q + v/sqrt(d_h)) @ (W_R R)^T``, as the authors add ``r_r_bias`` to
the query): a ``len x distances`` product gathered by distance, never ``len x len x d_h``;
``u.k_j / sqrt(d_h)`` is one scalar per key, broadcast over queries. ``W_R R`` is
content-free: computed once per layer and forward over the distances in use and, while
decoding, over a window grown with ``ctx.ahead`` so that each step slices it. Where the
fused distance kernel runs (CUDA, half precision, no clip shorter than the sentence), the
same sum is :meth:`distance_rows`: ``(q_i + u).k_j + (q_i + v).(W_R R)[j - i]``, the
``len x distances`` product read by distance inside the kernel, no ``len x len`` tensor.

Deviations: no segment-level recurrence / memory (a sentence-level translation model has
no previous segment to cache); no dropout on ``R`` (the authors drop the sinusoid with the
embedding dropout); fairseq's query projection has a bias, which adds ``b_Q`` to both ``u``
and ``v`` (the authors' ``qkv_net`` has none), so ``u``, ``v`` and ``b_Q`` have one redundant
vector between them. Initialisation N(0, 0.02) for ``u``, ``v`` and ``W_R``, the authors'
default (``init_std``).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Mapping, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..context import FusedKernel, KernelFamily, PositionContext, Window
from ..positions import distance_range
from .base import PositionEncoding, init_scalar_table, layers_with_encoding
from .kinds import ContentBias
from .options import Option
from .distance_rows import DistanceRows, clipped_distance_index
from .registry import register_encoding


def xl_sinusoid(distances: Tensor, dim: int) -> Tensor:
    """Transformer-XL's ``R_s`` for each ``s`` in ``distances``: ``(len, dim)``, sines then
    cosines, frequencies ``10000^(-2k/dim)``; computed in float64."""
    inv_freq = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64,
                                         device=distances.device) / dim)
    angles = distances.to(torch.float64)[:, None] * inv_freq
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class XLQueryBiases(nn.Module):
    """``u`` (content) and ``v`` (position) query biases, ``(heads, d_h)`` each; a module of
    its own so that the layers of a stack can share one."""

    def __init__(self, num_heads: int, head_dim: int) -> None:
        super().__init__()
        self.u = nn.Parameter(torch.empty(num_heads, head_dim))
        self.v = nn.Parameter(torch.empty(num_heads, head_dim))
        init_scalar_table(self.u)
        init_scalar_table(self.v)


@register_encoding
class TransformerXL(ContentBias):
    name = "xl"
    fused_kernel = FusedKernel(KernelFamily.ROWS)
    fused_families = frozenset({KernelFamily.ROWS})

    def __init__(
        self, *, num_heads: int, head_dim: int, causal: bool,
        xl_untie_r: Annotated[bool, Option(
            "one pair of query biases u, v per layer (XLNet's untie_r; default: one pair per "
            "stack, as Transformer-XL)")] = False,
        xl_clamp_len: Annotated[Optional[int], Option(
            "clip relative distances to [-K, K] (Transformer-XL's clamp_len; default: no "
            "clip)", minimum=1, metavar="K")] = None,
        biases: Optional[XLQueryBiases] = None,
    ) -> None:
        """``biases``: the stack's shared ``u``, ``v`` (:meth:`build_stack`), else a pair
        of this layer's own."""
        super().__init__()
        clamp = xl_clamp_len
        dim = num_heads * head_dim
        if dim % 2:
            raise ValueError(f"--pos-encoding xl needs an even model dimension, got {dim}")
        self.num_heads, self.head_dim, self.causal, self.clamp = num_heads, head_dim, causal, clamp
        self.r_proj = nn.Parameter(torch.empty(dim, dim))  # W_R, as nn.Linear's (out, in)
        init_scalar_table(self.r_proj)
        self.biases = biases if biases is not None else XLQueryBiases(num_heads, head_dim)

    @classmethod
    def build_stack(cls, values: Mapping[str, Any], num_layers: int,
                    pos_layers: Optional[str] = None,
                    **structural: Any) -> list[Optional[PositionEncoding]]:
        """W_R per layer; u, v shared by the stack's layers unless ``xl_untie_r``."""
        used = layers_with_encoding(pos_layers, cls, num_layers)
        shared = None if values["xl_untie_r"] else XLQueryBiases(structural["num_heads"],
                                                                 structural["head_dim"])
        return [cls.build({**values, "biases": shared}, **structural) if used_here else None
                for used_here in used]

    def _unmasked(self, q_len: int, k_len: int, q_offset: int,
                  ctx: Optional[PositionContext] = None) -> tuple[int, int]:
        """Range of ``r = j - i`` this attention has, less the causally masked ones (with
        ``ctx``: between its chosen positions, if any)."""
        r_lo, r_hi = (distance_range(q_len, k_len, q_offset) if ctx is None
                      else ctx.distance_range(q_len, k_len, q_offset))
        return r_lo, (min(r_hi, 0) if self.causal else r_hi)

    def _distances(self, q_len: int, k_len: int, q_offset: int,
                   ctx: Optional[PositionContext] = None) -> tuple[int, int]:
        """Range of ``r = j - i`` whose table rows this attention reads (clipped; later
        keys of a causal attention read row ``r = 0``, masked)."""
        r_lo, r_hi = self._unmasked(q_len, k_len, q_offset, ctx)
        if self.clamp is not None:
            r_lo, r_hi = max(r_lo, -self.clamp), min(r_hi, self.clamp)
        return r_lo, r_hi

    def _projected(self, r_lo: int, r_hi: int, dtype: torch.dtype,
                   ctx: PositionContext) -> Window:
        """``(W_R R_{-r})`` per head for (at least) ``r`` in ``[r_lo, r_hi]``, as
        ``(H, d_h, distances)`` in ``dtype``; cached per layer."""
        def compute(lo: int, hi: int) -> Window:
            if self.clamp is not None:
                lo, hi = max(lo, -self.clamp), min(hi, self.clamp)
            r = torch.arange(lo, hi + 1, device=self.r_proj.device)
            sinusoid = xl_sinusoid(-r, self.r_proj.size(0)).to(self.r_proj.dtype)  # R_{i-j}
            table = F.linear(sinusoid, self.r_proj).view(len(r), self.num_heads, self.head_dim)
            return Window(table.permute(1, 2, 0).to(dtype), lo, hi)

        return ctx.window(self, f"projected {dtype}", r_lo, r_hi, compute)

    def _table_and_biases(self, q: Tensor, r_lo: int, r_hi: int,
                          ctx: PositionContext) -> tuple[Tensor, Tensor, Tensor]:
        """``W_R R`` as ``(H, d_h, R)`` and ``u``, ``v`` as ``(H, 1, d_h)``, scaled: once
        per forward (per decoded sequence) for the layers that share them, not in every
        layer and decoding step."""
        table = self._projected(r_lo, r_hi, q.dtype, ctx).rows(r_lo, r_hi)

        def scaled() -> tuple[Tensor, Tensor]:
            scale = 1.0 / math.sqrt(self.head_dim)
            u, v = (b.to(q.dtype)[:, None, :] * scale for b in (self.biases.u, self.biases.v))
            return u, v

        u, v = ctx.latest(self.biases, "scaled", q.dtype, scaled)
        return table, u, v

    def rows_cover(self, q_len: int, k_len: int, q_offset: int) -> bool:
        """No ``--xl-clamp-len`` shorter than the sentence."""
        return self._distances(q_len, k_len, q_offset) == self._unmasked(q_len, k_len, q_offset)

    def distance_rows(self, q: Tensor, k: Tensor, q_offset: int,
                      ctx: PositionContext) -> DistanceRows:
        """``(q_i + u).k_j + (q_i + v).(W_R R)[j - i]``: the content bias ``u.k_j`` joins
        the queries of ``q.k``."""
        r_lo, r_hi = self._distances(q.size(-2), k.size(-2), q_offset)
        table, u, v = self._table_and_biases(q, r_lo, r_hi, ctx)
        return DistanceRows(q + u, (q + v, table), None, r_lo)

    def logit_bias(self, q: Tensor, k: Tensor, q_offset: int, ctx: PositionContext) -> Tensor:
        q_len, k_len = q.size(-2), k.size(-2)
        r_lo, r_hi = self._distances(q_len, k_len, q_offset, ctx)
        table, u, v = self._table_and_biases(q, r_lo, r_hi, ctx)  # H, d_h, R
        per_distance = torch.matmul(q + v, table)  # B, H, q_len, distances
        idx = clipped_distance_index(q_len, k_len, q_offset, r_lo, r_hi, ctx, q.device)
        position = per_distance.gather(-1, idx.expand(*q.shape[:-1], k_len))
        content_bias = torch.matmul(k, u.transpose(-1, -2)).transpose(-1, -2)  # B, H, 1, k_len
        return position + content_bias
