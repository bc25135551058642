"""A compiled kernel runs by default only where it has computed the right numbers.

Triton compiles a kernel for the GPU and the Triton release at hand, and the tests can
only vouch for the ones they ran on. So before an ``"auto"`` choice uses a fused kernel on
a device and dtype, :func:`verified` runs it once per process on a small problem there and
compares it with the path it replaces, outputs and gradients, in float32, within
:data:`TOLERANCE` of the largest reference value. One check per family (:data:`CHECKS`),
run where a model first uses the family, with the variants its training compiles, so the
check costs little more than the compilation the first training step does anyway:

* ``"distance"``, ``"distance_factor"``, ``"clipped"``, ``"rows"`` -- 2 sentences, 2 heads,
  80 tokens (two tiles, the last partial), padding, bidirectional and causal, against the
  softmax written out: a table per head as a summand (head dimensions 64 and 128) or a
  factor, Shaw's terms (``k = 16``), the content terms by distance on both sides;
  ``"<family> dropout"`` the same with ``p = 0.1`` and the kernels' own mask
  (:func:`~fairseq_posenc.core.kernels.distance.dropout_keep`);
* ``"rotary"`` -- 2 x 2 x 80 positions, head dimension 64, against the complex64 rotation.

A failure to compile or a wrong number is a warning and the replaced path for the rest of
the process (:data:`FALLBACKS`), not a crashed or silently wrong training run.
"""

from __future__ import annotations

import functools
import warnings
from typing import Callable, Iterable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from ..context import KernelFamily
from ..positions import expand_distance_bias, rotate_pairs
from .distance import (
    clipped_relative_attention,
    distance_attention,
    distance_rows_attention,
    dropout_keep,
)
from .rotary import rotate

#: Largest error allowed, relative to the largest reference value: probabilities are
#: rounded to the input dtype for the products (bf16: 8 bits).
TOLERANCE = 3e-2

_VERDICTS: dict[tuple[KernelFamily, bool, str, torch.dtype], bool] = {}


def verified(family: KernelFamily, dropout: bool, device: torch.device,
             dtype: torch.dtype) -> bool:
    """Whether ``family`` (with ``dropout``: its dropout variant; a key of :data:`CHECKS`)
    agreed with the path it replaces on ``device`` in ``dtype`` (checked once per
    process)."""
    key = (family, dropout, str(device), dtype)
    if key not in _VERDICTS:
        _VERDICTS[key] = self_check(family, dropout, device, dtype)
    return _VERDICTS[key]


def self_check(family: KernelFamily, dropout: bool, device: torch.device,
               dtype: torch.dtype) -> bool:
    """Run the check of ``family`` (``dropout``: its dropout variant); warn and return
    False on an error or a disagreement."""
    name = f"{family.value}{' dropout' if dropout else ''}"
    try:
        with torch.enable_grad():
            problem = CHECKS[family, dropout](device, dtype)
    except Exception as error:  # a compile or launch failure: fall back, say why
        problem = f"it failed to run: {error!r:.300}"
    if problem is None:
        return True
    warnings.warn(
        f"fairseq-posenc: the fused {name} kernel is not used on {device} in {dtype}: "
        f"{problem}. {FALLBACKS[family]} instead (same numbers, slower). Please report it "
        "with your GPU, torch and triton versions.", RuntimeWarning, stacklevel=3)
    return False


def _outputs_and_grads(fn: Callable[..., Tensor], inputs: list[Tensor],
                       weights: Tensor) -> list[Tensor]:
    out = fn(*inputs)
    return [out, *torch.autograd.grad((out.float() * weights).sum(), inputs)]


def _disagreement(names: Iterable[str], got: list[Tensor], ref: list[Tensor],
                  what: str) -> Optional[str]:
    for name, a, b in zip(names, got, ref):
        err = float((a.float() - b.float()).abs().max())
        scale = float(b.float().abs().max())
        if not err <= TOLERANCE * scale:
            return f"its {name} is off by {err:.3g} (largest value {scale:.3g}; {what})"
    return None


