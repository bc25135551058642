"""The fused distance kernels' tests' shared parts: the kernels interpreted where CUDA is
absent, the attention written out in float64 (a table by distance, Shaw's terms by clipped
distance, Transformer-XL's and Huang 4's rows by distance), their configurations, the
drivers that run a kernel and its reference on the same rounded inputs, and the counting of
the fused kernels' calls in layers and models.

Without CUDA the kernels run in Triton's interpreter (``tests/support/interpreted.py``):
it is imported, and :func:`kernel_module` called, before the kernels are used. References
are independent of the kernel: ``softmax(q k^T + table[j - i] + masks) v`` in float64 with
autograd, the padding and causal masks as booleans, and rows that see no key set to zero.
Used by ``tests/core/kernels/`` (``test_gpu.py`` among them) and ``docs/kernels/accuracy.py``.
"""

from __future__ import annotations

import contextlib
import importlib

import torch

from fairseq_posenc.plugin.attention import PositionalMultiheadAttention
from tests.support.interpreted import DEVICE, kernel_module

kernels = kernel_module("distance")
# The modules whose settings and steps the tests replace: the launches, the rows' tables.
kernel_launch, kernel_rows = kernels.launch, kernels.rows


def dropped(probs, keep, dropout_p):
    """Attention dropout as written: the kept probabilities over ``1 - p``, the rest 0."""
    return probs if keep is None else probs * keep.to(probs.dtype) / (1 - dropout_p)


def naive(q, k, v, table, r_lo, q_offset, padding, causal, factor, keep=None, dropout_p=0.0):
    """The attention as written: every logit (``q.k + b`` or ``q.k * b``), a boolean mask,
    a softmax, zeros for rows that see no key; with ``keep``, the probabilities dropped
    where it is False."""
    q_len, k_len = q.size(2), k.size(2)
    i = torch.arange(q_len, device=q.device)[:, None] + q_offset
    j = torch.arange(k_len, device=q.device)[None, :]
    term = table[:, j - i - r_lo]
    logits = q @ k.transpose(-1, -2)
    logits = logits * term if factor else logits + term
    blocked = torch.zeros(q.size(0), 1, q_len, k_len, dtype=torch.bool, device=q.device)
    if padding is not None:
        blocked = blocked | padding[:, None, None, :]
    if causal:
        blocked = blocked | (j > i)
    probs = torch.softmax(logits.masked_fill(blocked, float("-inf")), dim=-1)
    return dropped(probs.nan_to_num(0.0), keep, dropout_p) @ v


# (batch, heads, q_len, k_len, d_qk, d_v, q_offset, causal, table heads, table grad,
#  the table a factor)
CONFIGS = {
    "encoder, left padding": (2, 3, 37, 37, 16, 16, 0, False, 3, True, False),
    "decoder, causal, rows with no key": (2, 2, 70, 70, 16, 16, 0, True, 2, True, False),
    "two tiles, one table for all heads": (2, 2, 130, 130, 16, 16, 0, False, 1, True, False),
    "queries after a cache, extra q.k dims": (2, 2, 5, 80, 72, 64, 75, True, 2, True, False),
    "a fixed table (ALiBi)": (1, 2, 20, 20, 16, 16, 0, False, 2, False, False),
    "a factor (Huang), two tiles": (2, 2, 70, 70, 16, 16, 0, False, 2, True, True),
    "a factor, causal, rows with no key": (2, 2, 40, 40, 16, 16, 0, True, 2, True, True),
}


def keep_mask(batch, heads, q_len, k_len, dropout_p, seed=1234):
    """The kernels' seed and the mask they draw from it, written out (on CPU)."""
    if not dropout_p:
        return None, None
    seed = torch.tensor([seed], dtype=torch.int64, device=DEVICE)
    return seed, kernels.dropout_keep(seed, batch, heads, q_len, k_len, dropout_p).cpu()


def run_both(config, dtype, seed=0, dropout_p=0.0):
    """The kernel in ``dtype`` and the naive softmax in float64 on the same (rounded)
    inputs: outputs and the gradients of q, k, v and the table; with ``dropout_p``, the
    naive softmax drops the probabilities where the kernel's mask does."""
    (batch, heads, q_len, k_len, d_qk, d_v, q_offset, causal, table_heads, table_grad,
     factor) = config
    g = torch.Generator().manual_seed(seed)
    x = [torch.randn(batch, heads, n, d, generator=g, dtype=torch.float64)
         for n, d in ((q_len, d_qk), (k_len, d_qk), (k_len, d_v))]
    x[0] = x[0] / d_qk ** 0.5  # scaled queries, as the attention passes them
    x = [t.to(dtype).double() for t in x]
    r_lo = -(q_offset + q_len - 1) - 2  # a table wider than needed: offsets matter
    table = torch.randn(table_heads, k_len + q_len + 3, generator=g, dtype=torch.float64)
    table = table.to(dtype).double()
    padding = torch.zeros(batch, k_len, dtype=torch.bool)
    if causal:
        padding[0, :4] = True  # a left-padded target: its first rows see only padding
    else:
        padding[0, :5] = True
    weights = torch.randn(batch, heads, q_len, d_v, generator=g, dtype=torch.float64)

    def grads(tensors, fn):
        tensors = [t.clone().requires_grad_(i < 3 or table_grad)
                   for i, t in enumerate(tensors)]
        out = fn(*tensors)
        (out.double() * weights.to(out.device)).sum().backward()
        return out.double().detach().cpu(), [None if t.grad is None else t.grad.double().cpu()
                                              for t in tensors]

    drop_seed, keep = keep_mask(batch, heads, q_len, k_len, dropout_p)
    dev = [t.to(DEVICE, dtype) for t in x + [table]]
    got = grads(dev, lambda q, k, v, t: kernels.distance_attention(
        q, k, v, t, r_lo, q_offset, padding.to(DEVICE), causal, factor, dropout_p, drop_seed))
    ref = grads(x + [table], lambda q, k, v, t: naive(
        q, k, v, t, r_lo, q_offset, padding, causal, factor, keep, dropout_p))
    return got, ref


