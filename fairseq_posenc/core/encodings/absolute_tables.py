"""Tables over absolute positions read at the real positions of each row: a pair table
(:func:`absolute_pair_bias`), a ``LOW_RANK`` term's factors as a pair bias or as extra query
and key dimensions (:func:`low_rank_bias`, :func:`low_rank_operands`), and the check of the
positions a table covers (:func:`check_max_len`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..context import PositionContext, Window
from ..positions import gather_absolute_pairs
from .options import flag_name
from .outputs import FACTORS, term_name

if TYPE_CHECKING:
    from .base import PositionEncoding


def absolute_pair_bias(owner: nn.Module, table: Tensor, q_len: int, k_len: int,
                       q_offset: int, key_padding_mask: Optional[Tensor],
                       ctx: PositionContext) -> Tensor:
    """Read an ``(H, n, n)`` table over absolute positions (``n >= k_len``) at the real
    positions of each row: ``(B or 1, H, q_len, k_len)``.

    Without padding the positions are the indices (a slice). With padding the gather is
    done once per forward for all layers that share ``owner`` (they all get the same mask
    tensor); during decoding it is one row per step, and nothing that depends on the batch
    is kept in the decoding context (it is never reordered)."""
    if key_padding_mask is None:
        return table[:, q_offset:k_len, :k_len]
    positions = ctx.real_positions(key_padding_mask, k_len, table.device)
    return ctx.latest(owner, "absolute_pair_bias", (key_padding_mask, q_len, k_len, q_offset),
                      lambda: gather_absolute_pairs(table, positions, q_offset),
                      batch_dependent=True)


def check_max_len(term: PositionEncoding, k_len: int, positions: Optional[Tensor]) -> None:
    """Direct use of an absolute term on a longer sequence (the stack rejects such inputs
    first, with :meth:`PositionEncoding.max_length`)."""
    if k_len > term.max_len and (positions is None or int(positions.max()) >= term.max_len):
        raise ValueError(
            f"{term.name}: a sequence has more than {term.max_len} tokens, the rows of its "
            f"position table; train with a larger {flag_name(term.max_len_option)} (default: "
            "--max-source/target-positions) or shorten the input.")


def checked_factors(term: PositionEncoding, length: int,
                    ctx: PositionContext) -> tuple[Tensor, Tensor]:
    """``term.factors(length, ctx)``, checked (:data:`.outputs.FACTORS`): ``P_Q`` and
    ``P_K``, each over ``length`` positions or more, of one rank."""
    factors = term.factors(length, ctx)
    if not (isinstance(factors, tuple) and len(factors) == 2):
        raise ValueError(f"{term_name(term)}.factors returned {type(factors).__name__}, "
                         "expected a tuple (P_Q, P_K)")
    p_q, p_k = factors
    return (FACTORS.check(term, p_q, (None, length, None), part="P_Q"),
            FACTORS.check(term, p_k, (None, length, p_q.size(-1)), part="P_K"))


def low_rank_product(term: PositionEncoding, length: int, ctx: PositionContext) -> Tensor:
    """``P_Q P_K^T``: ``(H, n, n)`` for some ``n >= length``, per forward (content-free)."""
    def compute(lo: int, hi: int) -> Window:
        p_q, p_k = checked_factors(term, min(hi + 1, term.max_len), ctx)
        return Window(torch.matmul(p_q, p_k.transpose(-1, -2)), 0, p_q.size(-2) - 1)

    return ctx.window(term, "product", 0, length - 1, compute).table


def _real_positions(key_padding_mask: Optional[Tensor], k_len: int,
                    ctx: PositionContext) -> Optional[Tensor]:
    if key_padding_mask is None:
        return None
    return ctx.real_positions(key_padding_mask, k_len, key_padding_mask.device)


def low_rank_bias(term: PositionEncoding, q_len: int, k_len: int, q_offset: int,
                  key_padding_mask: Optional[Tensor], ctx: PositionContext) -> Tensor:
    """A ``LOW_RANK`` term as a pair bias ``(B or 1, H, q_len, k_len)``: the product
    ``P_Q P_K^T`` once per forward, read at the rows' real positions (without padding, once
    per forward or decoding step for the layers that share the term); at chosen positions,
    the rows at them times each other (no ``span x span`` product)."""
    if ctx.positions is not None:
        return ctx.latest(term, "low_rank_bias", (q_len, k_len, q_offset),
                          lambda: _low_rank_at(term, ctx.positions, q_offset, ctx),
                          batch_dependent=True)

    def compute() -> Tensor:
        check_max_len(term, k_len, _real_positions(key_padding_mask, k_len, ctx))
        product = low_rank_product(term, min(k_len, term.max_len), ctx)
        return absolute_pair_bias(term, product, q_len, k_len, q_offset, key_padding_mask,
                                  ctx)

    if key_padding_mask is not None:
        return compute()
    return ctx.latest(term, "low_rank_bias", (q_len, k_len, q_offset), compute)


def _low_rank_at(term: PositionEncoding, positions: Tensor, q_offset: int,
                 ctx: PositionContext) -> Tensor:
    """``P_Q[pos_i] . P_K[pos_j]`` at ``positions`` ``(B, k_len)``: ``(B, H or 1, q, k)``."""
    largest = ctx.largest_position()
    if largest >= term.max_len:  # --random-positions' check rejects it first
        raise ValueError(f"{term.name}: position {largest} beyond its {term.max_len} rows")
    p_q, p_k = checked_factors(term, largest + 1, ctx)
    return torch.matmul(read_rows(p_q, positions[:, q_offset:]),
                        read_rows(p_k, positions).transpose(-1, -2))


def low_rank_operands(term: PositionEncoding, q_len: int, k_len: int, q_offset: int,
                      key_padding_mask: Optional[Tensor],
                      ctx: PositionContext) -> tuple[Tensor, Tensor]:
    """A ``LOW_RANK`` term as extra query and key dimensions, ``P_Q[pos_i]``
    ``(B or 1, H or 1, q_len, d_p)`` and ``P_K[pos_j]`` ``(B or 1, H or 1, k_len, d_p)``,
    so that ``[q, P_Q[pos_i]] . [k, P_K[pos_j]] = q.k + (P_Q P_K^T)[pos_i, pos_j]``."""
    positions = _real_positions(key_padding_mask, k_len, ctx)
    check_max_len(term, k_len, positions)
    p_q, p_k = checked_factors(term, min(k_len, term.max_len), ctx)
    if positions is None:  # the indices: slices
        return p_q[None, :, q_offset:k_len], p_k[None, :, :k_len]
    # Read once per forward for every layer that shares the term (they all get the same
    # mask tensor); autograd sums the layers' gradients into the one read.
    return ctx.latest(term, "low_rank_operands", (key_padding_mask, q_len, k_len, q_offset),
                      lambda: (read_rows(p_q, positions[:, q_offset:]),
                               read_rows(p_k, positions)),
                      batch_dependent=True)


def read_rows(table: Tensor, positions: Tensor) -> Tensor:
    """``table[h, positions[b, t]]``: ``(B, H, T, d)`` from an ``(H, n, d)`` table and
    ``(B, T)`` positions, as one-hot rows times the table.

    Exact (one non-zero product per output), and its backward is one matrix product where
    indexing's (``table[:, positions]``) is an accumulating ``index_put``
    (``docs/decisions.md``, "Low-rank operands read once per forward")."""
    heads, n, d = table.shape
    batch, length = positions.shape
    one_hot = F.one_hot(positions.to(table.device), n).to(table.dtype)  # (B, T, n)
    rows = one_hot.view(-1, n) @ table.transpose(0, 1).reshape(n, heads * d)
    return rows.view(batch, length, heads, d).transpose(1, 2)
