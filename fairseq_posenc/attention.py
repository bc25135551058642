"""Self-attention that takes its position terms from :class:`PositionEncoding` modules.

One ``MultiheadAttention`` subclass serves every attention-level encoding, in the encoder
and the decoder, in training, full-sequence evaluation and incremental decoding. It
replaces ``forward`` as a whole: stock fairseq sends training and evaluation through
``F.multi_head_attention_forward``, a fused path that ignores the slow path's hooks
(FAIRSEQ_NOTES.md measured a 0.91 output difference for a subclass that only overrode
``apply_sparse_mask``), so no hook-only subclass can be right in training.

Each position term declares its kind (:class:`~fairseq_posenc.context.PositionKind`), and
the attention computes each kind in one way:

* rotation -- queries and keys are rotated before keys are cached;
* projection -- keys and values come from the projected input, plus its bias;
* content-free biases (by distance, by pair) and biases that read q or k are added to the
  logits; a low-rank term either is too, or becomes extra query and key dimensions;
* factors and replacements of ``q_i.k_j`` and terms on the probabilities need the logits.

Two paths:

* fused -- ``F.scaled_dot_product_attention`` with the additive terms folded into its float
  mask. A ``LOW_RANK`` term (DIET-ABS, TUPE; and causal ALiBi, whose bias is exactly
  rank 1 under the causal mask) is run as an ordinary attention with head dimension
  ``d_h + d_p``: ``[q_i, P_Q[pos_i]] . [k_j, P_K[pos_j]] = q_i.k_j + (P_Q P_K^T)[pos_i, pos_j]``,
  the same number without a ``len x len`` tensor or its gradient. That is the
  ``"concat"`` low-rank kernel, the default on CUDA, where one fwd+bwd attention call took
  1.31 ms at head dimension 128 against 2.84 ms with the ``(B, H, T, T)`` bias and its
  gradient (H100, fp16, B=64, T=512), and DIET-ABS's training step 1.09-1.10x stock's at
  512 tokens against 1.37 with the bias (``docs/benchmark-gpu.md``). The operands are read
  once per forward, and padded with zeros to a multiple of 8 dimensions, which the fused
  kernels need. Where another term adds a ``len x len`` bias anyway (TUPE-R's buckets),
  the low-rank term joins that bias instead. On CPU (``"auto"``) the low-rank term stays
  the bias that the CPU benchmark measured (``docs/benchmark-cpu.md``): the ``H x n x n``
  product once per forward for all layers, read at the rows' positions.
  ``tests/test_kernels.py`` shows the two agree, outputs and gradients.
  A ``DISTANCE_BIAS`` or ``DISTANCE_SCALE`` term, Shaw's terms by clipped distance
  (``by_clipped_distance``: rows per query, the value term from the probabilities summed
  by clipped distance), or a content term by distance (``by_distance_rows``:
  Transformer-XL's and Huang et al.'s method 4's, as products read by distance, where no
  clip makes distances share a vector) that is the layer's only ``len x len`` term runs,
  on CUDA in half precision, in the fused kernel of
  :mod:`fairseq_posenc.kernels.distance` (``distance_kernel="auto"``, once
  :func:`~fairseq_posenc.kernels.self_check.verified` on that device and dtype, with
  attention dropout as its own variant): the ``(H, R)`` table read inside its tiles as a
  summand or a factor, padding as a ``(B, T)`` mask, the decoder's future mask as
  causality, attention dropout as a mask drawn inside the tiles, the table's gradient
  summed by distance in the kernel. No ``len x len`` tensor, where
  ``scaled_dot_product_attention`` with the bias and its gradient took 2.84 ms against
  1.00 ms with a padding mask (H100, fp16, B=64, T=512).
  A concatenated low-rank term (TUPE-R's) joins it as extra dimensions. Elsewhere, and with
  ``"bias"``, the term is part of the float mask. ``tests/test_distance_kernel.py``.
* explicit -- logits, softmax, dropout, ``p @ v`` written out, when a term needs the
  probabilities (Shaw's value term, where not fused), multiplies or replaces the content
  logits (Huang et al.'s methods 1-3; 1-2 run fused where the distance kernel does), or
  the caller asks for the attention weights; and for a single query
  row (an incremental decoding step), where stock fairseq also takes its explicit path:
  on CPU, ``scaled_dot_product_attention`` was 1.2-2.0x slower than ``matmul`` + softmax
  for one query over 16-121 keys (``B*beam = 20``, 8 heads, ``d_h = 64``); and on CPU for
  a mask that needs a gradient (a learned bias in training). The CPU fused kernel does not
  differentiate its mask, so SDPA falls back to its math path: the explicit path plus a
  "safe" softmax (``eq``/``all``/``where`` over ``B x H x q x k``), which made one
  training layer 6-8% slower (t5, diet_rel, diet_abs at 30 and 120 tokens). CUDA's
  memory-efficient kernel does differentiate the mask, so GPUs keep the fused path.

A decoding step is one query per sentence, and beam search on a GPU is bound by the host's
work per layer and step (Python, dispatch, kernel launches), not by arithmetic. So a step
of beam search (no padding, no weights asked) takes its own path,
:meth:`PositionalMultiheadAttention._decode_step`: the explicit path's numbers with the
heads as views of the projections (a step's ``(1, B, H d_h)`` is ``(B, H, 1, d_h)`` in
memory) and ``bmm`` over ``B H`` rows, where the general path permutes, broadcasts 4-D
products and checks masks. Its terms launch as few kernels as they allow: a content-free
row is a slice of a window kept for the sequence (per-distance biases as ``(H, 1, R)``:
one narrow per layer); a content term by distance is a product with its tables'
consecutive columns (:meth:`~fairseq_posenc.encodings.base.DistanceRows.one_query_logits`,
Transformer-XL, Huang et al.'s method 4), Shaw's rows are a slice of a window by distance,
RoPE's rotation one matrix product per tensor, the queries' scale folded in; the terms
are grouped by kind once, when attached. Steps with padding or asked for weights take the
general path; ``tests/test_decoding.py`` checks both against the full forward.
``posenc-benchmark --device cpu --sizes narrow --calls translate --threads 1`` measures
this work (``docs/benchmark-methodology.md``, ``docs/benchmark-host.md``).

The incremental cache keeps fairseq's layout (``prev_key``/``prev_value`` as
``(batch, heads, len, head_dim)``, ``prev_key_padding_mask``), so the inherited
``reorder_incremental_state`` reorders it for beam search. Queries of a step are the last
``q_len`` of the ``k_len`` cached positions: ``q_offset = k_len - q_len``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Literal, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from .context import PositionContext, PositionKind, PositionScope
from .encodings.base import (
    DistanceRows,
    PositionEncoding,
    low_rank_bias,
    low_rank_operands,
)
from .kernels import fused_by_default

#: ``"auto"``: the concatenated low-rank kernel on CUDA, the bias on CPU.
LowRankKernel = Literal["auto", "concat", "bias"]
#: ``"auto"``: the fused Triton kernel on CUDA in half precision
#: (:func:`~fairseq_posenc.kernels.fused_by_default`), the bias elsewhere.
DistanceKernel = Literal["auto", "fused", "bias"]
#: Kinds that add a ``len x len`` (or larger) tensor to the logits.
MASK_SIZED = frozenset({PositionKind.DISTANCE_BIAS, PositionKind.PAIR_BIAS,
                        PositionKind.CONTENT_BIAS, PositionKind.PROBABILITIES,
                        PositionKind.PROJECTION})
#: Kinds that need the logits written out (the explicit path), unless fused.
NEEDS_LOGITS = frozenset({PositionKind.DISTANCE_SCALE, PositionKind.CONTENT_LOGITS,
                          PositionKind.PROBABILITIES})
#: Additive kinds that depend on positions only, given the padding.
CONTENT_FREE = frozenset({PositionKind.DISTANCE_BIAS, PositionKind.PAIR_BIAS,
                          PositionKind.LOW_RANK})
#: Kinds the fused distance kernel runs (:mod:`fairseq_posenc.kernels.distance`).
FUSED_DISTANCE = frozenset({PositionKind.DISTANCE_BIAS, PositionKind.DISTANCE_SCALE})


def _unattended_queries(key_padding_mask: Tensor,
                        attn_mask: Optional[Tensor]) -> Optional[Tensor]:
    """``(B, 1, q_len or 1, 1)``: True for queries whose every key is padding or masked by
    ``attn_mask`` (float, ``-inf`` where blocked), or None when every query sees a key.
    ``B x q x k`` work, not the ``B x H x q x k`` of checking the logits."""
    blocked = key_padding_mask.to(torch.bool)[:, None, None, :]
    if attn_mask is not None:
        blocked = blocked | (attn_mask == float("-inf"))
    unattended = blocked.all(dim=-1, keepdim=True)
    return unattended if bool(unattended.any()) else None


def _softmax(logits: Tensor) -> Tensor:
    """The attention probabilities, in the logits' dtype. fairseq's ``utils.softmax``
    works in float32 (fp16 safety) but would also round float64 down: at least float32
    here, and never less than the input."""
    probs = torch.softmax(logits, dim=-1,
                          dtype=torch.promote_types(logits.dtype, torch.float32))
    return probs if probs.dtype == logits.dtype else probs.to(logits.dtype)


def _cached_length(saved: Optional[Dict[str, Optional[Tensor]]]) -> int:
    """Positions already in a layer's incremental buffer (None: not decoding)."""
    prev_key = None if saved is None else saved.get("prev_key")
    return 0 if prev_key is None else prev_key.size(2)