def outputs_and_grads(fused, fused_inputs, reference, inputs, weights):
    """``[output, gradient of each input]`` of the kernel and of the reference (float64),
    for the loss ``sum(output * weights)``, both in float64 on CPU."""
    results = []
    for fn, args in ((fused, fused_inputs), (reference, inputs)):
        args = [t.clone().requires_grad_() for t in args]
        out = fn(*args)
        (out.double() * weights.to(out.device)).sum().backward()
        results.append([out.detach().double().cpu()] + [t.grad.double().cpu() for t in args])
    return results


def naive_shaw(q, k, v, a_key, a_value, r_lo, q_offset, padding, causal, keep=None,
               dropout_p=0.0):
    """Shaw et al. eqs. (3)-(5) written out: ``e_ij = q_i.(k_j + aK[c]) ``, ``z_i = sum_j
    p_ij (v_j + aV[c])``, ``c = clip(j - i, r_lo, r_hi)``; zeros for rows with no key."""
    q_len, k_len = q.size(2), k.size(2)
    i = torch.arange(q_len)[:, None] + q_offset
    j = torch.arange(k_len)[None, :]
    c = (j - i).clamp(r_lo, r_lo + a_key.size(0) - 1) - r_lo  # (q_len, k_len)
    logits = q @ k.transpose(-1, -2) + torch.einsum("bhid,ijd->bhij", q, a_key[c])
    blocked = padding[:, None, None, :] | (j > i) if causal else padding[:, None, None, :]
    p = torch.softmax(logits.masked_fill(blocked, float("-inf")), -1).nan_to_num(0.0)
    p = dropped(p, keep, dropout_p)  # both terms read the dropped probabilities
    return p @ v + torch.einsum("bhij,ijd->bhid", p, a_value[c])


# (batch, heads, q_len, k_len, q_offset, clip k, causal)
SHAW_CONFIGS = {
    "encoder, two tiles, left padding": (2, 2, 70, 70, 0, 16, False),
    "decoder, causal, rows with no key": (2, 2, 40, 40, 0, 5, True),
    "queries after a cache": (1, 2, 6, 75, 69, 3, True),
}


def run_shaw(config, dtype, d=16, dropout_p=0.0):
    """The fused kernel (plus the value table times its sums by distance) in ``dtype`` and
    :func:`naive_shaw` in float64 on the same rounded inputs: outputs and the gradients of
    q, k, v, aK and aV."""
    batch, heads, q_len, k_len, q_offset, clip, causal = config
    g = torch.Generator().manual_seed(0)
    rows = clip + 1 if causal else 2 * clip + 1
    x = [torch.randn(*shape, generator=g, dtype=torch.float64)
         for shape in ((batch, heads, q_len, d), (batch, heads, k_len, d),
                       (batch, heads, k_len, d), (rows, d), (rows, d))]
    x[0] = x[0] / d ** 0.5
    x = [t.to(dtype).double() for t in x]
    padding = torch.zeros(batch, k_len, dtype=torch.bool)
    padding[0, :4] = True  # left padding; with the causal mask, rows 0-3 see no key
    weights = torch.randn(batch, heads, q_len, d, generator=g, dtype=torch.float64)
    drop_seed, keep = keep_mask(batch, heads, q_len, k_len, dropout_p)

    def fused(q, k, v, a_key, a_value):
        out, by_distance = kernels.clipped_relative_attention(
            q, k, v, q @ a_key.t(), -clip, q_offset, padding.to(DEVICE), causal, True,
            dropout_p, drop_seed)
        return out + (by_distance @ a_value.float()).to(out.dtype)

    return outputs_and_grads(
        fused, [t.to(DEVICE, dtype) for t in x],
        lambda *a: naive_shaw(*a, -clip, q_offset, padding, causal, keep, dropout_p), x,
        weights)


