"""A compiled kernel runs by default only where it has computed the right numbers.

Triton compiles a kernel for the GPU and the Triton release at hand, and the tests can
only vouch for the ones they ran on. So before ``distance_kernel="auto"`` uses the fused
distance-bias kernel on a device and dtype, it runs it once on a small attention (2
sentences, 2 heads, 80 tokens: two tiles, the last one partial; padding; with and
without the causal mask; head dimensions 64 and 128, i.e. with a concatenated low-rank
term) and compares outputs and gradients with ``scaled_dot_product_attention`` over the
bias written out, in float32. A failure to compile or a wrong number is a warning and the
bias path for the rest of the process, not a crashed or silently wrong training run.
The variants checked are the ones compiled for training, so the check costs little more
than the compilation that the first training step would do anyway.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor

from ..positions import expand_distance_bias
from .distance_bias import distance_bias_attention

#: Largest error allowed, relative to the largest reference value: probabilities are
#: rounded to the input dtype for the products (bf16: 8 bits).
TOLERANCE = 3e-2

_VERDICTS: dict[tuple[str, torch.dtype], bool] = {}


def verified(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the fused kernel agreed with the reference on ``device`` in ``dtype``
    (checked once per process)."""
    key = (str(device), dtype)
    if key not in _VERDICTS:
        _VERDICTS[key] = self_check(device, dtype)
    return _VERDICTS[key]


def _reference(q: Tensor, k: Tensor, v: Tensor, table: Tensor, padding: Tensor,
               causal: bool) -> Tensor:
    length = q.size(2)
    mask = expand_distance_bias(table.float(), -(length - 1), length, length, 0)[None]
    blocked = padding[:, None, None, :]
    if causal:
        blocked = blocked | torch.ones(length, length, dtype=torch.bool,
                                       device=q.device).triu(1)
    mask = mask.masked_fill(blocked, float("-inf"))
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                          scale=1.0)


def self_check(device: torch.device, dtype: torch.dtype) -> bool:
    """Run the kernel's training variants against the reference; warn and return False on
    an error or a disagreement."""
    g = torch.Generator().manual_seed(0)
    batch, heads, length = 2, 2, 80
    for causal in (False, True):
        for d_qk in (64, 128):
            q, k, v = (torch.randn(batch, heads, length, d, generator=g)
                       for d in (d_qk, d_qk, 64))
            table = torch.randn(heads, 2 * length - 1, generator=g)
            inputs = [x.to(device, dtype).requires_grad_()
                      for x in (q / d_qk ** 0.5, k, v, table)]
            padding = torch.zeros(batch, length, dtype=torch.bool, device=device)
            padding[0, :3] = True  # every row still sees a key
            weights = torch.randn(batch, heads, length, 64, generator=g).to(device)
            variant = f"{'causal' if causal else 'bidirectional'}, d_qk {d_qk}"
            try:
                with torch.enable_grad():
                    out = distance_bias_attention(*inputs[:3], inputs[3], -(length - 1),
                                                  0, padding, causal)
                    got = [out, *torch.autograd.grad((out.float() * weights).sum(), inputs)]
                    ref_in = [x.detach().float().requires_grad_() for x in inputs]
                    ref_out = _reference(*ref_in, padding, causal)
                    ref = [ref_out, *torch.autograd.grad((ref_out * weights).sum(), ref_in)]
            except Exception as error:  # a compile or launch failure: fall back, say why
                _warn(device, dtype, f"it failed to run ({variant}): {error!r:.300}")
                return False
            for name, a, b in zip(("output", "dq", "dk", "dv", "d_table"), got, ref):
                err = float((a.float() - b).abs().max())
                scale = float(b.abs().max())
                if not err <= TOLERANCE * scale:
                    _warn(device, dtype, f"its {name} is off by {err:.3g} (largest value "
                          f"{scale:.3g}; {variant})")
                    return False
    return True


def _warn(device: torch.device, dtype: torch.dtype, why: str) -> None:
    warnings.warn(
        f"fairseq-posenc: the fused distance-bias kernel is not used on {device} in "
        f"{dtype}: {why}. Distance biases run as a (B, H, T, T) bias instead (same "
        "numbers, slower). Please report it with your GPU, torch and triton versions.",
        RuntimeWarning, stacklevel=3)
