"""What every position encoding shares: its declared kind, sharing across layers, caching.

An encoding acts either at the input (fairseq's own position embeddings; self-attention
stays stock) or inside self-attention through one or more *position terms*
(:meth:`PositionEncoding.terms`; usually the encoding itself). Each term declares its
:class:`~fairseq_posenc.core.context.PositionKind`, and
:class:`~fairseq_posenc.core.attention_core.PositionalAttentionCore` computes each kind in one
way, choosing the fastest exact kernel for it:

* ``DISTANCE_BIAS`` / ``DISTANCE_SCALE`` -- :meth:`RelativeScalarBias.distance_bias`, a
  per-head table over a range of distances ``r = j - i``, added to the logits or
  multiplying ``q_i.k_j`` (Huang et al.'s methods 1-2);
* ``PAIR_BIAS`` -- :meth:`PositionEncoding.pair_bias`, content-free per pair (segments,
  TUPE with its [CLS] reset);
* ``LOW_RANK`` -- :meth:`PositionEncoding.factors`, ``P_Q, P_K`` over absolute positions
  whose product is added to the logits (DIET-ABS, TUPE);
* ``ROTATION`` -- :meth:`PositionEncoding.rotate_qk` (RoPE);
* ``CONTENT_BIAS`` / ``PROBABILITIES`` -- :meth:`PositionEncoding.logit_bias` from the
  queries or keys, and :meth:`PositionEncoding.value_term` from the probabilities (Shaw);
  the same terms as tables by clipped distance (Shaw's :meth:`~PositionEncoding.
  clipped_tables`) or as products read by distance (:meth:`~PositionEncoding.
  distance_rows`: Transformer-XL, Huang et al.'s method 4) for the fused kernel;
* ``CONTENT_LOGITS`` -- :meth:`PositionEncoding.content_logits` replacing ``q_i.k_j``
  (Huang et al.'s method 3);
* ``PROJECTION`` -- :meth:`PositionEncoding.project_sequence` and
  :meth:`PositionEncoding.projected_bias` (DIET-ABS on a Linformer).

:attr:`PositionEncoding.content_scale` is a constant on ``q_i.k_j / sqrt(d_h)`` (TUPE).

``--pos-layers`` (:func:`layers_with_encoding`) chooses the layers that get the encoding:
every layer, or the first only (AT5's translation setting).

Content-free values are cached in the stack's
:class:`~fairseq_posenc.core.context.PositionContext`, keyed by the term that owns them: a table
shared by all layers is expanded once per forward, and while decoding each step only slices
a table computed for a window that grows geometrically.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..context import FusedKernel, KernelFamily, PositionContext, PositionKind, Window
from ..random_positions import RandomPositions
from .flags import Flag, add_flags, check_flags
from ..positions import (
    clipped_index,
    distance_range,
    expand_distance_bias,
    gather_absolute_pairs,
    read_by_distance,
    relative_positions,
)


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


class PositionEncoding(nn.Module):
    """Base class. Subclasses set ``name`` and implement the hooks they need."""

    name: ClassVar[str]
    #: True for encodings added to the input embeddings (self-attention untouched).
    at_input: ClassVar[bool] = False

    #: This encoding's hyperparameters as command-line flags (prefixed with its name);
    #: a flag shared with another encoding is listed by both.
    flags: ClassVar[tuple[Flag, ...]] = ()

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        """Add :attr:`flags` to the model's parser."""
        add_flags(parser, cls.flags)

    @classmethod
    def check_args(cls, args: argparse.Namespace) -> None:
        """Raise ``ValueError`` with a fix for hyperparameters that make no sense: each
        flag's own check; encodings add checks that relate several flags."""
        check_flags(args, cls.flags)

    @classmethod
    def shares_layers(cls, args: argparse.Namespace) -> bool:
        """One module for all layers of a stack (True) or one per layer (False)."""
        return False

    @classmethod
    def build(
        cls,
        args: argparse.Namespace,
        *,
        num_heads: int,
        head_dim: int,
        causal: bool,
        max_positions: int,
    ) -> "PositionEncoding":
        raise NotImplementedError

    #: ``--pos-layers`` when the user gives none: "all", or "first" (AT5's MT setting).
    default_layers: ClassVar[str] = "all"

    @classmethod
    def build_stack(
        cls, args: argparse.Namespace, num_layers: int, **kwargs: Any
    ) -> list[Optional["PositionEncoding"]]:
        """The encoding of each layer (None: plain self-attention). Layer-shared encodings
        repeat the same module; ``--pos-layers first`` leaves every later layer plain."""
        used = layers_with_encoding(args, cls, num_layers)
        if cls.shares_layers(args):
            shared = cls.build(args, **kwargs)
            return [shared if used_here else None for used_here in used]
        return [cls.build(args, **kwargs) if used_here else None for used_here in used]

    #: Absolute encodings: the ``--<encoding>-max-len`` flag (see :func:`.flags.max_len_option`)
    #: whose value, by default the stack's max positions, bounds the sequence length.
    max_len_flag: ClassVar[Optional[str]] = None

    @classmethod
    def max_length(cls, args: argparse.Namespace, max_positions: int) -> Optional[int]:
        """Longest sequence the encoding supports (absolute encodings), else None."""
        if cls.max_len_flag is None:
            return None
        return getattr(args, cls.max_len_flag[2:].replace("-", "_")) or max_positions

    @classmethod
    def max_length_flag(cls, args: argparse.Namespace) -> Optional[str]:
        """The encoding's own flag that sets :meth:`max_length`, if one was given."""
        flag = cls.max_len_flag
        return flag if flag and getattr(args, flag[2:].replace("-", "_")) else None

    @classmethod
    def random_positions_refusal(cls, args: argparse.Namespace) -> Optional[str]:
        """Why ``--random-positions`` cannot apply to this encoding with ``args`` (None: its
        terms read positions, or their differences, wherever they are)."""
        return None

    @classmethod
    def position_draw(cls, args: argparse.Namespace) -> Optional[Callable[[Tensor], Tensor]]:
        """How a training forward chooses each sequence's positions from the padding mask
        (``--random-positions``' draw, SHAPE's shift), or None: ``0..n-1``."""
        span = getattr(args, "random_positions", None)
        return None if span is None else RandomPositions(span)

    # -- what the term is, and what the attention calls for its kind ----------------
    #: The kind of this term (see :class:`~fairseq_posenc.core.context.PositionKind`). A class
    #: may set it per instance when a constructor argument changes it (Shaw's value table,
    #: TUPE's reset, a causal ALiBi).
    kind: PositionKind
    #: Factor on ``q_i.k_j / sqrt(d_h)`` (TUPE's ``1/sqrt(2 d_h)`` is ``1/sqrt(2)``).
    content_scale: float = 1.0
    #: How the term can run fused, its kernel family (None: no fused kernel); the planner
    #: (:mod:`fairseq_posenc.core.attention_plan`) reads it, and each family's hooks are below:
    #:
    #: * ``DISTANCE``, ``DISTANCE_FACTOR``: :meth:`RelativeScalarBias.distance_table`;
    #: * ``CAUSAL_EXTRA_DIMENSIONS``: a ``DISTANCE_BIAS`` that equals a ``LOW_RANK`` term
    #:   (:meth:`factors`, over :attr:`max_len` positions) under the causal mask, up to a
    #:   constant per query, which a softmax ignores (causal ALiBi);
    #: * ``CLIPPED``: a ``CONTENT_BIAS`` / ``PROBABILITIES`` term read by clipped distance
    #:   (Shaw): the bias is ``key_rows[b, h, i, clip(j - i) - r_lo]`` and the value term
    #:   the probabilities summed by clipped distance times a table
    #:   (:meth:`clipped_tables`, :meth:`rows_by_key`);
    #: * ``ROWS``: a ``CONTENT_BIAS`` of the query or key against a vector per distance
    #:   (Transformer-XL, Huang et al.'s method 4) given as products
    #:   (:meth:`rows_cover`, :meth:`distance_rows`);
    #: * ``EXTRA_DIMENSIONS``: a ``LOW_RANK`` term (:meth:`factors`); ``ROTARY``: a rotation.
    fused_kernel: Optional[FusedKernel] = None

    def rows_cover(self, q_len: int, k_len: int, q_offset: int) -> bool:
        """``ROWS``: whether every distance of this attention has a vector of its own (no
        clip shorter than the sentence), so that :meth:`distance_rows` gives the term."""
        raise NotImplementedError

    def distance_rows(self, q: Tensor, k: Tensor, q_offset: int,
                      ctx: PositionContext) -> DistanceRows:
        """``ROWS``, where :meth:`rows_cover`: the term as :class:`DistanceRows` (``q``
        scaled)."""
        raise NotImplementedError

    def clipped_tables(self, q: Tensor) -> tuple[Tensor, Optional[Tensor], int]:
        """``CLIPPED``: ``key_rows`` ``(B, H, q_len, R)`` from the scaled queries, the
        value table ``(R, d_h)`` (or None: keys only), and ``r_lo``."""
        raise NotImplementedError

    def rows_by_key(self, q_offset: int, k_len: int, dtype: torch.dtype,
                    ctx: PositionContext) -> tuple[Tensor, Optional[Tensor]]:
        """``CLIPPED``, one query at ``q_offset`` (a decoding step): the key
        table's row for each key ``j``, ``(k_len, d_h)``, and the value table's (or None),
        so that the logits are ``q.(k_j + key_rows[j])`` and the output
        ``sum_j p_j (v_j + value_rows[j])``."""
        raise NotImplementedError

    def terms(self) -> tuple["PositionEncoding", ...]:
        """The position terms this encoding adds to a layer: itself, unless it is a sum of
        terms of different kinds (TUPE-R: a low-rank term and a distance bias)."""
        return (self,)

    def pair_bias(self, q_len: int, k_len: int, q_offset: int,
                  key_padding_mask: Optional[Tensor], ctx: PositionContext) -> Tensor:
        """``PAIR_BIAS``: ``(B or 1, H, q_len, k_len)`` added to the logits.
        ``key_padding_mask`` is the padding of the self-attention input, cache included
        (``(B, q_offset + q_len)``, True at padding, or None)."""
        raise NotImplementedError

    def factors(self, length: int, ctx: PositionContext) -> tuple[Tensor, Tensor]:
        """``LOW_RANK``: ``P_Q, P_K`` of shape ``(H or 1, n, d_p)`` over absolute positions
        ``0..n-1``, ``n >= length``, scaled so that the term is ``P_Q[pos_i] . P_K[pos_j]``.
        Positions count real tokens; :attr:`max_len` bounds them."""
        raise NotImplementedError

    #: ``LOW_RANK``: the number of absolute positions the factors have.
    max_len: int

    def rotate_qk(self, q: Tensor, k: Tensor, q_offset: int, ctx: PositionContext,
                  q_scale: float = 1.0) -> tuple[Tensor, Tensor]:
        """``ROTATION``: this step's queries and keys (both at positions ``q_offset + t``),
        transformed before keys are cached; the queries also scaled by ``q_scale`` (the
        attention's ``1/sqrt(d_h)``, which a rotation may fold into its own product)."""
        raise NotImplementedError

    def logit_bias(self, q: Tensor, k: Tensor, q_offset: int,
                   ctx: PositionContext) -> Tensor:
        """``CONTENT_BIAS``, ``PROBABILITIES``: term added to ``e_ij`` (after scaling),
        broadcastable to ``(B, H, q_len, k_len)``; ``q`` is the already scaled query
        ``(B, H, q_len, d_h)``, ``k`` the keys ``(B, H, k_len, d_h)``."""
        raise NotImplementedError

    def content_logits(self, q: Tensor, k: Tensor, q_offset: int,
                       ctx: PositionContext) -> Tensor:
        """``CONTENT_LOGITS``: ``(B, H, q_len, k_len)`` replacing ``q_i.k_j`` (``q``
        already scaled)."""
        raise NotImplementedError

    def value_term(self, probs: Tensor, q_offset: int, ctx: PositionContext) -> Tensor:
        """``PROBABILITIES``: term added to ``sum_j p_ij v_j``, ``(B, H, q_len, d_h)``."""
        raise NotImplementedError

    def project_sequence(self, x: Tensor, key_padding_mask: Optional[Tensor],
                         ctx: PositionContext) -> Tensor:
        """``PROJECTION``: ``(k_len', B, C)``, the input that keys and values are computed
        from, projected along the sequence (padding excluded) from ``x`` (``(T, B, C)``).
        The projected keys have no padding."""
        raise NotImplementedError

    def projected_bias(self, q_len: int, key_padding_mask: Optional[Tensor],
                       ctx: PositionContext) -> Tensor:
        """``PROJECTION``: ``(B or 1, H, q_len, k_len')`` added to the logits over the
        projected keys; ``key_padding_mask`` is the padding of the input."""
        raise NotImplementedError


