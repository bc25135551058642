"""Self-attention with position terms, in torch alone: the computation that both layers run.

:class:`PositionalAttentionCore` is the computation of one self-attention layer with the
position terms of :class:`PositionEncoding` modules, for a host module that has
``MultiheadAttention``'s projections and attention dropout: the fairseq plugin's
:class:`~fairseq_posenc.plugin.attention.PositionalMultiheadAttention` and
:class:`~fairseq_posenc.nn.PositionalSelfAttention` of the torch-only API. It imports no
fairseq.

Logits ``c_ij * s_ij + b_ij``: ``c_ij = q_i.k_j`` (``q`` scaled) or a term's replacement,
``s_ij`` a factor by distance, ``b_ij`` additive terms and masks; output ``softmax(e) v``
plus any value term. :func:`~fairseq_posenc.core.attention_plan.plan_attention` picks one path
per call from the terms' declarations, and :meth:`PositionalAttentionCore.attend` runs it,
one method per path: SDPA with a float mask (low-rank terms as extra q, k dimensions:
:func:`concat_low_rank`), the fused distance kernel, the explicit logits, or a decoding
step; the same numbers up to rounding. What each term does on a path is its kind's hook
(:mod:`fairseq_posenc.core.encodings.kinds`: ``add_to_logits``, ``transform_qk``, ...);
nothing here asks what kind a term is.

The layer's decoding state is its incremental cache (:mod:`.layer_cache`); queries are the
last ``q_len`` of ``k_len`` positions, ``q_offset = k_len - q_len``. Which kind takes which
path: ``docs/architecture.md``; why: ``docs/decisions.md``.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention_plan import (
    AttachedPositions,
    Call,
    DistanceKernel,
    LowRankKernel,
    Path,
    Plan,
    plan_attention,
)
from .context import PositionContext, PositionScope
from .encodings.base import PositionEncoding
from .encodings.kinds import LogitTerms, Operands
from .layer_cache import Buffer, cached_length, extend_cache, has_padding

__all__ = ["AttachedPositions", "Buffer", "PositionalAttentionCore", "cached_length",
           "concat_low_rank"]


class Prepared(NamedTuple):
    """A full call's operands after projections, rotations and the cache."""

    #: What the terms read (``padding``: the self-attention input's, cache included).
    a: Operands
    v: Tensor
    #: The keys' padding (None for keys projected along the sequence: all real).
    key_padding_mask: Optional[Tensor]
    causal: bool


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


def logit_terms(terms: Sequence[PositionEncoding], a: Operands,
                skip: Sequence[PositionEncoding] = ()) -> LogitTerms:
    """What ``terms`` (but ``skip``, the concatenated ones) do to the logits of the call
    ``a``, each through its kind's ``add_to_logits``."""
    logits = LogitTerms()
    for term in terms:
        if term not in skip:
            term.applies_as.add_to_logits(term, logits, a)
    return logits


def _masked(bias: Optional[Tensor], attn_mask: Optional[Tensor],
            key_padding_mask: Optional[Tensor], dtype: torch.dtype) -> Optional[Tensor]:
    """The float mask: the terms' ``bias``, the caller's ``attn_mask`` and ``-inf`` at the
    keys' padding, in ``dtype``."""
    mask = bias
    if attn_mask is not None:
        mask = attn_mask.to(dtype) if mask is None else mask + attn_mask.to(dtype)
    if key_padding_mask is not None:
        pad = key_padding_mask.to(torch.bool).view(key_padding_mask.size(0), 1, 1, -1)
        mask = (torch.zeros_like(pad, dtype=dtype) if mask is None else mask)
        mask = mask.masked_fill(pad, float("-inf"))
    if mask is not None and mask.dtype != dtype:
        mask = mask.to(dtype)
    return mask


