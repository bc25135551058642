"""``cope``: Contextual Position Encoding (Golovneva, Wang, Weston and Sukhbaatar 2024,
arXiv 2405.18719, "Contextual Position Encoding: Learning to Count What's Important",
section 3).

Positions are counted by the model: a gate per query and key, ``g_ij = sigmoid(q_i.k_j)``,
and the position of key ``j`` for query ``i`` is the sum of the gates between them,
``p_ij = sum_{t=j..i} g_it``. Fractional positions interpolate between the learned
embeddings of the two integer positions around them, and

    e_ij = q_i.k_j + q_i.e[p_ij],
    q_i.e[p] = (p - floor p) z_i[ceil p] + (1 - p + floor p) z_i[floor p],  z_i[m] = q_i.e[m]

(the paper computes ``z_i`` for the integer positions once and interpolates the logits, the
same number as interpolating the embeddings). Positions are clamped to ``p_max = npos - 1``
(``--cope-npos``; default the stack's max positions + 1, the authors' block size + 1, so a
sentence within the max positions is never clamped).

As the authors' code (facebookresearch/RAM, ``projects/cope``): the gates read the
attention's own keys and scaled logits, ``g_ij = sigmoid(q_i.k_j / sqrt(d_h))`` (this
module receives ``q`` already scaled), and the position term is scaled with the content
logit, ``(q_i.k_j + q_i.e[p_ij]) / sqrt(d_h)``; one table ``e`` of ``npos`` vectors of size
``d_h`` per layer, shared by the heads (``--cope-shared``: one per stack, shared by its
layers too, the authors' ``--cope-shared``), starting at 0; positions in float32 at least
(a sum of up to ``n`` gates must keep its fraction in half precision too).

It reads content and replaces ``q_i.k_j``: a ``CONTENT_LOGITS`` term. The planner gives it
the explicit path (logits written out): the gates are the logits themselves, computed
once. A decoding step costs ``O(t)`` per head: the gates of its own row over the cached
keys, their sum from the right, and ``z`` for the ``t + 2`` integer positions that row can
reach. Nothing is cached across steps (the positions depend on the content).

Memory: the gates, their counts, the interpolation weights, the indices of the two integer
positions and the interpolated logits are each a ``(B, H, q_len, k_len)`` tensor, and
autograd would keep most of them for the backward. Every one of them is computed row by
row, so a call of more than :data:`BLOCK_PAIRS` pairs is computed in blocks of queries
(:func:`query_block`), each under activation checkpointing where autograd records: its
intermediates are freed once its logits are out and recomputed, block by block, in the
backward. The extra memory is then that of one block, ``O(block x k_len)`` per head,
beside the logits the explicit path writes anyway; the numbers are the same
(``docs/decisions.md``, "CoPE in blocks of queries").

Deviations:

* Encoder (bidirectional; the paper's model is causal): the gates are summed in both
  directions from the query, and a key after it gets the negative count:
  ``p_ij = sum_{t=j..i} g_it`` for ``j <= i`` and ``p_ij = -sum_{t=i..j} g_it`` for
  ``j > i`` (the query's own gate counted on both sides, as the paper counts it on its
  one). The table covers ``-(npos - 1) .. npos - 1`` (``2 npos - 1`` vectors), so keys on
  the two sides get their own embeddings; in the decoder it is the paper's ``0 .. npos -
  1``.
* Padding is not gated out: fairseq pads a row on one side only, so no pad lies between a
  query and a real key, and the positions of real tokens are those of the sentence alone.
"""

from __future__ import annotations

from typing import Annotated, Optional

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..context import PositionContext
from .kinds import ContentLogits
from .options import Option
from .registry import register_encoding


#: The pairs (batch x heads x queries x keys) above which a call's logits are computed in
#: blocks of queries: 2^24, about 1 GB of intermediates per block in float32 (the
#: recomputation a block costs in the backward is paid only past it).
BLOCK_PAIRS = 2 ** 24