#: The dropout probability of the ``"<family> dropout"`` checks, and their seed.
CHECK_DROPOUT = 0.1
SEED = 12345


def _dropout(device: torch.device, dropout_p: float) -> tuple[Optional[Tensor],
                                                               Optional[Tensor]]:
    """The seed the kernels get and the mask they draw from it, ``(B, H, T, T)``; None
    without dropout."""
    if not dropout_p:
        return None, None
    seed = torch.tensor([SEED], dtype=torch.int64, device=device)
    return seed, dropout_keep(seed, BATCH, HEADS, LENGTH, LENGTH, dropout_p)


def _dropped(probs: Tensor, keep: Optional[Tensor], dropout_p: float) -> Tensor:
    return probs if keep is None else probs * keep.to(probs.dtype) / (1 - dropout_p)


def _softmax_written_out(q: Tensor, k: Tensor, v: Tensor, table: Tensor, padding: Tensor,
                         causal: bool, factor: bool, keep: Optional[Tensor] = None,
                         dropout_p: float = 0.0) -> Tensor:
    length = q.size(2)
    term = expand_distance_bias(table, -(length - 1), length, length, 0)
    logits = q @ k.transpose(-1, -2)
    logits = logits * term if factor else logits + term
    blocked = padding[:, None, None, :]
    if causal:
        blocked = blocked | torch.ones(length, length, dtype=torch.bool,
                                       device=q.device).triu(1)
    probs = torch.softmax(logits.masked_fill(blocked, float("-inf")), dim=-1)
    return _dropped(probs, keep, dropout_p) @ v


BATCH, HEADS, LENGTH = 2, 2, 80


def _padding(device: torch.device) -> Tensor:
    padding = torch.zeros(BATCH, LENGTH, dtype=torch.bool, device=device)
    padding[0, -3:] = True  # every row still sees a key, with the causal mask too
    return padding


def check_distance(device: torch.device, dtype: torch.dtype,
                   variants=((False, 64), (False, 128)), dropout_p: float = 0.0
                   ) -> Optional[str]:
    """A table per head as a summand (``variants``: ``(factor, d_qk)``)."""
    g = torch.Generator().manual_seed(0)
    batch, heads, length = BATCH, HEADS, LENGTH
    padding = _padding(device)
    seed, keep = _dropout(device, dropout_p)
    for factor, d_qk in variants:
        for causal in (False, True):
            q, k, v = (torch.randn(batch, heads, length, d, generator=g)
                       for d in (d_qk, d_qk, 64))
            table = torch.randn(heads, 2 * length - 1, generator=g)
            inputs = [x.to(device, dtype).requires_grad_()
                      for x in (q / d_qk ** 0.5, k, v, table)]
            weights = torch.randn(batch, heads, length, 64, generator=g).to(device)
            got = _outputs_and_grads(
                lambda q, k, v, t: distance_attention(q, k, v, t, -(length - 1), 0, padding,
                                                      causal, factor, dropout_p, seed),
                inputs, weights)
            ref = _outputs_and_grads(
                lambda q, k, v, t: _softmax_written_out(q, k, v, t, padding, causal, factor,
                                                        keep, dropout_p),
                [x.detach().float().requires_grad_() for x in inputs], weights)
            what = (f"{'causal' if causal else 'bidirectional'}, "
                    f"{'factor' if factor else 'summand'}, d_qk {d_qk}")
            problem = _disagreement(("output", "dq", "dk", "dv", "d_table"), got, ref, what)
            if problem:
                return problem
    return None


def check_distance_factor(device: torch.device, dtype: torch.dtype,
                          dropout_p: float = 0.0) -> Optional[str]:
    """A table per head as a factor of ``q.k``."""
    return check_distance(device, dtype, variants=((True, 64),), dropout_p=dropout_p)