class RelativeScalarBias(PositionEncoding):
    """``b_h(r)``: a content-free scalar per head and relative distance ``r = j - i``,
    added to the logits (``DISTANCE_BIAS``) or, for Huang et al.'s multiplicative methods,
    multiplying ``q_i.k_j`` (``DISTANCE_SCALE``).

    Subclasses implement :meth:`distance_bias` for a range of distances; :meth:`expanded`
    turns it into the ``(H, q_len, k_len)`` term, caching both the per-distance table and
    the expansion in the stack's context.
    """

    kind = PositionKind.DISTANCE_BIAS
    fused_kernel = FusedKernel(KernelFamily.DISTANCE)

    def distance_bias(self, r_lo: int, r_hi: int) -> Tensor:
        """``(heads, r_hi - r_lo + 1)``: the bias of every distance in ``[r_lo, r_hi]``."""
        raise NotImplementedError

    def distance_table(self, q_len: int, k_len: int, q_offset: int,
                       ctx: PositionContext) -> tuple[Tensor, int]:
        """``(H, R)`` and ``r_lo``: the bias of every distance ``r_lo .. r_lo + R - 1`` that
        queries at ``q_offset + i`` and keys ``0 .. k_len - 1`` have, once per forward."""
        r_lo, r_hi = distance_range(q_len, k_len, q_offset)
        table = ctx.window(self, "per_distance", r_lo, r_hi,
                           lambda lo, hi: Window(self.distance_bias(lo, hi), lo, hi))
        return table.rows(r_lo, r_hi), r_lo

    def expanded(self, q_len: int, k_len: int, q_offset: int, ctx: PositionContext) -> Tensor:
        """``(H, q_len, k_len)``: ``b_h(j - i)`` for queries at ``q_offset + i``; between
        positions chosen per sequence (:attr:`PositionContext.positions`), ``(B, H, q_len,
        k_len)`` read at their differences."""
        if ctx.positions is not None:
            def gathered() -> Tensor:
                r_lo, r_hi = ctx.distance_range(q_len, k_len, q_offset)
                table = ctx.window(self, "per_distance", r_lo, r_hi, lambda lo, hi: Window(
                    self.distance_bias(lo, hi), lo, hi)).rows(r_lo, r_hi)
                return read_by_distance(table, ctx.distances(q_len, k_len, q_offset) - r_lo)

            return ctx.latest(self, "expanded", (q_len, k_len, q_offset), gathered,
                              batch_dependent=True)
        if q_len == 1 and ctx.incremental:
            # A decoding step: one narrow of an (H, 1, R) window kept for the sequence,
            # nothing made per step (beam search is bound by the host's work per layer).
            r_lo, r_hi = -q_offset, k_len - 1 - q_offset
            return ctx.window(self, "step rows", r_lo, r_hi, lambda lo, hi: Window(
                self.distance_bias(lo, hi).unsqueeze(-2), lo, hi)).rows(r_lo, r_hi)

        def compute() -> Tensor:
            table, r_lo = self.distance_table(q_len, k_len, q_offset, ctx)
            return expand_distance_bias(table, r_lo, q_len, k_len, q_offset)

        # Kept while the key is the same: the layers that share the term read it once per
        # forward (a single query outside a decoding context too).
        return ctx.latest(self, "expanded", (q_len, k_len, q_offset), compute)


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
            f"position table; train with a larger {term.max_len_flag} (default: "
            "--max-source/target-positions) or shorten the input.")