def query_block(batch_heads: int, q_len: int, k_len: int) -> int:
    """The queries per block for ``batch_heads`` rows of ``q_len`` queries over ``k_len``
    keys: all of them within :data:`BLOCK_PAIRS`, else as many as fit it (at least 1)."""
    return max(1, min(q_len, BLOCK_PAIRS // max(1, batch_heads * k_len)))


def contextual_positions(gates: Tensor, q_offset: int, causal: bool) -> Tensor:
    """``p_ij`` from the gates ``(..., q_len, k_len)`` of queries at ``q_offset + i``:
    ``sum_{t=j..i} g_it`` for ``j <= i``; for ``j > i`` (bidirectional only)
    ``-sum_{t=i..j} g_it`` (causal: any finite value, those keys are masked)."""
    q_len, k_len = gates.shape[-2:]
    key = torch.arange(k_len, device=gates.device)
    query = torch.arange(q_offset, q_offset + q_len, device=gates.device)[:, None]
    before = key <= query  # (q_len, k_len): t <= i
    left = (gates * before).flip(-1).cumsum(-1).flip(-1)  # sum over t in [j, i]
    if causal:
        return left
    right = (gates * (key >= query)).cumsum(-1)  # sum over t in [i, j]
    return torch.where(before, left, -right)


@register_encoding
class CoPE(ContentLogits):
    name = "cope"

    def __init__(
        self, *, head_dim: int, causal: bool, max_positions: int,
        cope_npos: Annotated[Optional[int], Option(
            "number of position embeddings, p_max + 1; contextual positions beyond p_max "
            "are clamped to it (default: --max-source-positions / --max-target-positions "
            "+ 1, the authors' block size + 1)", minimum=2, metavar="N",
            hint="Positions 0 and 1 at least; leave it unset for the default.")] = None,
        cope_shared: Annotated[bool, Option(
            "one table of position embeddings per stack, shared by its layers (the "
            "authors' --cope-shared; default: one per layer)")] = False,
    ) -> None:
        super().__init__()
        npos = cope_npos or max_positions + 1
        self.npos = npos
        self.causal = causal
        #: The table's first position: 0, or -(npos - 1) in the encoder.
        self.p_lo = 0 if causal else -(npos - 1)
        self.pos_emb = nn.Parameter(torch.zeros(head_dim, npos - self.p_lo))

    @classmethod
    def random_positions_refusal(cls, values) -> Optional[str]:
        return ("its positions are counts of gates along each row (contextual positions), "
                "not token positions, so there are none to draw; train cope without it")

    @classmethod
    def shares_layers(cls, values) -> bool:
        return values["cope_shared"]

    def position_range(self, k_len: int) -> tuple[int, int]:
        """The integer positions ``k_len`` keys can reach: ``|p_ij| <= k_len``, within the
        table."""
        return max(self.p_lo, -k_len), min(self.npos - 1, k_len)

    def position_logits(self, q: Tensor, lo: int, hi: int) -> Tensor:
        """``z[m] = q.e[m]`` for the integer positions ``m = lo..hi``: ``(..., hi - lo + 1)``
        from the (scaled) queries ``(..., d_h)``."""
        table = self.pos_emb[:, lo - self.p_lo: hi - self.p_lo + 1]
        return torch.matmul(q, table.to(q.dtype))

    def content_logits(self, q: Tensor, k: Tensor, q_offset: int,
                       ctx: PositionContext) -> Tensor:
        """``q_i.k_j + q_i.e[p_ij]`` (``q`` scaled), ``(B, H, q_len, k_len)`` in ``q``'s
        dtype; in blocks of :func:`query_block` queries, each recomputed in the backward,
        past :data:`BLOCK_PAIRS` pairs."""
        q_len, k_len = q.size(-2), k.size(-2)
        block = query_block(q[..., 0, 0].numel(), q_len, k_len)
        if block >= q_len:
            return self.block_logits(q, k, q_offset)
        recorded = torch.is_grad_enabled() and (
            q.requires_grad or k.requires_grad or self.pos_emb.requires_grad)
        parts = []
        for start in range(0, q_len, block):
            rows = q[..., start:start + block, :]
            parts.append(checkpoint(self.block_logits, rows, k, q_offset + start,
                                    use_reentrant=False, preserve_rng_state=False)
                         if recorded else self.block_logits(rows, k, q_offset + start))
        return torch.cat(parts, dim=-2)

    def block_logits(self, q: Tensor, k: Tensor, q_offset: int) -> Tensor:
        """:meth:`content_logits` of the queries ``q`` at ``q_offset ..`` in one piece; the
        gates, positions and interpolation in float32 at least."""
        logits = torch.matmul(q, k.transpose(-1, -2))  # q is scaled: q.k / sqrt(d_h)
        exact = torch.promote_types(logits.dtype, torch.float32)
        gates = torch.sigmoid(logits.to(exact))
        positions = contextual_positions(gates, q_offset, self.causal)
        lo, hi = self.position_range(k.size(-2))
        positions = positions.clamp(lo, hi)
        z = self.position_logits(q, lo, hi).to(exact)  # (B, H, q_len, hi - lo + 1)
        floor, ceil = positions.detach().floor(), positions.detach().ceil()
        weight = positions - floor  # differentiable: the gradient reaches the gates
        z_floor = z.gather(-1, (floor - lo).long())
        z_ceil = z.gather(-1, (ceil - lo).long())
        term = z_ceil * weight + z_floor * (1 - weight)
        return (logits.to(exact) + term).to(q.dtype)
