"""One attention layer run forward and backward, to compare two kernel choices."""

from __future__ import annotations

import torch


def layer_run(attn, x, causal, padding, need_weights=False):
    """One call of ``attn`` over ``x`` (``need_weights``: the explicit path on every
    device); the real rows' outputs and every parameter's gradient of their sum of squares."""
    T = x.size(0)
    mask = (torch.triu(torch.full((T, T), float("-inf"), dtype=x.dtype, device=x.device), 1)
            if causal else None)
    params = [p for p in (*attn.parameters(), *attn.encoding.parameters())]
    for p in params:
        p.grad = None
    with attn.scope.open():
        out, _ = attn(x, x, x, key_padding_mask=padding, attn_mask=mask,
                      need_weights=need_weights)
    rows = ~padding.t()  # padded queries' outputs are never used
    (out[rows] ** 2).sum().backward()
    return out[rows].detach(), [p.grad.clone() if p.grad is not None else None for p in params]