def concat_low_rank(q: Tensor, k: Tensor,
                    operands: Sequence[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """``[q, P_Q ...]`` and ``[k, P_K ...]`` along the head dimension; each ``P`` broadcast
    over batch and heads (``(B or 1, H or 1, len, d_p)``)."""
    batch, heads = q.shape[:2]
    qs, ks = [q], [k]
    for p_q, p_k in operands:
        qs.append(p_q.to(q.dtype).expand(batch, heads, -1, -1))
        ks.append(p_k.to(k.dtype).expand(batch, heads, -1, -1))
    # Zeros up to a multiple of 8 dimensions: SDPA's fused CUDA kernels take no other head
    # dimension, and SDPA would run its math path instead (causal ALiBi's 64 + 2;
    # docs/decisions.md, "Low-rank terms as extra dimensions").
    extra = -sum(x.size(-1) for x in qs) % 8
    if extra:
        qs.append(q.new_zeros(batch, heads, q.size(2), extra))
        ks.append(k.new_zeros(batch, heads, k.size(2), extra))
    return torch.cat(qs, dim=-1), torch.cat(ks, dim=-1)


def _read_inputs(terms: tuple, x: Tensor, key_padding_mask: Optional[Tensor],
                 saved: Optional[Buffer], heads: int) -> dict:
    """What each term that reads the layer's input reads of this call's input ``x`` (its
    kind's ``read_input``), extending what the cache keeps of it."""
    if not terms:
        return {}
    if len(terms) > 1 and saved is not None:
        raise ValueError(f"a layer decodes with one term that reads its input (the cache "
                         f"holds one state of it), got {len(terms)}")
    return {term: term.applies_as.read_input(term, x, key_padding_mask, saved, heads)
            for term in terms}


def _rewrite_cached_keys(positions: AttachedPositions, saved: Buffer, read: dict) -> None:
    """The cached keys as the terms that rewrite them keep them (PaTH: carried to the
    call's last position), in place of the appended ones."""
    for term in positions.key_rewriters:
        saved["prev_key"] = term.applies_as.cache_keys(term, saved["prev_key"], read[term])


def _normalised(normaliser: Optional[PositionEncoding], logits: Tensor, a: Operands,
                unattended: Optional[Tensor], v: Tensor
                ) -> tuple[Tensor, Optional[Tensor]]:
    """The attention weights of ``logits`` (the softmax, or the term that replaces it), and
    the term the replacement adds to the output (or None). A query that sees only padding
    (a left-padded target's padding under the causal mask) attends to nothing, as in the
    fused kernels: zeros, where a softmax over -inf alone would give NaN, and NaN gradients
    to every bias."""
    if normaliser is not None:
        return normaliser.applies_as.normalise(normaliser, logits, a, v)
    if unattended is not None:
        logits = logits.masked_fill(unattended, 0.0)
    probs = _softmax(logits)
    if unattended is not None:
        probs = probs.masked_fill(unattended, 0.0)
    return probs, None


def _concatenated(plan: Plan, a: Operands) -> tuple[Tensor, Tensor]:
    """``q`` and ``k`` with the plan's concatenated terms as extra dimensions."""
    if not plan.concatenated:
        return a.q, a.k
    return concat_low_rank(a.q, a.k, [t.applies_as.extra_dimensions(t, a)
                                      for t in plan.concatenated])


class PositionalAttentionCore:
    """The computation of a position-aware self-attention layer (a mixin).

    The host module has ``MultiheadAttention``'s attributes: the projections ``q_proj``,
    ``k_proj``, ``v_proj``, ``out_proj``, ``num_heads``, ``head_dim``, ``embed_dim``,
    ``scaling`` (``head_dim ** -0.5``) and ``dropout_module`` (``p``, ``training``, and
    fairseq's optional ``apply_during_inference``), and the kernel switches
    ``low_rank_kernel`` and ``distance_kernel`` (``docs/architecture.md``, "Which kernel
    runs"; every choice computes the same numbers). Its position terms are attached with
    :meth:`attach`: a plain reference, since a stack may share one encoding between
    layers."""

    low_rank_kernel: LowRankKernel
    distance_kernel: DistanceKernel
    _positions: AttachedPositions

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

    def attend(self, query: Tensor, key_padding_mask: Optional[Tensor],
               attn_mask: Optional[Tensor], saved: Optional[Buffer],
               need_weights: bool = False, need_head_weights: bool = False,
               ) -> Tuple[Tensor, Optional[Tensor]]:
        """Self-attention over ``query`` (``(T, B, C)``), ``(T, B, C)`` out, and the
        attention weights when asked for (the explicit path's, ``(B, q, k)`` averaged over
        heads, or ``(H, B, q, k)`` with ``need_head_weights``; None on a fused path).
        ``key_padding_mask``: ``(B, T)``, True at padding; ``attn_mask``: a float
        ``(q, k)`` mask, ``-inf`` where blocked, which the planner reads as causality;
        ``saved``: the layer's incremental cache, extended in place (None: no decoding)."""
        positions = self._positions
        ctx: PositionContext = positions.scope.context
        tgt_len, bsz, _ = query.shape
        need_weights = need_weights or need_head_weights
        plan = plan_attention(positions, Call(
            query.device, query.dtype, tgt_len, cached_length(saved) + tgt_len,
            causal=attn_mask is not None,
            padding=key_padding_mask is not None or has_padding(saved),
            dropout=self._dropout_p() > 0, need_weights=need_weights,
            incremental=saved is not None, grad=torch.is_grad_enabled(),
            chosen_positions=ctx.positions is not None,
        ), self.low_rank_kernel, self.distance_kernel)
        if plan.path is Path.STEP:
            assert saved is not None
            return self._decode_step(query, saved, positions, ctx, plan), None
        p = self._prepare(query, key_padding_mask, attn_mask is not None, saved, plan, ctx)
        probs: Optional[Tensor] = None
        if plan.path is Path.FUSED_DISTANCE:
            out = self._fused_path(plan, p)
        elif plan.path is Path.SDPA:
            out = self._sdpa_path(plan, p, attn_mask)
        else:
            out, probs = self._explicit_path(plan, p, attn_mask)
        out = self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim))
        weights: Optional[Tensor] = None
        if need_weights and probs is not None:
            weights = probs.transpose(0, 1)  # (H, B, q, k), fairseq's per-head layout
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return out, weights

    def _prepare(self, query: Tensor, key_padding_mask: Optional[Tensor], causal: bool,
                 saved: Optional[Buffer], plan: Plan, ctx: PositionContext) -> Prepared:
        """The operands of a full call: the terms that read the input read it (gates, a
        projection along the sequence), the heads split, queries scaled and rotated, the
        cache extended."""
        positions, bsz, heads = self._positions, query.size(1), self.num_heads
        read = _read_inputs(positions.input_readers, query, key_padding_mask, saved, heads)

        def split_heads(x: Tensor) -> Tensor:  # (T, B, C) -> (B, H, T, d_h)
            return x.reshape(x.size(0), bsz, heads, self.head_dim).permute(1, 2, 0, 3)

        # Absolute terms count the positions of the self-attention input's real tokens.
        input_padding_mask, kv_input = key_padding_mask, query
        for term in positions.projections:
            kv_input = term.applies_as.keys_input(term, query, key_padding_mask, ctx)
            key_padding_mask = None  # projections over real tokens: none is padding
        q = split_heads(self.q_proj(query))
        k = split_heads(self.k_proj(kv_input))
        v = split_heads(self.v_proj(kv_input))
        cached = cached_length(saved)
        q, k = self._scaled_and_rotated(q, k, cached, positions, ctx)
        if saved is not None:
            k, v, key_padding_mask = extend_cache(saved, k, v, key_padding_mask)
            _rewrite_cached_keys(positions, saved, read)
            input_padding_mask = key_padding_mask
        a = Operands(q, k, query.size(0), k.size(2), k.size(2) - query.size(0),
                     input_padding_mask, ctx, read, plan.one_query_rows)
        return Prepared(a, v, key_padding_mask, causal)

    def _fused_path(self, plan: Plan, p: Prepared) -> Tensor:
        """The plan's term in the fused distance kernel (its kind's ``fused_attention``),
        ``(B, H, q, d_h)``, with any concatenated low-rank dimensions (TUPE-R's low-rank
        part); attention dropout is the kernel's own."""
        q, k = _concatenated(plan, p.a)
        term = plan.fused
        return term.applies_as.fused_attention(term, plan.family, q, k, p.v, p.a, p.causal,
                                               self._dropout_p())

    def _sdpa_path(self, plan: Plan, p: Prepared, attn_mask: Optional[Tensor]) -> Tensor:
        """``F.scaled_dot_product_attention`` with the additive terms, the caller's mask and
        the padding in its float mask, the concatenated terms as extra dimensions."""
        bias = logit_terms(self._positions.terms, p.a, skip=plan.concatenated).bias
        mask = _masked(bias, attn_mask, p.key_padding_mask, p.a.q.dtype)
        q, k = _concatenated(plan, p.a)
        if mask is not None and mask.dim() < 4:
            mask = mask.view((1,) * (4 - mask.dim()) + mask.shape)
        return F.scaled_dot_product_attention(
            q, k, p.v, attn_mask=mask, dropout_p=self._dropout_p(),
            scale=1.0)  # q is already scaled, as the position terms expect

    def _explicit_path(self, plan: Plan, p: Prepared, attn_mask: Optional[Tensor]
                       ) -> tuple[Tensor, Tensor]:
        """Logits, softmax, dropout and ``p @ v`` written out, and the value terms; the
        output ``(B, H, q, d_h)`` and the probabilities."""
        a, key_padding_mask = p.a, p.key_padding_mask
        terms = logit_terms(self._positions.terms, a)
        mask = _masked(terms.bias, attn_mask, key_padding_mask, a.q.dtype)
        logits = torch.matmul(a.q, a.k.transpose(-1, -2)) if terms.content is None \
            else terms.content
        if terms.scale is not None:
            logits = logits * terms.scale.to(a.q.dtype)
        if mask is not None:
            logits = logits + mask
        unattended = (None if key_padding_mask is None
                      else _unattended_queries(key_padding_mask, attn_mask))
        probs, rest = _normalised(self._positions.normaliser, logits, a, unattended, p.v)
        dropped = self._attention_dropout(probs)
        out = torch.matmul(dropped, p.v)
        if rest is not None:
            out = out + rest
        for term in self._positions.on_probabilities:
            out = out + term.applies_as.add_to_output(term, dropped, a.q_offset, a.ctx,
                                                      self.head_dim)
        return out, probs

    def _scaled_and_rotated(self, q: Tensor, k: Tensor, q_offset: int,
                            positions: AttachedPositions,
                            ctx: PositionContext) -> tuple[Tensor, Tensor]:
        """The queries scaled (``1/sqrt(d_h)`` times the encoding's content scale) and the
        rotations applied to queries and keys at positions ``q_offset + t``; a rotation
        folds the scale into its own product."""
        q_scale = self.scaling * positions.content_scale
        for term in positions.rotations:
            q, k = term.applies_as.transform_qk(term, q, k, q_offset, ctx, q_scale)
            q_scale = 1.0
        if q_scale != 1.0:
            q = q * q_scale
        return q, k

    def _dropout_p(self) -> float:
        """The attention dropout's probability where it acts (training, or fairseq's
        ``apply_during_inference``), else 0."""
        dropout = self.dropout_module
        if dropout.p > 0 and (dropout.training
                              or getattr(dropout, "apply_during_inference", False)):
            return dropout.p
        return 0.0

    def _attention_dropout(self, probs: Tensor) -> Tensor:
        """The host's attention dropout, called only when it acts: a decoding step's every
        call counts (the host's work bounds beam search)."""
        return self.dropout_module(probs) if self._dropout_p() else probs

    def _decode_step(self, query: Tensor, saved: Buffer, positions: AttachedPositions,
                     ctx: PositionContext, plan: Plan) -> Tensor:
        """A step of beam search: one query per row, no padding, no weights asked; the
        explicit path's numbers with the fewest operations for the host to dispatch,
        which is what bounds beam search on a GPU (``docs/decisions.md``, "Decoding
        steps")."""
        bsz = query.size(1)
        heads, head_dim = self.num_heads, self.head_dim
        rows = bsz * heads
        q = self.q_proj(query).view(bsz, heads, 1, head_dim)
        k = self.k_proj(query).view(bsz, heads, 1, head_dim)
        v = self.v_proj(query).view(bsz, heads, 1, head_dim)
        q_offset = cached_length(saved)
        q, k = self._scaled_and_rotated(q, k, q_offset, positions, ctx)
        read = _read_inputs(positions.input_readers, query, None, saved, heads)
        k, v, _ = extend_cache(saved, k, v, None)
        if positions.key_rewriters:
            _rewrite_cached_keys(positions, saved, read)
            k = saved["prev_key"]
        a = Operands(q, k, 1, q_offset + 1, q_offset, None, ctx, read, plan.one_query_rows,
                     step=True)
        # Terms read by clipped distance (Shaw): for one query, rows by key added to the
        # keys and values, ``q.(k_j + a_j)``, ``sum_j p_j (v_j + b_j)``; each joins the
        # product it adds to (baddbmm, addmm) instead of a product and a sum of its own.
        by_key: Optional[Tensor] = None
        value_rows: list[Tensor] = []
        for term in positions.by_key:
            key_table, value_table = term.rows_by_key(q_offset, a.k_len, q.dtype, ctx)
            product = torch.mm(q.view(rows, head_dim), key_table.t())
            by_key = product if by_key is None else by_key + product
            if value_table is not None:
                value_rows.append(value_table)
        probs, rest = _normalised(positions.normaliser, self._step_logits(a, by_key), a,
                                  None, v)
        probs = self._attention_dropout(probs)
        out = torch.bmm(probs.reshape(rows, 1, a.k_len), v.view(rows, a.k_len, head_dim))
        if rest is not None:
            out = out + rest.reshape(rows, 1, head_dim)
        for table in value_rows:
            out = torch.addmm(out.view(rows, head_dim), probs.view(rows, a.k_len), table)
        for term in positions.step_value_terms:
            out = out + term.applies_as.add_to_output(
                term, probs, q_offset, ctx, head_dim).reshape(rows, 1, head_dim)
        return self.out_proj(out.view(1, bsz, self.embed_dim))

    def _step_logits(self, a: Operands, by_key: Optional[Tensor]) -> Tensor:
        """A decoding step's logits ``(B, H, 1, k_len)``: ``q.k`` (plus the rows by key) or
        a term's replacement, its factors, and the terms' bias, the content-free terms
        summed once per step for the layers that share them (``docs/decisions.md``,
        "Decoding steps")."""
        positions, q = self._positions, a.q
        bsz, heads, _, head_dim = q.shape
        rows, src_len = bsz * heads, a.k_len
        terms = logit_terms(positions.step_terms, a)
        if positions.content_free:
            def step_bias() -> Tensor:
                total = logit_terms(positions.content_free, a).bias
                assert total is not None  # content-free kinds are additive
                return total if total.dtype == q.dtype else total.to(q.dtype)

            terms.add(a.ctx.latest(positions.content_free, "step bias", (a.q_offset, q.dtype),
                                   step_bias))
        if terms.content is None:
            q_rows = q.view(rows, 1, head_dim)
            k_rows = a.k.view(rows, src_len, head_dim).transpose(1, 2)
            logits = (torch.bmm(q_rows, k_rows) if by_key is None
                      else torch.baddbmm(by_key.view(rows, 1, src_len), q_rows, k_rows))
            logits = logits.view(bsz, heads, 1, src_len)
        else:
            logits = terms.content
            if by_key is not None:
                logits = logits + by_key.view(bsz, heads, 1, src_len)
        if terms.scale is not None:
            logits = logits * terms.scale.to(logits.dtype)
        bias = terms.bias
        if bias is not None:
            logits = logits + (bias if bias.dtype == logits.dtype else bias.to(logits.dtype))
        return logits
