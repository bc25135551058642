"""The kind of term that carries keys to the query through transforms read from the layer's
input, one per position on the way: :class:`PathTransforms` (PaTH). The products, blockwise,
are :mod:`..path_products`."""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import outputs
from ..base import PositionEncoding
from ..gate_sums import gate_bias, gate_sums, step_gate_bias
from ..path_products import keys_to_end, pad_cached, path_logits, step_keys
from .facts import KindFacts, PositionKind, to_implement
from .operands import LogitTerms, Operands

#: The key, in a layer's incremental buffer, of the short convolution's last inputs.
CACHE_KEY = "prev_path_inputs"


class PathRead(NamedTuple):
    """What a call reads of the layer's input: ``w`` ``(B, H, T, d_h)`` and ``beta`` ``(B,
    H, T)`` of its new positions (``beta = 0`` at padding), and the forget gate's cumulative
    sums of every key (``(B, H, k_len)``, or None)."""

    w: Tensor
    beta: Tensor
    sums: Optional[Tensor]


class PathTransforms(PositionEncoding):
    """``logit(i, j) = q_i^T H_i ... H_{j+1} k_j`` with ``H_t = I - beta_t w_t w_t^T`` read
    from the layer's input at ``t``: causal only. A full call computes the products
    blockwise; the cache keeps every key carried to the latest position, so a decoding
    step applies its one ``H_t`` to the cached keys (a rank-1 update) and appends its own
    key, and reads plain ``q.k``. The transforms read the last :attr:`window` positions'
    :meth:`path_inputs` (a short convolution), whose latest ``window - 1`` the cache keeps;
    a padded position's inputs are 0 and its ``beta`` is 0 (it transforms nothing). With
    :attr:`forget_gate`, FoX's bias ``c_i - c_j`` from :meth:`log_gates` too."""

    facts = KindFacts(PositionKind.PATH, needs_logits=True, reads_content=True,
                      reads_input=True, rewrites_cached_keys=True, causal_only=True)
    methods = ("path_inputs", "transforms")
    #: Positions each transform reads (the convolution's width).
    window: int = 1
    #: Whether the term adds FoX's forget-gate bias (then it implements ``log_gates``).
    forget_gate: bool = False
    bidirectional = False  # the forget gate's sums (:mod:`..gate_sums`) are causal

    @to_implement
    def path_inputs(self, x: Tensor) -> Tensor:
        """``(B, T, C')``: what the transforms read of each position of ``x`` (``(T, B,
        C)``)."""
        raise NotImplementedError

    @to_implement
    def transforms(self, inputs: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """``w`` ``(B, H, T, d_h)`` of unit norm and ``beta`` ``(B, H, T)`` of the ``T``
        positions of ``x``, from ``inputs`` ``(B, window - 1 + T, C')``: their
        :meth:`path_inputs` preceded by those of the ``window - 1`` positions before (zeros
        before the sequence)."""
        raise NotImplementedError

    def log_gates(self, x: Tensor) -> Tensor:
        """With :attr:`forget_gate`: ``(B, H, T)`` ``log f_t``, at least float32."""
        raise NotImplementedError

    def read_input(self, x: Tensor, key_padding_mask: Optional[Tensor],
                   saved: Optional[dict], heads: int) -> PathRead:
        """The transforms of this call's positions, the convolution's state carried in the
        cache."""
        inputs = self.path_inputs(x)
        if key_padding_mask is not None:
            inputs = inputs.masked_fill(key_padding_mask.to(torch.bool)[..., None], 0.0)
        before = None if saved is None else saved.get(CACHE_KEY)
        if before is None:
            before = F.pad(inputs[:, :0], (0, 0, self.window - 1, 0))
        inputs = torch.cat([before.to(inputs.dtype), inputs], dim=1)
        if saved is not None:
            saved[CACHE_KEY] = inputs[:, inputs.size(1) - (self.window - 1):]
        w, beta = self.transforms(inputs, x)
        batch, length = x.size(1), x.size(0)
        w = outputs.TRANSFORM_VECTORS.check(self, w, (batch, heads, length, None))
        beta = outputs.TRANSFORM_BETAS.check(self, beta, (batch, heads, length))
        if key_padding_mask is not None:
            beta = beta.masked_fill(key_padding_mask.to(torch.bool)[:, None, :], 0.0)
        sums = (gate_sums(self, x, key_padding_mask, saved, heads)
                if self.forget_gate else None)
        return PathRead(w, beta, sums)

    def add_to_logits(self, logits: LogitTerms, a: Operands) -> None:
        read: PathRead = a.read[self]
        if not a.step:  # a step reads q.k of keys the cache has carried to it
            q = F.pad(a.q, (0, 0, a.q_offset, 0))
            w, beta = pad_cached(read.w.to(a.q.dtype), read.beta.to(a.q.dtype), a.q_offset)
            logits.replace(path_logits(q, a.k, w, beta)[:, :, a.q_offset:])
        if read.sums is not None:
            heads = a.q.size(1)
            logits.add(step_gate_bias(read.sums, heads) if a.step
                       else gate_bias(read.sums, heads, a.q_len, False))

    def cache_keys(self, k: Tensor, read: PathRead) -> Tensor:
        """The keys the cache keeps after a call: ``k`` (the cached keys, carried to the
        position before the call, then the call's) carried to its last position."""
        new = read.w.size(2)
        w, beta = read.w.to(k.dtype), read.beta.to(k.dtype)
        if new == 1:
            return torch.cat([step_keys(k[:, :, :-1], w, beta), k[:, :, -1:]], dim=2)
        w, beta = pad_cached(w, beta, k.size(2) - new)
        return keys_to_end(k, w, beta)