def _additive_term(term: PositionEncoding, q: Tensor, k: Tensor, tgt_len: int, src_len: int,
                   q_offset: int, padding_mask: Optional[Tensor],
                   ctx: PositionContext) -> Optional[Tensor]:
    """What an additive term adds to the logits, ``(B or 1, H or 1, q, k)``; None for the
    kinds that add nothing there (rotations). ``padding_mask``: the padding of the
    self-attention input, cache included."""
    kind = term.kind
    if kind is PositionKind.DISTANCE_BIAS:
        return term.expanded(tgt_len, src_len, q_offset, ctx)
    if kind is PositionKind.PAIR_BIAS:
        return term.pair_bias(tgt_len, src_len, q_offset, padding_mask, ctx)
    if kind is PositionKind.LOW_RANK:
        return low_rank_bias(term, tgt_len, src_len, q_offset, padding_mask, ctx)
    if kind in (PositionKind.CONTENT_BIAS, PositionKind.PROBABILITIES):
        return term.logit_bias(q, k, q_offset, ctx)
    if kind is PositionKind.PROJECTION:
        return term.projected_bias(tgt_len, padding_mask, ctx)
    return None


def _logit_terms(
    terms: Sequence[PositionEncoding], q: Tensor, k: Tensor, tgt_len: int, src_len: int,
    q_offset: int, padding_mask: Optional[Tensor], ctx: PositionContext,
    skip: Sequence[PositionEncoding] = (),
) -> tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """What ``terms`` (but ``skip``) do to the logits: ``content`` replacing ``q.k``, a
    ``scale`` multiplying the content logits and an additive ``bias``; None where no term
    has one. ``q`` is scaled; ``padding_mask`` as for :func:`_additive_term`."""
    content: Optional[Tensor] = None
    scale: Optional[Tensor] = None
    bias: Optional[Tensor] = None
    for term in terms:
        if term in skip:
            continue
        kind = term.kind
        if kind is PositionKind.DISTANCE_SCALE:
            factor = term.expanded(tgt_len, src_len, q_offset, ctx)
            scale = factor if scale is None else scale * factor
            continue
        if kind is PositionKind.CONTENT_LOGITS:
            content = term.content_logits(q, k, q_offset, ctx)
            continue
        if tgt_len == 1 and term.by_distance_rows:
            one_query = term.distance_rows(q, k, q_offset, ctx)
            if one_query is not None:  # a decoding step: products, no gather
                content = one_query.one_query_logits(k, q_offset)
                continue
        add = _additive_term(term, q, k, tgt_len, src_len, q_offset, padding_mask, ctx)
        if add is not None:
            bias = add if bias is None else bias + add
    return content, scale, bias