def naive_rows(q, k, v, x_q, a_q, x_k, a_k, r_lo, q_offset, padding, causal, keep=None,
               dropout_p=0.0):
    """Transformer-XL's / Huang et al.'s content terms by distance written out:
    ``e_ij = q_i.k_j + x_q[i].A_q[:, j - i] + x_k[j].A_k[:, j - i]`` as a ``len x len x d``
    product per pair; zeros for rows with no key."""
    q_len, k_len = q.size(2), k.size(2)
    i = torch.arange(q_len)[:, None] + q_offset
    j = torch.arange(k_len)[None, :]
    c = (j - i - r_lo).clamp(0, a_q.size(-1) - 1)  # clamped only where causally masked
    logits = q @ k.transpose(-1, -2) + torch.einsum("bhid,hdij->bhij", x_q, a_q[:, :, c])
    if x_k is not None:
        logits = logits + torch.einsum("bhjd,hdij->bhij", x_k, a_k[:, :, c])
    blocked = padding[:, None, None, :] | (j > i) if causal else padding[:, None, None, :]
    p = torch.softmax(logits.masked_fill(blocked, float("-inf")), -1).nan_to_num(0.0)
    return dropped(p, keep, dropout_p) @ v


# (batch, heads, q_len, k_len, q_offset, causal, key rows, extra distances)
ROWS_CONFIGS = {
    "encoder, two tiles, left padding (Huang 4)": (2, 2, 70, 70, 0, False, True, 0),
    "encoder, one tile, wider rows (XL)": (2, 3, 37, 37, 0, False, False, 3),
    "decoder, causal, rows with no key (XL)": (2, 2, 70, 70, 0, True, False, 0),
    "decoder, causal (Huang 4)": (1, 2, 40, 40, 0, True, True, 0),
    "queries after a cache": (1, 2, 6, 75, 69, True, True, 0),
    "queries after others, both directions": (1, 2, 40, 75, 35, False, True, 2),
}


def run_rows(config, dtype, d=16, dropout_p=0.0):
    """:func:`distance_rows_attention` in ``dtype`` and :func:`naive_rows` in float64 on
    the same rounded inputs: outputs and the gradients of every input."""
    batch, heads, q_len, k_len, q_offset, causal, with_keys, extra = config
    g = torch.Generator().manual_seed(0)
    r_lo = -(q_offset + q_len - 1) - extra
    r_hi = 0 if causal else k_len - 1 - q_offset
    rows = r_hi - r_lo + 1 + extra
    shapes = [(batch, heads, q_len, d), (batch, heads, k_len, d), (batch, heads, k_len, d),
              (batch, heads, q_len, d), (heads, d, rows)]
    if with_keys:
        shapes += [(batch, heads, k_len, d), (heads, d, rows)]
    x = [torch.randn(*s, generator=g, dtype=torch.float64) / (d ** 0.5 if n != 2 else 1)
         for n, s in enumerate(shapes)]
    x = [t.to(dtype).double() for t in x]
    padding = torch.zeros(batch, k_len, dtype=torch.bool)
    padding[0, :4] = True  # left padding; with the causal mask, rows 0-3 see no key
    weights = torch.randn(batch, heads, q_len, d, generator=g, dtype=torch.float64)
    drop_seed, keep = keep_mask(batch, heads, q_len, k_len, dropout_p)

    def as_fairseq(x):  # (B, H, len, d) as a view of (len, B, H * d), as the model has it
        return x.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3)

    def fused(q, k, v, x_q, a_q, x_k=None, a_k=None):
        return kernels.distance_rows_attention(
            *map(as_fairseq, (q, k, v)), (as_fairseq(x_q), a_q), r_lo, q_offset,
            padding.to(DEVICE), causal, None if x_k is None else (as_fairseq(x_k), a_k),
            dropout_p, drop_seed)

    def reference(q, k, v, x_q, a_q, x_k=None, a_k=None):
        return naive_rows(q, k, v, x_q, a_q, x_k, a_k, r_lo, q_offset, padding, causal,
                          keep, dropout_p)

    return outputs_and_grads(fused, [t.to(DEVICE, dtype) for t in x], reference, x, weights)


@contextlib.contextmanager
def counting_calls():
    """The calls of the fused kernel (either entry point) while the block runs, not its
    self-check's: imported here first, it binds the entry points unpatched (imported
    inside the block, it bound the counting wrappers and its calls were counted: the GPU
    suite failed or passed by the order its tests ran in)."""
    importlib.import_module("fairseq_posenc.core.kernels.self_check")

    calls: list[int] = []
    names = ("distance_attention", "clipped_relative_attention", "distance_rows_attention")
    originals = {name: getattr(kernels, name) for name in names}

    def counted(original):
        return lambda *a, **kw: calls.append(1) or original(*a, **kw)

    for name, original in originals.items():
        setattr(kernels, name, counted(original))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(kernels, name, original)


def set_kernels(module: torch.nn.Module, distance: str, low_rank: str) -> None:
    for m in module.modules():
        if isinstance(m, PositionalMultiheadAttention):
            m.distance_kernel, m.low_rank_kernel = distance, low_rank