def _shaw_written_out(q: Tensor, k: Tensor, v: Tensor, a_key: Tensor, a_value: Tensor,
                      padding: Tensor, causal: bool, r_lo: int, keep: Optional[Tensor] = None,
                      dropout_p: float = 0.0) -> Tensor:
    length, rows = q.size(2), a_key.size(0)
    positions = torch.arange(length, device=q.device)
    r = positions[None, :] - positions[:, None]  # j - i
    clipped = r.clamp(r_lo, r_lo + rows - 1) - r_lo
    one_hot = F.one_hot(clipped, rows).to(q.dtype)  # (i, j, c)
    logits = q @ k.transpose(-1, -2) + torch.einsum("bhic,ijc->bhij", q @ a_key.t(), one_hot)
    blocked = padding[:, None, None, :]
    if causal:
        blocked = blocked | (r > 0)
    p = _dropped(torch.softmax(logits.masked_fill(blocked, float("-inf")), dim=-1), keep,
                 dropout_p)
    return p @ v + torch.einsum("bhij,ijc->bhic", p, one_hot) @ a_value


def check_clipped(device: torch.device, dtype: torch.dtype,
                  dropout_p: float = 0.0) -> Optional[str]:
    """Shaw's terms by clipped distance, keys and values, ``k = 16``."""
    g = torch.Generator().manual_seed(0)
    padding = _padding(device)
    seed, keep = _dropout(device, dropout_p)
    batch, heads, length, d_h, clip = BATCH, HEADS, LENGTH, 64, 16
    for causal in (False, True):
        rows = clip + 1 if causal else 2 * clip + 1
        shapes = [(batch, heads, length, d_h)] * 3 + [(rows, d_h)] * 2
        inputs = [x.to(device, dtype).requires_grad_() for x in (
            torch.randn(*shape, generator=g) / (d_h ** 0.5 if i in (0, 3, 4) else 1)
            for i, shape in enumerate(shapes))]
        weights = torch.randn(batch, heads, length, d_h, generator=g).to(device)

        def fused(q, k, v, a_key, a_value):
            out, by_distance = clipped_relative_attention(q, k, v, q @ a_key.t(), -clip, 0,
                                                          padding, causal, True, dropout_p,
                                                          seed)
            return out + by_distance.to(out.dtype) @ a_value

        got = _outputs_and_grads(fused, inputs, weights)
        ref = _outputs_and_grads(
            lambda *x: _shaw_written_out(*x, padding, causal, -clip, keep, dropout_p),
            [x.detach().float().requires_grad_() for x in inputs], weights)
        problem = _disagreement(("output", "dq", "dk", "dv", "d_key_table", "d_value_table"),
                                got, ref, f"Shaw, {'causal' if causal else 'bidirectional'}")
        if problem:
            return problem
    return None


def _rows_written_out(q: Tensor, k: Tensor, v: Tensor, x_q: Tensor, a_q: Tensor,
                      x_k: Tensor, a_k: Tensor, padding: Tensor, causal: bool,
                      keep: Optional[Tensor] = None, dropout_p: float = 0.0) -> Tensor:
    length = q.size(2)
    positions = torch.arange(length, device=q.device)
    r = positions[None, :] - positions[:, None]  # j - i
    c = (r + length - 1).clamp(max=a_q.size(-1) - 1)  # only causally masked pairs clamp
    logits = (q @ k.transpose(-1, -2) + (x_q @ a_q).gather(-1, c.expand(*q.shape[:2], -1, -1))
              + (x_k @ a_k).transpose(-1, -2).gather(-2, c.expand(*q.shape[:2], -1, -1)))
    blocked = padding[:, None, None, :]
    if causal:
        blocked = blocked | (r > 0)
    probs = torch.softmax(logits.masked_fill(blocked, float("-inf")), dim=-1)
    return _dropped(probs, keep, dropout_p) @ v


