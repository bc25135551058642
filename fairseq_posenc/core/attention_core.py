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
per call from the terms' declarations, and :meth:`PositionalAttentionCore.attend` runs it:
fused SDPA (``LOW_RANK`` terms as extra q, k dimensions: :func:`concat_low_rank`), the
fused distance kernels of :mod:`fairseq_posenc.core.kernels.distance`, the explicit path, or a
decoding step (:meth:`PositionalAttentionCore._decode_step`); the same numbers up to
rounding.

The incremental cache of a layer is a dict in fairseq's layout (``prev_key``/``prev_value``
as ``(B, H, len, d_h)``, ``prev_key_padding_mask`` ``(B, len)``, True at padding), which
beam search reorders along its first dimension; queries are the last ``q_len`` of
``k_len`` positions, ``q_offset = k_len - q_len``. Which kind takes which path:
``docs/architecture.md``; why: ``docs/decisions.md``.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

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
from .context import KernelFamily, PositionContext, PositionScope
from .encodings import outputs
from .encodings.base import PositionEncoding
from .encodings.kinds import PositionKind
from .encodings.terms import low_rank_bias, low_rank_operands
from .gate_sums import gate_dimensions, read_gates, step_gate_bias, with_gate_bias

__all__ = ["AttachedPositions", "Buffer", "PositionalAttentionCore", "concat_low_rank"]

#: A layer's incremental cache: ``prev_key``, ``prev_value``, ``prev_key_padding_mask``.
Buffer = Dict[str, Optional[Tensor]]


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


def cached_length(saved: Optional[Buffer]) -> int:
    """Positions already in a layer's incremental buffer (None: not decoding)."""
    prev_key = None if saved is None else saved.get("prev_key")
    return 0 if prev_key is None else prev_key.size(2)


def _append_padding(prev: Optional[Tensor], new: Optional[Tensor], batch: int,
                    prev_len: int, new_len: int) -> Optional[Tensor]:
    """The cache's padding mask after a call: ``prev`` (``(B, prev_len)``) then ``new``
    (``(B, new_len)``), False (a real token) for the side that has none."""
    if prev is None and new is None:
        return None
    device = (prev if prev is not None else new).device
    if prev is None:
        prev = torch.zeros(batch, prev_len, dtype=torch.bool, device=device)
    if new is None:
        new = torch.zeros(batch, new_len, dtype=torch.bool, device=device)
    return torch.cat([prev.to(torch.bool), new.to(torch.bool)], dim=1)


def _additive_term(term: PositionEncoding, q: Tensor, k: Tensor, tgt_len: int, src_len: int,
                   q_offset: int, padding_mask: Optional[Tensor],
                   ctx: PositionContext) -> Optional[Tensor]:
    """What an additive term adds to the logits, ``(B or 1, H or 1, q, k)``, checked
    against what its kind documents (:mod:`.encodings.outputs`); None for the kinds that
    add nothing there (rotations). ``padding_mask``: the padding of the self-attention
    input, cache included."""
    kind = term.kind
    sizes = (q.size(0), q.size(1), tgt_len, src_len)
    if kind is PositionKind.DISTANCE_BIAS:
        return outputs.DISTANCE_TERM.check(
            term, term.expanded(tgt_len, src_len, q_offset, ctx), sizes)
    if kind is PositionKind.PAIR_BIAS:
        return outputs.PAIR_BIAS.check(
            term, term.pair_bias(tgt_len, src_len, q_offset, padding_mask, ctx), sizes)
    if kind is PositionKind.LOW_RANK:
        return outputs.LOW_RANK_TERM.check(
            term, low_rank_bias(term, tgt_len, src_len, q_offset, padding_mask, ctx), sizes)
    if kind in (PositionKind.CONTENT_BIAS, PositionKind.PROBABILITIES):
        return outputs.LOGIT_BIAS.check(term, term.logit_bias(q, k, q_offset, ctx), sizes)
    if kind is PositionKind.PROJECTION:
        return outputs.PROJECTED_BIAS.check(
            term, term.projected_bias(tgt_len, padding_mask, ctx), sizes)
    return None


def _projected_input(term: PositionEncoding, x: Tensor, key_padding_mask: Optional[Tensor],
                     ctx: PositionContext) -> Tensor:
    """``term.project_sequence``, checked: ``(k_len', B, C)`` from ``x`` (``(T, B, C)``)."""
    return outputs.PROJECTED_INPUT.check(term, term.project_sequence(x, key_padding_mask, ctx),
                                         (None, x.size(1), x.size(2)))


def _value_term(term: PositionEncoding, probs: Tensor, q_offset: int, ctx: PositionContext,
                head_dim: int) -> Tensor:
    """``term.value_term``, checked: ``(B, H, q_len, d_h)`` from the probabilities."""
    return outputs.VALUE_TERM.check(term, term.value_term(probs, q_offset, ctx),
                                    (*probs.shape[:3], head_dim))