def low_rank_product(term: PositionEncoding, length: int, ctx: PositionContext) -> Tensor:
    """``P_Q P_K^T``: ``(H, n, n)`` for some ``n >= length``, per forward (content-free)."""
    def compute(lo: int, hi: int) -> Window:
        p_q, p_k = term.factors(min(hi + 1, term.max_len), ctx)
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
    p_q, p_k = term.factors(largest + 1, ctx)
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
    p_q, p_k = term.factors(min(k_len, term.max_len), ctx)
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


SHARING_CHOICES = ("none", "layer", "head")
LAYER_CHOICES = ("all", "first")


def layers_with_encoding(args: argparse.Namespace, encoding: type[PositionEncoding],
                         num_layers: int) -> list[bool]:
    """Which self-attention layers of a stack get the encoding (``--pos-layers``)."""
    choice = getattr(args, "pos_layers", None) or encoding.default_layers
    if choice not in LAYER_CHOICES:
        raise ValueError(f"--pos-layers must be one of {', '.join(LAYER_CHOICES)}, "
                         f"got {choice!r}")
    return [choice == "all" or i == 0 for i in range(num_layers)]


def init_scalar_table(table: Tensor) -> None:
    """Scalar position tables start as N(0, 0.02): BERT's initializer range, which the
    DIET / REL-SCALAR experiments (BERT code base) use for every parameter."""
    nn.init.normal_(table, mean=0.0, std=0.02)