def check_rows(device: torch.device, dtype: torch.dtype,
               dropout_p: float = 0.0) -> Optional[str]:
    """Content terms by distance: query and key rows (Huang 4), head dimension 64."""
    g = torch.Generator().manual_seed(0)
    padding = _padding(device)
    seed, keep = _dropout(device, dropout_p)
    batch, heads, length, d_h = BATCH, HEADS, LENGTH, 64
    for causal in (False, True):
        rows = length if causal else 2 * length - 1
        shapes = [(batch, heads, length, d_h)] * 4 + [(heads, d_h, rows),
                                                      (batch, heads, length, d_h),
                                                      (heads, d_h, rows)]
        inputs = [x.to(device, dtype).requires_grad_() for x in (
            torch.randn(*shape, generator=g) / (d_h ** 0.5 if i != 2 else 1)
            for i, shape in enumerate(shapes))]
        weights = torch.randn(batch, heads, length, d_h, generator=g).to(device)

        def fused(q, k, v, x_q, a_q, x_k, a_k):
            return distance_rows_attention(q, k, v, (x_q, a_q), -(length - 1), 0, padding,
                                           causal, (x_k, a_k), dropout_p, seed)

        got = _outputs_and_grads(fused, inputs, weights)
        ref = _outputs_and_grads(
            lambda *x: _rows_written_out(*x, padding, causal, keep, dropout_p),
            [x.detach().float().requires_grad_() for x in inputs], weights)
        problem = _disagreement(("output", "dq", "dk", "dv", "dx_q", "dA_q", "dx_k", "dA_k"),
                                got, ref, f"rows, {'causal' if causal else 'bidirectional'}")
        if problem:
            return problem
    return None


def check_rotary(device: torch.device, dtype: torch.dtype) -> Optional[str]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 2, 80, 64, generator=g).to(device, dtype).requires_grad_()
    theta = 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    angles = torch.arange(80, dtype=torch.float64)[:, None] * theta
    rotation = torch.polar(torch.ones_like(angles), angles).to(torch.complex64).to(device)
    weights = torch.randn(2, 2, 80, 64, generator=g).to(device)
    got = _outputs_and_grads(lambda x: rotate(x, rotation), [x], weights)
    ref = _outputs_and_grads(lambda x: rotate_pairs(x, rotation),
                             [x.detach().clone().requires_grad_()], weights)
    return _disagreement(("output", "dx"), got, ref, "80 positions, d_h 64")


#: One check per family of kernel variants and dropout (``(family, dropout)``), so that a
#: model compiles only what it uses; the families are those terms declare
#: (:class:`~fairseq_posenc.core.context.FusedKernel`).
_CHECKS: dict[KernelFamily, Callable[..., Optional[str]]] = {
    KernelFamily.DISTANCE: check_distance,
    KernelFamily.DISTANCE_FACTOR: check_distance_factor,
    KernelFamily.CLIPPED: check_clipped,
    KernelFamily.ROWS: check_rows,
    KernelFamily.ROTARY: check_rotary,
}
CHECKS: dict[tuple[KernelFamily, bool], Callable[[torch.device, torch.dtype], Optional[str]]] = {
    (family, False): check for family, check in _CHECKS.items()}
CHECKS.update({(family, True): functools.partial(_CHECKS[family], dropout_p=CHECK_DROPOUT)
               for family in _CHECKS if family is not KernelFamily.ROTARY})
FALLBACKS = {
    KernelFamily.DISTANCE: "Distance biases run as (B, H, T, T) tensors",
    KernelFamily.DISTANCE_FACTOR: "Distance factors run on the explicit path",
    KernelFamily.CLIPPED: "Shaw's terms run on the explicit path",
    KernelFamily.ROWS: "Transformer-XL's and Huang et al.'s method 4's terms run as "
                       "(B, H, T, T) biases",
    KernelFamily.ROTARY: "RoPE rotates q and k in complex64",
}
