"""Terms read by relative distance from vectors per distance: the products of the ``ROWS``
family (:class:`DistanceRows`: Transformer-XL, Huang et al.'s method 4) and the row of a
clipped distance (:func:`clipped_distance_index`: Shaw, Huang et al.'s methods 3-4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from ..context import PositionContext
from ..positions import clipped_index, relative_positions


@dataclass(frozen=True)
class DistanceRows:
    """A ``CONTENT_BIAS`` as products read by distance (:meth:`PositionEncoding.
    distance_rows`): the logits are ``q_content_i.k_j + x_q[i].A_q[:, j - i - r_lo] +
    x_k[j].A_k[:, j - i - r_lo]``, ``x`` ``(B, H, len, d)``, ``A`` ``(H, d, R)`` covering
    every distance of the attention (no clipping); ``key`` None: no key-side term."""

    q_content: Tensor
    query: tuple[Tensor, Tensor]
    key: Optional[tuple[Tensor, Tensor]]
    r_lo: int

    def one_query_logits(self, k: Tensor, q_offset: int) -> Tensor:
        """The logits of a single query at ``q_offset`` (a decoding step),
        ``(B, H, 1, k_len)``: its distances to keys ``0 .. k_len - 1`` are consecutive
        columns of the tables, so the rows are plain products with those columns, nothing
        to read by distance. Beam search is bound by kernel launches, and the products
        gathered by distance (:meth:`PositionEncoding.logit_bias`) launch more
        (``docs/decisions.md``, "Decoding steps")."""
        k_len = k.size(2)
        start = -q_offset - self.r_lo  # the column of key 0
        x_q, a_q = self.query
        if x_q.size(2) != 1 or start < 0 or start + k_len > a_q.size(-1):
            raise ValueError(f"one query at {q_offset} over {k_len} keys needs distances "
                             f"{-q_offset}..{k_len - 1 - q_offset}; the rows have "
                             f"{self.r_lo}..{self.r_lo + a_q.size(-1) - 1}")
        batch, heads, _, dim = x_q.shape
        rows = batch * heads

        def columns(table: Tensor) -> Tensor:  # a step's own table has just these
            width = table.size(-1)
            return table if start == 0 and width == k_len else table.narrow(-1, start, k_len)

        q_rows = self.q_content.reshape(rows, 1, dim)
        k_rows = k.reshape(rows, k_len, dim).transpose(1, 2)
        if self.key is None:
            logits = torch.bmm(q_rows, k_rows)
        else:  # the key-side term joins the content product
            x_k, a_k = self.key
            by_key = (x_k * columns(a_k).transpose(-1, -2)).sum(-1)  # (B, H, k_len)
            logits = torch.baddbmm(by_key.view(rows, 1, k_len), q_rows, k_rows)
        # (H, B, d) @ (H, d, k_len): the table is not copied per sentence, as a broadcast
        # matmul over (B, H) would.
        by_query = torch.bmm(x_q.reshape(batch, heads, dim).transpose(0, 1), columns(a_q))
        return (logits.view(batch, heads, k_len) + by_query.transpose(0, 1)).unsqueeze(2)


def clipped_distance_index(
    q_len: int, k_len: int, q_offset: int, r_lo: int, r_hi: int, ctx: PositionContext,
    device: torch.device,
) -> Tensor:
    """``clip(j - i, r_lo, r_hi) - r_lo`` for every (i, j): the row of a per-distance table
    of vectors; ``(B, 1, q_len, k_len)`` between chosen positions. Content-free and the
    same for every layer with the same clip range, so the latest one is kept."""
    chosen = ctx.positions is not None

    def index() -> Tensor:
        r = (ctx.distances(q_len, k_len, q_offset) if chosen
             else relative_positions(q_len, k_len, q_offset, device))
        return clipped_index(r, r_lo, r_hi)

    return ctx.latest(("clipped_distance_index", r_lo, r_hi), "index",
                      (q_len, k_len, q_offset), index, batch_dependent=chosen)
