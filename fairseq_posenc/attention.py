"""Self-attention that takes its position terms from a :class:`PositionEncoding`.

One ``MultiheadAttention`` subclass serves every attention-level encoding, in the encoder
and the decoder, in training, full-sequence evaluation and incremental decoding. It
replaces ``forward`` as a whole: stock fairseq sends training and evaluation through
``F.multi_head_attention_forward``, a fused path that ignores the slow path's hooks
(FAIRSEQ_NOTES.md measured a 0.91 output difference for a subclass that only overrode
``apply_sparse_mask``), so no hook-only subclass can be right in training.

Two paths:

* fused -- ``F.scaled_dot_product_attention`` with the position term folded into its
  additive float mask, for encodings that only add to the logits (``t5``, ``diet_rel``,
  ``shaw`` without values);
* explicit -- logits, softmax, dropout, ``p @ v`` written out, when the encoding needs the
  probabilities (Shaw's value term), multiplies or replaces the content logits (Huang et
  al.'s methods 1-3), or the caller asks for the attention weights; and for a single query
  row (an incremental decoding step), where stock fairseq also takes its explicit path:
  on CPU, ``scaled_dot_product_attention`` was 1.2-2.0x slower than ``matmul`` + softmax
  for one query over 16-121 keys (``B*beam = 20``, 8 heads, ``d_h = 64``); and on CPU for
  a mask that needs a gradient (a learned bias in training). The CPU fused kernel does not
  differentiate its mask, so SDPA falls back to its math path: the explicit path plus a
  "safe" softmax (``eq``/``all``/``where`` over ``B x H x q x k``), which made one
  training layer 6-8% slower (t5, diet_rel, diet_abs at 30 and 120 tokens). CUDA's
  memory-efficient kernel does differentiate the mask, so GPUs keep the fused path.

The incremental cache keeps fairseq's layout (``prev_key``/``prev_value`` as
``(batch, heads, len, head_dim)``, ``prev_key_padding_mask``), so the inherited
``reorder_incremental_state`` reorders it for beam search. Queries of a step are the last
``q_len`` of the ``k_len`` cached positions: ``q_offset = k_len - q_len``.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from .encodings.base import PositionEncoding, PositionMemo

#: Stands in for "no position term" in layers left plain by ``--pos-layers first``.
NO_POSITION = PositionEncoding()


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


class PositionalMultiheadAttention(MultiheadAttention):
    """Position-aware self-attention. The stack calls :meth:`attach` once after building.

    The encoding module is owned (registered) by the stack, which may share one module
    between layers; this layer holds a plain reference so parameters are not duplicated.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        q_noise: float = 0.0,
        qn_block_size: int = 8,
    ) -> None:
        super().__init__(
            embed_dim,
            num_heads,
            dropout=dropout,
            self_attention=True,
            q_noise=q_noise,
            qn_block_size=qn_block_size,
        )
        self.attach(None, PositionMemo())

    def attach(self, encoding: Optional[PositionEncoding], memo: PositionMemo,
               extra_biases: Sequence[PositionEncoding] = ()) -> None:
        """``encoding`` None: no position term in this layer (``--pos-layers first``).
        ``extra_biases``: further content-free logit terms, e.g. segment attention."""
        # Plain attributes (not submodules): see the class docstring.
        self.__dict__["position"] = NO_POSITION if encoding is None else encoding
        self.__dict__["memo"] = memo
        self.__dict__["extra_biases"] = tuple(extra_biases)

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
        position: PositionEncoding = self.position
        memo: PositionMemo = self.memo
        tgt_len, bsz, _ = query.shape

        def split_heads(x: Tensor) -> Tensor:  # (T, B, C) -> (B, H, T, d_h)
            return x.view(x.size(0), bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

        # Absolute encodings count the positions of the self-attention input's real tokens.
        input_padding_mask = key_padding_mask
        kv_input = position.project_sequence(query, key_padding_mask, memo)
        if kv_input is None:
            kv_input = query
        else:  # keys are projections over real tokens: none of them is padding
            key_padding_mask = None
        q = split_heads(self.q_proj(query)) * (self.scaling * position.content_scale)
        k = split_heads(self.k_proj(kv_input))
        v = split_heads(self.v_proj(kv_input))
        q, k = position.rotate_qk(q, k, self._cached_length(incremental_state), memo)
        if incremental_state is not None:
            k, v, key_padding_mask = self._extend_cache(incremental_state, k, v, key_padding_mask)
            input_padding_mask = key_padding_mask
        src_len = k.size(2)
        q_offset = src_len - tgt_len

        mask: Optional[Tensor] = None
        for term in (position, *self.extra_biases):
            bias = term.logit_bias(q, k, q_offset, memo, input_padding_mask)
            if bias is not None:
                mask = bias if mask is None else mask + bias
        if attn_mask is not None:
            mask = attn_mask.to(q.dtype) if mask is None else mask + attn_mask.to(q.dtype)
        if key_padding_mask is not None:
            pad = key_padding_mask.to(torch.bool).view(bsz, 1, 1, src_len)
            mask = (torch.zeros_like(pad, dtype=q.dtype) if mask is None else mask)
            mask = mask.masked_fill(pad, float("-inf"))
        if mask is not None:
            mask = mask.to(q.dtype)
            if mask.dim() < 4:
                mask = mask.view((1,) * (4 - mask.dim()) + mask.shape)

        need_weights = need_weights or need_head_weights
        scale = position.logit_scale(tgt_len, src_len, q_offset, memo)
        content = position.content_logits(q, k, q_offset, memo)
        probs: Optional[Tensor] = None
        explicit = (position.has_value_term or need_weights or tgt_len == 1
                    or scale is not None or content is not None
                    or (mask is not None and mask.requires_grad and q.device.type == "cpu"))
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
            # fairseq's utils.softmax works in float32 (fp16 safety) but would also round
            # float64 down; keep at least float32 and never less than the input.
            probs = torch.softmax(logits, dim=-1, dtype=torch.promote_types(
                logits.dtype, torch.float32)).type_as(logits)
            if unattended is not None:
                probs = probs.masked_fill(unattended, 0.0)
            dropped = self.dropout_module(probs)
            out = torch.matmul(dropped, v)
            if position.has_value_term:
                out = out + position.value_term(dropped, q_offset, memo)
        else:
            apply_dropout = self.training or self.dropout_module.apply_during_inference
            out = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=mask,
                dropout_p=self.dropout_module.p if apply_dropout else 0.0,
                scale=1.0,  # q is already scaled, as the position terms expect
            )
        out = self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim))

        weights: Optional[Tensor] = None
        if need_weights and probs is not None:
            weights = probs.transpose(0, 1)  # (H, B, q, k), fairseq's per-head layout
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return out, weights

    def _cached_length(
        self, incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]]
    ) -> int:
        if incremental_state is None:
            return 0
        prev_key = self._get_input_buffer(incremental_state).get("prev_key")
        return 0 if prev_key is None else prev_key.size(2)

    def _extend_cache(
        self,
        incremental_state: Dict[str, Dict[str, Optional[Tensor]]],
        k: Tensor,
        v: Tensor,
        key_padding_mask: Optional[Tensor],
    ) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        saved = self._get_input_buffer(incremental_state)
        prev_key, prev_value = saved.get("prev_key"), saved.get("prev_value")
        if prev_key is not None and prev_value is not None:
            k = torch.cat([prev_key, k], dim=2)
            v = torch.cat([prev_value, v], dim=2)
        key_padding_mask = MultiheadAttention._append_prev_key_padding_mask(
            key_padding_mask=key_padding_mask,
            prev_key_padding_mask=saved.get("prev_key_padding_mask"),
            batch_size=k.size(0),
            src_len=k.size(2),
            static_kv=False,
        )
        saved["prev_key"], saved["prev_value"] = k, v
        saved["prev_key_padding_mask"] = key_padding_mask
        self._set_input_buffer(incremental_state, saved)
        return k, v, key_padding_mask