def _logit_terms(
    terms: Sequence[PositionEncoding], q: Tensor, k: Tensor, tgt_len: int, src_len: int,
    q_offset: int, padding_mask: Optional[Tensor], ctx: PositionContext,
    skip: Sequence[PositionEncoding] = (), by_rows: Sequence[PositionEncoding] = (),
) -> tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """What ``terms`` (but ``skip``) do to the logits: ``content`` replacing ``q.k``, a
    ``scale`` multiplying the content logits and an additive ``bias``; None where no term
    has one. ``q`` is scaled; ``padding_mask`` as for :func:`_additive_term`; ``by_rows``:
    terms that one query reads as products by distance
    (:attr:`.attention_plan.Plan.one_query_rows`)."""
    content: Optional[Tensor] = None
    scale: Optional[Tensor] = None
    bias: Optional[Tensor] = None
    sizes = (q.size(0), q.size(1), tgt_len, src_len)  # of the logits
    for term in terms:
        if term in skip:
            continue
        kind = term.kind
        if kind is PositionKind.DISTANCE_SCALE:
            factor = outputs.DISTANCE_TERM.check(
                term, term.expanded(tgt_len, src_len, q_offset, ctx), sizes)
            scale = factor if scale is None else scale * factor
            continue
        if kind is PositionKind.CONTENT_LOGITS:
            content = outputs.CONTENT_LOGITS.check(
                term, term.content_logits(q, k, q_offset, ctx), sizes)
            continue
        if term in by_rows:  # one query (a decoding step): products, no gather
            content = term.distance_rows(q, k, q_offset, ctx).one_query_logits(k, q_offset)
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
    # Zeros up to a multiple of 8 dimensions: SDPA's fused CUDA kernels take no other head
    # dimension, and SDPA would run its math path instead (causal ALiBi's 64 + 2;
    # docs/decisions.md, "Low-rank terms as extra dimensions").
    extra = -sum(x.size(-1) for x in qs) % 8
    if extra:
        qs.append(q.new_zeros(batch, heads, q.size(2), extra))
        ks.append(k.new_zeros(batch, heads, k.size(2), extra))
    return torch.cat(qs, dim=-1), torch.cat(ks, dim=-1)


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
        cached = cached_length(saved)
        need_weights = need_weights or need_head_weights
        plan = plan_attention(positions, Call(
            query.device, query.dtype, tgt_len, cached + tgt_len,
            causal=attn_mask is not None,
            padding=key_padding_mask is not None or (
                saved is not None and saved.get("prev_key_padding_mask") is not None),
            dropout=self._dropout_p() > 0, need_weights=need_weights,
            incremental=saved is not None, grad=torch.is_grad_enabled(),
            chosen_positions=ctx.positions is not None,
        ), self.low_rank_kernel, self.distance_kernel)
        if plan.path is Path.STEP:
            assert saved is not None
            return self._decode_step(query, saved, positions, ctx, plan), None
        # INPUT_GATES terms read this call's input, their sums extend the cache.
        gates = read_gates(positions.gates, query, key_padding_mask, saved, self.num_heads)

        def split_heads(x: Tensor) -> Tensor:  # (T, B, C) -> (B, H, T, d_h)
            return x.reshape(x.size(0), bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

        # Absolute terms count the positions of the self-attention input's real tokens.
        input_padding_mask = key_padding_mask
        kv_input = query
        for term in positions.projections:
            kv_input = _projected_input(term, query, key_padding_mask, ctx)
            key_padding_mask = None  # projections over real tokens: none is padding
        q = split_heads(self.q_proj(query))
        k = split_heads(self.k_proj(kv_input))
        v = split_heads(self.v_proj(kv_input))
        q, k = self._scaled_and_rotated(q, k, cached, positions, ctx)
        if saved is not None:
            k, v, key_padding_mask = self._extend_cache(saved, k, v, key_padding_mask)
            input_padding_mask = key_padding_mask
        src_len = k.size(2)
        q_offset = src_len - tgt_len

        def concatenate(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
            """``[q, P_Q ...]``, ``[k, P_K ...]`` for the concatenated low-rank terms."""
            return concat_low_rank(q, k, [
                gate_dimensions(gates[t], self.num_heads, tgt_len, q.dtype) if t in gates
                else low_rank_operands(t, tgt_len, src_len, q_offset, input_padding_mask, ctx)
                for t in plan.concatenated])

        if plan.path is Path.FUSED_DISTANCE:
            if plan.concatenated:  # TUPE-R's low-rank part (never beside Shaw's rows)
                q, k = concatenate(q, k)
            out = self._fused_distance(plan, q, k, v, tgt_len, src_len, q_offset,
                                       key_padding_mask, attn_mask is not None, ctx)
            out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim)
            return self.out_proj(out), None

        content, scale, mask = _logit_terms(positions.terms, q, k, tgt_len, src_len,
                                            q_offset, input_padding_mask, ctx,
                                            skip=plan.concatenated,
                                            by_rows=plan.one_query_rows)
        mask = with_gate_bias(mask, gates, plan.concatenated, self.num_heads, tgt_len)
        if attn_mask is not None:
            mask = attn_mask.to(q.dtype) if mask is None else mask + attn_mask.to(q.dtype)
        if key_padding_mask is not None:
            pad = key_padding_mask.to(torch.bool).view(bsz, 1, 1, src_len)
            mask = (torch.zeros_like(pad, dtype=q.dtype) if mask is None else mask)
            mask = mask.masked_fill(pad, float("-inf"))
        if mask is not None and mask.dtype != q.dtype:
            mask = mask.to(q.dtype)

        probs: Optional[Tensor] = None
        if plan.path is Path.EXPLICIT:
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
                out = out + _value_term(term, dropped, q_offset, ctx, self.head_dim)
        else:
            if plan.concatenated:
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

    def _fused_distance(self, plan: Plan, q: Tensor, k: Tensor, v: Tensor,
                        tgt_len: int, src_len: int, q_offset: int,
                        key_padding_mask: Optional[Tensor], causal: bool,
                        ctx: PositionContext) -> Tensor:
        """The attention with the plan's term in the fused distance kernel, ``(B, H, q,
        d_h)``; ``q`` and ``k`` carry any concatenated low-rank dimensions already.
        Attention dropout is the kernel's own: the same distribution as the explicit
        path's, its mask drawn inside the tiles
        (:func:`~fairseq_posenc.core.kernels.distance.dropout_keep`)."""
        from .kernels.distance import (
            clipped_relative_attention,
            distance_attention,
            distance_rows_attention,
        )

        term, dropout_p = plan.fused, self._dropout_p()
        if plan.family is KernelFamily.ROWS:  # Transformer-XL, Huang 4: products by distance
            rows = term.distance_rows(q, k, q_offset, ctx)
            return distance_rows_attention(rows.q_content, k, v, rows.query, rows.r_lo,
                                           q_offset, key_padding_mask, causal, rows.key,
                                           dropout_p)
        if plan.family is KernelFamily.CLIPPED:  # Shaw: rows per query, values by distance
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
                                  factor=plan.family is KernelFamily.DISTANCE_FACTOR,
                                  dropout_p=dropout_p)

    def _scaled_and_rotated(self, q: Tensor, k: Tensor, q_offset: int,
                            positions: AttachedPositions,
                            ctx: PositionContext) -> tuple[Tensor, Tensor]:
        """The queries scaled (``1/sqrt(d_h)`` times the encoding's content scale) and the
        rotations applied to queries and keys at positions ``q_offset + t``; a rotation
        folds the scale into its own product."""
        q_scale = self.scaling * positions.content_scale
        for term in positions.rotations:
            q, k = outputs.check_rotation(term, q, k,
                                          term.rotate_qk(q, k, q_offset, ctx, q_scale))
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
        k, v, _ = self._extend_cache(saved, k, v, None)
        gates = read_gates(positions.gates, query, None, saved, heads)
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
                                            q_offset, None, ctx,
                                            by_rows=plan.one_query_rows)
        if positions.content_free:
            def step_bias() -> Tensor:
                total = _logit_terms(positions.content_free, q, k, 1, src_len, q_offset,
                                     None, ctx)[2]
                assert total is not None  # content-free kinds are additive
                return total if total.dtype == q.dtype else total.to(q.dtype)

            # Layers that share the terms (the same modules) read one sum per step
            # (docs/decisions.md, "Decoding steps").
            free = ctx.latest(positions.content_free, "step bias", (q_offset, q.dtype),
                              step_bias)
            bias = free if bias is None else bias + free
        for sums in gates.values():  # c_i - c_j read from the cached sums
            add = step_gate_bias(sums, heads)
            bias = add if bias is None else bias + add
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
            out = out + _value_term(term, probs, q_offset, ctx, head_dim).reshape(rows, 1, head_dim)
        return self.out_proj(out.view(1, bsz, self.embed_dim))

    @staticmethod
    def _extend_cache(saved: Buffer, k: Tensor, v: Tensor,
                      key_padding_mask: Optional[Tensor],
                      ) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """Append this call's keys and values (and padding) to the layer's cache
        ``saved``, in place; the keys, values and padding mask of every cached
        position."""
        prev_key, prev_value = saved.get("prev_key"), saved.get("prev_value")
        prev_len = 0 if prev_key is None else prev_key.size(2)
        if prev_key is not None and prev_value is not None:
            k = torch.cat([prev_key, k], dim=2)
            v = torch.cat([prev_value, v], dim=2)
        key_padding_mask = _append_padding(saved.get("prev_key_padding_mask"),
                                           key_padding_mask, k.size(0), prev_len,
                                           k.size(2) - prev_len)
        saved["prev_key"], saved["prev_value"] = k, v
        saved["prev_key_padding_mask"] = key_padding_mask
        return k, v, key_padding_mask