def concat_low_rank(q: Tensor, k: Tensor,
                    operands: Sequence[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """``[q, P_Q ...]`` and ``[k, P_K ...]`` along the head dimension; each ``P`` broadcast
    over batch and heads (``(B or 1, H or 1, len, d_p)``)."""
    batch, heads = q.shape[:2]
    qs, ks = [q], [k]
    for p_q, p_k in operands:
        qs.append(p_q.to(q.dtype).expand(batch, heads, -1, -1))
        ks.append(p_k.to(k.dtype).expand(batch, heads, -1, -1))
    # Zeros up to a multiple of 8 dimensions: the fused CUDA kernels take no other head
    # dimension, and SDPA fell back to its math path for causal ALiBi's 64 + 2 (1.49x
    # stock's training step at 512 tokens, H100, fp16; 1.05 with the bias).
    extra = -sum(x.size(-1) for x in qs) % 8
    if extra:
        qs.append(q.new_zeros(batch, heads, q.size(2), extra))
        ks.append(k.new_zeros(batch, heads, k.size(2), extra))
    return torch.cat(qs, dim=-1), torch.cat(ks, dim=-1)


@dataclass(frozen=True)
class AttachedPositions:
    """A layer's position terms and its stack's scope. A plain object, not a submodule:
    the stack owns (registers) the encodings, and may share one between layers.

    The terms grouped by kind once, when attached: a kind never changes after a term is
    built, and beam search calls the layer once per step and layer, where every Python
    operation counts (see :meth:`PositionalMultiheadAttention.forward`)."""

    encoding: Optional[PositionEncoding]
    terms: tuple[PositionEncoding, ...]
    scope: PositionScope
    #: ``PROJECTION`` terms; ``ROTATION`` terms; ``PROBABILITIES`` terms (a value term).
    projections: tuple[PositionEncoding, ...] = ()
    rotations: tuple[PositionEncoding, ...] = ()
    on_probabilities: tuple[PositionEncoding, ...] = ()
    #: Terms read by clipped distance (``by_clipped_distance``): a decoding step adds
    #: their rows by key to its keys and values (:meth:`PositionEncoding.rows_by_key`).
    by_key: tuple[PositionEncoding, ...] = ()
    #: Two or more terms whose step row depends on positions only (:data:`CONTENT_FREE`;
    #: a step has no padding; TUPE-R's): summed once per decoding step for the layers
    #: that share them. One such term reads its own cached row (a ``narrow``), which was
    #: cheaper than looking up a sum where layers have their own tables (``diet_rel``).
    #: ``step_terms``: the terms a decoding step computes itself (not ``by_key``), and
    #: ``step_value_terms`` those of them with a value term.
    content_free: tuple[PositionEncoding, ...] = ()
    step_terms: tuple[PositionEncoding, ...] = ()
    step_value_terms: tuple[PositionEncoding, ...] = ()
    #: Terms that add a ``len x len`` tensor or need the logits (:data:`MASK_SIZED`,
    #: :data:`NEEDS_LOGITS`).
    sized: tuple[PositionEncoding, ...] = ()
    #: Whether a term needs the logits written out (:data:`NEEDS_LOGITS`).
    needs_logits: bool = False

    @classmethod
    def of(cls, encoding: Optional[PositionEncoding], scope: PositionScope,
           extra_terms: Sequence[PositionEncoding] = ()) -> "AttachedPositions":
        """``encoding`` None: no position term of its own (``--pos-layers first``).
        ``extra_terms``: further terms, e.g. segment attention."""
        own = () if encoding is None else encoding.terms()
        terms = (*own, *extra_terms)

        def of_kind(*kinds: PositionKind) -> tuple[PositionEncoding, ...]:
            return tuple(t for t in terms if t.kind in kinds)

        by_key = tuple(t for t in terms if t.by_clipped_distance)
        content_free = of_kind(*CONTENT_FREE)
        if len(content_free) < 2:
            content_free = ()
        step_terms = tuple(t for t in terms if t not in by_key and t not in content_free)
        return cls(encoding, terms, scope,
                   projections=of_kind(PositionKind.PROJECTION),
                   rotations=of_kind(PositionKind.ROTATION),
                   on_probabilities=of_kind(PositionKind.PROBABILITIES),
                   by_key=by_key, content_free=content_free,
                   step_terms=step_terms,
                   step_value_terms=tuple(t for t in step_terms
                                          if t.kind is PositionKind.PROBABILITIES),
                   sized=of_kind(*(MASK_SIZED | NEEDS_LOGITS)),
                   needs_logits=bool(of_kind(*NEEDS_LOGITS)))

    @property
    def content_scale(self) -> float:
        return 1.0 if self.encoding is None else self.encoding.content_scale


class PositionalMultiheadAttention(MultiheadAttention):
    """Position-aware self-attention, built with its position terms (``positions``; none
    by default: :meth:`attach` gives a layer built on its own its terms).

    ``low_rank_kernel``: how ``LOW_RANK`` terms run on the fused path, and
    ``distance_kernel`` how a ``DISTANCE_BIAS`` term does (see the module docstring);
    every choice computes the same numbers.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        q_noise: float = 0.0,
        qn_block_size: int = 8,
        low_rank_kernel: LowRankKernel = "auto",
        distance_kernel: DistanceKernel = "auto",
        positions: Optional[AttachedPositions] = None,
    ) -> None:
        super().__init__(
            embed_dim,
            num_heads,
            dropout=dropout,
            self_attention=True,
            q_noise=q_noise,
            qn_block_size=qn_block_size,
        )
        self.low_rank_kernel: LowRankKernel = low_rank_kernel
        self.distance_kernel: DistanceKernel = distance_kernel
        self._positions = positions or AttachedPositions.of(None, PositionScope())

    def attach(self, encoding: Optional[PositionEncoding], scope: PositionScope,
               extra_terms: Sequence[PositionEncoding] = ()) -> None:
        """Replace the layer's position terms (:meth:`AttachedPositions.of`)."""
        self._positions = AttachedPositions.of(encoding, scope, extra_terms)

    @property
    def encoding(self) -> Optional[PositionEncoding]:
        """The layer's position encoding (None in a plain layer)."""
        return self._positions.encoding

    @property
    def scope(self) -> PositionScope:
        """The stack's handle on the context of the forward in progress."""
        return self._positions.scope

    def position_terms(self) -> tuple[PositionEncoding, ...]:
        """Every position term this layer applies, its encoding's and the extra ones."""
        return self._positions.terms

    def _concatenates(self, term: PositionEncoding, q: Tensor, src_len: int,
                      attn_mask: Optional[Tensor]) -> bool:
        """Whether ``term`` runs as extra query and key dimensions on the fused path."""
        if self.low_rank_kernel == "bias" or (self.low_rank_kernel == "auto" and not q.is_cuda):
            return False
        if term.kind is PositionKind.LOW_RANK:
            return True
        # A distance bias that is exactly low-rank under the causal mask (causal ALiBi).
        return (term.low_rank_exact and attn_mask is not None
                and src_len <= term.max_len)

    def _fuses_distance(self, term: PositionEncoding, q: Tensor, tgt_len: int, src_len: int,
                        attn_mask: Optional[Tensor]) -> bool:
        """Whether the one ``len x len`` term, a ``DISTANCE_BIAS`` or ``DISTANCE_SCALE``,
        Shaw's, or a content term by distance (whose clip :meth:`forward` checks), runs in
        the fused distance kernel (:mod:`fairseq_posenc.kernels.distance`)."""
        if not (term.kind in FUSED_DISTANCE or term.by_clipped_distance
                or term.by_distance_rows) or self.distance_kernel == "bias":
            return False
        # fairseq gives self-attention one attn_mask, the decoder's future mask over a
        # full sequence: the kernel reads it as causality.
        if attn_mask is not None and tgt_len != src_len:
            return False
        family = ("clipped" if term.by_clipped_distance else "rows" if term.by_distance_rows
                  else "distance_factor" if term.kind is PositionKind.DISTANCE_SCALE
                  else "distance")
        if self._dropout_p():  # the variant with attention dropout, checked on its own
            family += " dropout"
        if not (self.distance_kernel == "fused" or fused_by_default(family, q)):
            return False
        if term.by_clipped_distance:  # its rows must fit a tile
            from .kernels.distance import clipped_rows_fit

            return clipped_rows_fit(term.clipped_rows)
        return True

    def _fused_distance(self, term: PositionEncoding, q: Tensor, k: Tensor, v: Tensor,
                        tgt_len: int, src_len: int, q_offset: int,
                        key_padding_mask: Optional[Tensor], causal: bool,
                        ctx: PositionContext, rows: Optional[DistanceRows]) -> Tensor:
        """The attention with ``term`` in the fused distance kernel, ``(B, H, q, d_h)``;
        ``q`` and ``k`` carry any concatenated low-rank dimensions already; ``rows``: a
        term's :meth:`~PositionEncoding.distance_rows`. Attention dropout is the
        kernel's own: the same distribution as fairseq's, its mask drawn inside the tiles
        (:func:`~fairseq_posenc.kernels.distance.dropout_keep`)."""
        from .kernels.distance import (
            clipped_relative_attention,
            distance_attention,
            distance_rows_attention,
        )

        dropout_p = self._dropout_p()

        if rows is not None:  # Transformer-XL, Huang 4: products read by distance
            return distance_rows_attention(rows.q_content, k, v, rows.query, rows.r_lo,
                                           q_offset, key_padding_mask, causal, rows.key,
                                           dropout_p)

        if term.by_clipped_distance:  # Shaw: rows per query, the value term by distance
            key_rows, value_table, r_lo = term.clipped_tables(q)
            out, by_distance = clipped_relative_attention(
                q, k, v, key_rows, r_lo, q_offset, key_padding_mask, causal,
                by_distance=value_table is not None, dropout_p=dropout_p)
            if by_distance is not None:
                out = out + by_distance.to(out.dtype) @ value_table
            return out
        table, r_lo = term.distance_table(tgt_len, src_len, q_offset, ctx)
        return distance_attention(q, k, v, table, r_lo, q_offset, key_padding_mask,
                                  causal=causal,
                                  factor=term.kind is PositionKind.DISTANCE_SCALE,
                                  dropout_p=dropout_p)

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if static_kv or before_softmax:
            raise NotImplementedError(
                "fairseq-posenc self-attention does not support static_kv / before_softmax"
            )
        positions = self._positions
        terms = positions.terms
        ctx: PositionContext = positions.scope.context
        tgt_len, bsz, _ = query.shape
        saved = None if incremental_state is None else self._get_input_buffer(incremental_state)
        if (saved is not None and tgt_len == 1 and key_padding_mask is None
                and attn_mask is None and not (need_weights or need_head_weights)
                and not positions.projections
                and saved.get("prev_key_padding_mask") is None):
            return self._decode_step(query, incremental_state, saved, positions, ctx), None

        def split_heads(x: Tensor) -> Tensor:  # (T, B, C) -> (B, H, T, d_h)
            return x.view(x.size(0), bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

        # Absolute terms count the positions of the self-attention input's real tokens.
        input_padding_mask = key_padding_mask
        kv_input = query
        for term in positions.projections:
            kv_input = term.project_sequence(query, key_padding_mask, ctx)
            key_padding_mask = None  # projections over real tokens: none is padding
        q = split_heads(self.q_proj(query))
        k = split_heads(self.k_proj(kv_input))
        v = split_heads(self.v_proj(kv_input))
        q_scale = self.scaling * positions.content_scale
        for term in positions.rotations:  # it scales q too
            q, k = term.rotate_qk(q, k, _cached_length(saved), ctx, q_scale)
            q_scale = 1.0
        if q_scale != 1.0:
            q = q * q_scale
        if incremental_state is not None:
            k, v, key_padding_mask = self._extend_cache(incremental_state, saved, k, v,
                                                        key_padding_mask)
            input_padding_mask = key_padding_mask
        src_len = k.size(2)
        q_offset = src_len - tgt_len

        need_weights = need_weights or need_head_weights
        explicit = need_weights or tgt_len == 1
        concatenated = [] if explicit else [
            t for t in terms if self._concatenates(t, q, src_len, attn_mask)]
        sized = [t for t in positions.sized if t not in concatenated]
        fused = (sized[0] if not explicit and len(sized) == 1
                 and self._fuses_distance(sized[0], q, tgt_len, src_len, attn_mask) else None)
        rows: Optional[DistanceRows] = None
        if fused is not None and fused.by_distance_rows:
            rows = fused.distance_rows(q, k, q_offset, ctx)
            if rows is None:  # a clip shorter than the sentence: the bias path
                fused = None
        if fused is None and positions.needs_logits:
            explicit, concatenated = True, []
        elif sized and fused is None:
            # Another term adds a len x len bias anyway (TUPE-R's buckets without the
            # fused kernel): the low-rank term joins it, computed once per forward for
            # all layers, which was cheaper than extra dimensions in every layer
            # (training step 1.165 against 1.247x stock's at 128 tokens, H100, fp16).
            concatenated = []

        def concatenate(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
            """``[q, P_Q ...]``, ``[k, P_K ...]`` for the concatenated low-rank terms."""
            return concat_low_rank(q, k, [
                low_rank_operands(t, tgt_len, src_len, q_offset, input_padding_mask, ctx)
                for t in concatenated])

        if fused is not None:
            if concatenated:  # TUPE-R's low-rank part (never beside Shaw's rows)
                q, k = concatenate(q, k)
            out = self._fused_distance(fused, q, k, v, tgt_len, src_len, q_offset,
                                       key_padding_mask, attn_mask is not None, ctx, rows)
            out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim)
            return self.out_proj(out), None

        content, scale, mask = _logit_terms(terms, q, k, tgt_len, src_len, q_offset,
                                            input_padding_mask, ctx, skip=concatenated)
        if attn_mask is not None:
            mask = attn_mask.to(q.dtype) if mask is None else mask + attn_mask.to(q.dtype)
        if key_padding_mask is not None:
            pad = key_padding_mask.to(torch.bool).view(bsz, 1, 1, src_len)
            mask = (torch.zeros_like(pad, dtype=q.dtype) if mask is None else mask)
            mask = mask.masked_fill(pad, float("-inf"))
        if mask is not None and mask.dtype != q.dtype:
            mask = mask.to(q.dtype)
        if (mask is not None and mask.requires_grad and q.device.type == "cpu"
                and not explicit):
            explicit = True  # the CPU fused kernel would not differentiate the mask
            for term in concatenated:  # so these are biases after all
                mask = mask + _additive_term(term, q, k, tgt_len, src_len, q_offset,
                                             input_padding_mask, ctx)
            concatenated = []

        probs: Optional[Tensor] = None
        if explicit:
            logits = torch.matmul(q, k.transpose(-1, -2)) if content is None else content
            if scale is not None:
                logits = logits * scale.to(q.dtype)
            if mask is not None:
                logits = logits + mask
            # A query that sees only padding (a left-padded target's padding under the causal
            # mask) attends to nothing, as in the fused kernels: zeros, where a softmax over
            # -inf alone would give NaN, and NaN gradients to every bias.
            unattended = (None if key_padding_mask is None
                          else _unattended_queries(key_padding_mask, attn_mask))
            if unattended is not None:
                logits = logits.masked_fill(unattended, 0.0)
            probs = _softmax(logits)
            if unattended is not None:
                probs = probs.masked_fill(unattended, 0.0)
            dropped = self._attention_dropout(probs)
            out = torch.matmul(dropped, v)
            for term in positions.on_probabilities:
                out = out + term.value_term(dropped, q_offset, ctx)
        else:
            if concatenated:
                q, k = concatenate(q, k)
            if mask is not None and mask.dim() < 4:
                mask = mask.view((1,) * (4 - mask.dim()) + mask.shape)
            out = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=mask,
                dropout_p=self._dropout_p(),
                scale=1.0,  # q is already scaled, as the position terms expect
            )
        out = self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim))

        weights: Optional[Tensor] = None
        if need_weights and probs is not None:
            weights = probs.transpose(0, 1)  # (H, B, q, k), fairseq's per-head layout
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return out, weights

    def _dropout_p(self) -> float:
        """The attention dropout's probability where it acts (training, or fairseq's
        ``apply_during_inference``), else 0."""
        dropout = self.dropout_module
        if dropout.p > 0 and (dropout.training or dropout.apply_during_inference):
            return dropout.p
        return 0.0

    def _attention_dropout(self, probs: Tensor) -> Tensor:
        """fairseq's attention dropout, called only when it acts: a decoding step's every
        call counts (the host's work bounds beam search)."""
        return self.dropout_module(probs) if self._dropout_p() else probs

    def _decode_step(self, query: Tensor,
                     incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
                     saved: Dict[str, Optional[Tensor]], positions: AttachedPositions,
                     ctx: PositionContext) -> Tensor:
        """A step of beam search: one query per row, no padding, no weights asked; the
        explicit path's numbers with the fewest operations for the host to dispatch,
        which is what bounds beam search on a GPU (module docstring;
        ``docs/benchmark-host.md`` has the measurements)."""
        bsz = query.size(1)
        heads, head_dim = self.num_heads, self.head_dim
        rows = bsz * heads
        q = self.q_proj(query).view(bsz, heads, 1, head_dim)
        k = self.k_proj(query).view(bsz, heads, 1, head_dim)
        v = self.v_proj(query).view(bsz, heads, 1, head_dim)
        q_offset = _cached_length(saved)
        q_scale = self.scaling * positions.content_scale
        for term in positions.rotations:  # it scales q too
            q, k = term.rotate_qk(q, k, q_offset, ctx, q_scale)
            q_scale = 1.0
        if q_scale != 1.0:
            q = q * q_scale
        k, v, _ = self._extend_cache(incremental_state, saved, k, v, None)
        src_len = q_offset + 1
        # Terms read by clipped distance (Shaw): for one query, rows by key added to the
        # keys and values, ``q.(k_j + a_j)``, ``sum_j p_j (v_j + b_j)``; each joins the
        # product it adds to (baddbmm, addmm) instead of a product and a sum of its own.
        by_key: Optional[Tensor] = None
        value_rows: list[Tensor] = []
        for term in positions.by_key:
            key_table, value_table = term.rows_by_key(q_offset, src_len, q.dtype, ctx)
            product = torch.mm(q.view(rows, head_dim), key_table.t())
            by_key = product if by_key is None else by_key + product
            if value_table is not None:
                value_rows.append(value_table)
        content, scale, bias = _logit_terms(positions.step_terms, q, k, 1, src_len,
                                            q_offset, None, ctx)
        if positions.content_free:
            def step_bias() -> Tensor:
                total = _logit_terms(positions.content_free, q, k, 1, src_len, q_offset,
                                     None, ctx)[2]
                assert total is not None  # content-free kinds are additive
                return total if total.dtype == q.dtype else total.to(q.dtype)

            # Layers that share the terms (the same modules) read one sum per step:
            # TUPE-R's layer step 1.16-1.19 -> 1.05-1.09 of stock's (docs/benchmark-host.md).
            free = ctx.latest(positions.content_free, "step bias", (q_offset, q.dtype),
                              step_bias)
            bias = free if bias is None else bias + free
        if content is None:
            q_rows = q.view(rows, 1, head_dim)
            k_rows = k.view(rows, src_len, head_dim).transpose(1, 2)
            logits = (torch.bmm(q_rows, k_rows) if by_key is None
                      else torch.baddbmm(by_key.view(rows, 1, src_len), q_rows, k_rows))
            logits = logits.view(bsz, heads, 1, src_len)
        else:
            logits = content
            if by_key is not None:
                logits = logits + by_key.view(bsz, heads, 1, src_len)
        if scale is not None:
            logits = logits * scale.to(logits.dtype)
        if bias is not None:
            logits = logits + (bias if bias.dtype == logits.dtype else bias.to(logits.dtype))
        probs = self._attention_dropout(_softmax(logits))
        out = torch.bmm(probs.reshape(rows, 1, src_len), v.view(rows, src_len, head_dim))
        for table in value_rows:
            out = torch.addmm(out.view(rows, head_dim), probs.view(rows, src_len), table)
        for term in positions.step_value_terms:
            out = out + term.value_term(probs, q_offset, ctx).reshape(rows, 1, head_dim)
        return self.out_proj(out.view(1, bsz, self.embed_dim))

    def _extend_cache(
        self,
        incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
        saved: Dict[str, Optional[Tensor]],
        k: Tensor,
        v: Tensor,
        key_padding_mask: Optional[Tensor],
    ) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """Append this step's keys and values to ``saved`` (this layer's buffer of
        ``incremental_state``, read once per call) and store it."""
        prev_key, prev_value = saved.get("prev_key"), saved.get("prev_value")
        if prev_key is not None and prev_value is not None:
            k = torch.cat([prev_key, k], dim=2)
            v = torch.cat([prev_value, v], dim=2)
        prev_mask = saved.get("prev_key_padding_mask")
        if key_padding_mask is not None or prev_mask is not None:  # else it stays None
            key_padding_mask = MultiheadAttention._append_prev_key_padding_mask(
                key_padding_mask=key_padding_mask,
                prev_key_padding_mask=prev_mask,
                batch_size=k.size(0),
                src_len=k.size(2),
                static_kv=False,
            )
        saved["prev_key"], saved["prev_value"] = k, v
        saved["prev_key_padding_mask"] = key_padding_mask
        self._set_input_buffer(incremental_state, saved)
        return k, v, key_padding_mask
