"""The fused distance-bias kernel (``fairseq_posenc.kernels.distance``) computes the
attention and the gradients that a naive softmax with the bias written out computes.

Without CUDA the kernels run in Triton's interpreter (``tests/interpreted.py``), in
float32 and float16; the interpreter's ``tl.dot`` reads
bfloat16 inputs wrongly (a product of 16 x 16 bf16 matrices came out ~1e10 off), so
bfloat16, and the compiled kernels, are checked by ``tests/test_gpu.py``.

References are independent of the kernel: ``softmax(q k^T + table[j - i] + masks) v`` in
float64 with autograd, the padding and causal masks as booleans, and rows that see no key
set to zero. Layers and models compare the kernel with the attention's bias path
(``distance_kernel="bias"``), itself checked against each paper's formula in
``test_formulas.py``.
"""

from __future__ import annotations

import contextlib
import importlib
import random

import pytest
import torch

from fairseq_posenc.context import KernelFamily
from fairseq_posenc.attention import PositionalMultiheadAttention
from tests.support.interpreted import DEVICE, kernel_module
from tests.support.model_utils import assert_kernels_agree, build_attention, build_model
from tests.support.layers import layer_run

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


@pytest.mark.parametrize("name", list(CONFIGS))
def test_kernel_equals_the_naive_softmax_float32(name):
    (out, grads), (ref_out, ref_grads) = run_both(CONFIGS[name], torch.float32)
    assert (out - ref_out).abs().max() < 2e-5 * max(1.0, ref_out.abs().max().item())
    for got, ref in zip(grads, ref_grads):
        assert (got is None) == (ref is None)
        if got is not None:
            assert (got.cpu() - ref).abs().max() < 5e-5 * max(1.0, ref.abs().max().item())


@pytest.mark.parametrize("name", ["decoder, causal, rows with no key",
                                  "queries after a cache, extra q.k dims"])
def test_other_tile_shapes(name, monkeypatch):
    """The launches are tunable per kernel (non-square tiles for the forward and dK/dV,
    fewer query rows for a short query block): the numbers do not depend on them."""
    monkeypatch.setattr(kernel_launch, "FORWARD", kernels.Tiles(32, 16))
    monkeypatch.setattr(kernel_launch, "BACKWARD_DKDV", kernels.Tiles(16, 32))
    monkeypatch.setattr(kernel_launch, "BACKWARD_DQ", kernels.Tiles(32, 32))
    (out, grads), (ref_out, ref_grads) = run_both(CONFIGS[name], torch.float32)
    assert (out - ref_out).abs().max() < 2e-5 * max(1.0, ref_out.abs().max().item())
    for got, ref in zip(grads, ref_grads):
        assert (got - ref).abs().max() < 5e-5 * max(1.0, ref.abs().max().item())


@pytest.mark.parametrize("name", ["encoder, left padding", "decoder, causal, rows with no key",
                                  "a factor (Huang), two tiles"])
def test_kernel_in_float16(name):
    """Inputs rounded to float16, sums in float32: errors of float16's rounding."""
    (out, grads), (ref_out, ref_grads) = run_both(CONFIGS[name], torch.float16)
    assert (out.cpu() - ref_out).abs().max() < 2e-2
    for got, ref in zip(grads, ref_grads):
        assert (got.cpu() - ref).abs().max() < 2e-2 * max(1.0, ref.abs().max().item())


def test_rows_with_no_key_are_zero_with_zero_gradients():
    (out, grads), _ = run_both(CONFIGS["decoder, causal, rows with no key"], torch.float32)
    assert out[0, :, :4].abs().max() == 0  # rows 0-3 of sentence 0 see only padding
    assert torch.isfinite(torch.cat([g.flatten() for g in grads])).all()
    assert grads[0][0, :, :4].abs().max() == 0


# Attention dropout: the kernels drop probabilities by a mask they draw inside their tiles
# (Philox, by seed and position); the references drop the ones that mask drops, written
# out by ``dropout_keep``.
DROPOUT_CASES = ["encoder, left padding", "decoder, causal, rows with no key",
                 "queries after a cache, extra q.k dims", "a factor (Huang), two tiles"]


@pytest.mark.parametrize("name", DROPOUT_CASES)
def test_dropout_equals_the_naive_softmax_with_its_mask(name):
    (out, grads), (ref_out, ref_grads) = run_both(CONFIGS[name], torch.float32, dropout_p=0.3)
    assert (out - ref_out).abs().max() < 2e-5 * max(1.0, ref_out.abs().max().item())
    for got, ref in zip(grads, ref_grads):
        assert (got is None) == (ref is None)
        if got is not None:
            assert (got.cpu() - ref).abs().max() < 5e-5 * max(1.0, ref.abs().max().item())


def test_dropout_mask_does_not_depend_on_the_tiles(monkeypatch):
    """The forward and the two backward kernels redraw one mask whatever their tiles."""
    monkeypatch.setattr(kernel_launch, "FORWARD", kernels.Tiles(32, 16))
    monkeypatch.setattr(kernel_launch, "BACKWARD_DKDV", kernels.Tiles(16, 32))
    monkeypatch.setattr(kernel_launch, "BACKWARD_DQ", kernels.Tiles(32, 32))
    (out, grads), (ref_out, ref_grads) = run_both(
        CONFIGS["decoder, causal, rows with no key"], torch.float32, dropout_p=0.3)
    assert (out - ref_out).abs().max() < 2e-5 * max(1.0, ref_out.abs().max().item())
    for got, ref in zip(grads, ref_grads):
        assert (got - ref).abs().max() < 5e-5 * max(1.0, ref.abs().max().item())


def test_dropout_in_float16():
    (out, grads), (ref_out, ref_grads) = run_both(CONFIGS["encoder, left padding"],
                                                  torch.float16, dropout_p=0.1)
    assert (out.cpu() - ref_out).abs().max() < 2e-2 * max(1.0, ref_out.abs().max().item())
    for got, ref in zip(grads, ref_grads):
        assert (got.cpu() - ref).abs().max() < 2e-2 * max(1.0, ref.abs().max().item())


def test_dropout_mask_keeps_one_minus_p_and_follows_its_seed():
    """About ``1 - p`` of the pairs kept (54,600 pairs: a standard deviation of 0.002), a
    mask of its own per sentence and head, the same mask for the same seed, another for
    another seed; ``p = 0`` keeps every pair."""
    def keep(seed, p=0.25):
        return kernels.dropout_keep(torch.tensor([seed], device=DEVICE), 2, 3, 70, 130,
                                    p).cpu()

    mask = keep(7)
    assert abs(mask.float().mean().item() - 0.75) < 0.01
    assert abs(mask[1, 2].float().mean().item() - 0.75) < 0.03
    assert not torch.equal(mask[0, 0], mask[0, 1]) and not torch.equal(mask[0, 0], mask[1, 0])
    assert torch.equal(mask, keep(7))
    assert (mask != keep(8)).float().mean() > 0.3  # independent masks: 0.375
    assert keep(7, 0.0).all()


def test_dropout_draws_a_mask_per_call_from_torchs_generator():
    q = torch.randn(1, 2, 20, 16, generator=torch.Generator().manual_seed(0)).to(DEVICE)
    table = torch.zeros(2, 39, device=DEVICE)

    def call():
        return kernels.distance_attention(q, q, q, table, -19, dropout_p=0.5).cpu()

    first, second = call(), call()
    assert not torch.equal(first, second)
    torch.manual_seed(3)
    first = call()
    torch.manual_seed(3)
    assert torch.equal(first, call())
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1.0"):
        kernels.distance_attention(q, q, q, table, -19, dropout_p=1.0)
    with pytest.raises(ValueError, match="seed must be a \\(1,\\) int64 tensor"):
        kernels.distance_attention(q, q, q, table, -19, dropout_p=0.5,
                                   seed=torch.tensor([1], dtype=torch.int32, device=DEVICE))


def test_dropout_mask_is_drawn_again_under_activation_checkpointing():
    """The seed comes from torch's generator, whose state activation checkpointing
    restores before it recomputes the forward: the same mask, the same gradients."""
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(2, 2, 30, 16, generator=g).to(DEVICE) for _ in range(3)]
    inputs.append(torch.randn(2, 59, generator=g).to(DEVICE))

    def grads(checkpointed):
        args = [x.clone().requires_grad_() for x in inputs]

        def attention(q, k, v, t):
            return kernels.distance_attention(q, k, v, t, -29, dropout_p=0.3)

        torch.manual_seed(5)
        out = (torch.utils.checkpoint.checkpoint(attention, *args, use_reentrant=False)
               if checkpointed else attention(*args))
        (out ** 2).sum().backward()
        return [x.grad for x in args]

    for plain, checkpointed in zip(grads(False), grads(True)):
        assert torch.equal(plain, checkpointed)


def test_a_table_that_misses_distances_is_refused():
    q = torch.zeros(1, 2, 4, 16, device=DEVICE)
    with pytest.raises(ValueError, match="covers distances -2..3; this attention needs -3..3"):
        kernels.distance_attention(q, q, q, torch.zeros(2, 6, device=DEVICE), -2)
    with pytest.raises(ValueError, match="table must be"):
        kernels.distance_attention(q, q, q, torch.zeros(3, 7, device=DEVICE), -3)


# (encoding, flags, causal): every DISTANCE_BIAS and DISTANCE_SCALE encoding, Shaw's,
# Transformer-XL's and Huang 4's terms; TUPE-R's low-rank part joins as extra q.k
# dimensions; the decoder's ALiBi stays the concatenated kernel.
LAYER_CASES = [
    ("t5", {}, False), ("t5", {}, True),
    ("diet_rel", {}, False), ("diet_rel", {"diet_rel_sharing": "head"}, True),
    ("at5", {}, False),
    ("tupe_r", {}, False), ("tupe_r", {}, True),
    ("alibi", {}, False),
    ("huang1", {}, False), ("huang1", {"huang1_clip": 5}, True),
    ("huang2", {}, False), ("huang2", {}, True),
    ("shaw", {}, False), ("shaw", {"shaw_clip": 4}, True),
    ("shaw", {"shaw_no_value": True}, False),
    ("xl", {}, False), ("xl", {"xl_untie_r": True}, True),
    ("huang4", {}, False), ("huang4", {}, True),
]


@contextlib.contextmanager
def counting_calls():
    """The calls of the fused kernel (either entry point) while the block runs, not its
    self-check's: imported here first, it binds the entry points unpatched (imported
    inside the block, it bound the counting wrappers and its calls were counted: the GPU
    suite failed or passed by the order its tests ran in)."""
    importlib.import_module("fairseq_posenc.kernels.self_check")

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


def assert_layer_runs_agree(reference, fused) -> None:
    """Two :func:`layer_run` results in float32: both paths are ~1e-6 (CPU) to ~1e-5
    (H100: other summation orders) of the largest value away from a float64 run (some
    gradients are 0 analytically, e.g. the keys' bias's)."""
    (out_b, grads_b), (out_f, grads_f) = reference, fused
    assert (out_b - out_f).abs().max() < 3e-5 * out_b.abs().max()
    scale = max(g.abs().max().item() for g in grads_b if g is not None)
    for g_b, g_f in zip(grads_b, grads_f):
        assert (g_b is None) == (g_f is None)
        if g_b is not None:
            assert (g_b - g_f).abs().max() < 5e-5 * scale


@pytest.mark.parametrize("encoding,flags,causal", LAYER_CASES)
def test_layer_with_the_fused_kernel_equals_the_bias(encoding, flags, causal):
    """One layer, outputs and the gradients of every parameter (float32)."""
    attn = build_attention(encoding, causal=causal, max_positions=80, embed_dim=32,
                           num_heads=2, **flags).float().to(DEVICE)
    attn.train()  # dropout is 0: training mode, with gradients, is deterministic
    T, B = 70, 2
    x = torch.randn(T, B, attn.embed_dim, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    padding = torch.zeros(B, T, dtype=torch.bool, device=DEVICE)
    if causal:
        padding[0, -6:] = True  # targets are padded on the right
    else:
        padding[0, :6] = True  # sources on the left
    results = {}
    for distance, low_rank in (("bias", "bias"), ("fused", "concat")):
        set_kernels(attn, distance, low_rank)
        with counting_calls() as calls:
            results[distance] = layer_run(attn, x, causal, padding)
        assert len(calls) == (distance == "fused")
    assert_layer_runs_agree(results["bias"], results["fused"])


@pytest.mark.parametrize("encoding,causal", [("t5", False), ("huang1", True), ("shaw", False),
                                             ("xl", True), ("huang4", False)])
def test_layer_with_dropout_equals_the_explicit_path_with_the_kernels_mask(
        encoding, causal, monkeypatch):
    """Training with attention dropout: the fused kernel drops the probabilities as
    fairseq's dropout does on the explicit path, given the kernel's mask (the layer's
    dropout made to drop where the mask does): the same outputs and gradients. The layer
    passes its own ``p``, and only while dropout acts."""
    p = 0.2
    attn = build_attention(encoding, causal=causal, max_positions=80, embed_dim=32,
                           num_heads=2).float().to(DEVICE)
    attn.dropout_module.p = p
    attn.train()
    T, B = 70, 2
    x = torch.randn(T, B, attn.embed_dim, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    padding = torch.zeros(B, T, dtype=torch.bool, device=DEVICE)
    padding[0, -6:] = True
    seed = torch.tensor([99], dtype=torch.int64, device=DEVICE)
    drawn = kernel_launch.dropout_seed
    monkeypatch.setattr(kernel_launch, "dropout_seed", lambda device: seed)
    keep = kernels.dropout_keep(seed, B, attn.num_heads, T, T, p)
    seen = []

    def kernels_mask(probs, inplace=False):
        seen.append(probs.shape)
        return probs * keep.to(probs.dtype) / (1 - p)

    monkeypatch.setattr(attn.dropout_module, "forward", kernels_mask)
    results = {}
    for distance in ("bias", "fused"):
        set_kernels(attn, distance, "bias")
        with counting_calls() as calls:
            results[distance] = layer_run(attn, x, causal, padding)
        assert len(calls) == (distance == "fused")
    assert seen == [(B, attn.num_heads, T, T)]  # the explicit path's dropout, once
    assert_layer_runs_agree(results["bias"], results["fused"])
    attn.eval()  # dropout off: nothing is dropped, so two calls (two seeds) agree
    monkeypatch.setattr(kernel_launch, "dropout_seed", drawn)
    set_kernels(attn, "fused", "bias")
    mask = torch.triu(torch.full((T, T), float("-inf"), device=DEVICE), 1) if causal else None
    with attn.scope.open(), torch.no_grad():
        first, second = (attn(x, x, x, key_padding_mask=padding, attn_mask=mask,
                              need_weights=False)[0] for _ in range(2))
    assert torch.equal(first, second) and len(seen) == 1


@pytest.mark.parametrize("choice,expected", [("auto", 2), ("torch", 0)])
def test_pos_kernels_flag(choice, expected, monkeypatch):
    """``--pos-kernels torch`` keeps every layer on torch's path where ``"auto"`` would
    fuse (forced here: CUDA in half precision); an unknown choice is refused."""
    import fairseq_posenc.plan as plan
    from fairseq_posenc.models import choose_kernels
    from tests.support.batches import random_source

    monkeypatch.setattr(plan, "auto_fuses", lambda family, call, verified=None: True)
    model, d = build_model("t5", ["--pos-kernels", choice])
    model.to(DEVICE)
    src, lengths = random_source(d)
    with torch.no_grad(), counting_calls() as calls:
        model.encoder(src.to(DEVICE), lengths.to(DEVICE))
    assert len(calls) == expected  # the tiny model's 2 encoder layers
    with pytest.raises(ValueError, match="--pos-kernels must be one of auto, torch"):
        choose_kernels(model, "triton")


def test_fused_kernel_is_chosen_only_where_exact():
    """``"auto"`` in float32 (and on CPU) and terms of other kinds keep the bias path
    (``"auto"`` in half precision on CUDA: ``test_gpu.py``); attention dropout is the
    kernel's own."""
    with counting_calls() as calls:
        for encoding, kernel, dropout, expected in [
            ("t5", "fused", 0.0, 1), ("t5", "auto", 0.0, 0),
            ("t5", "bias", 0.0, 0), ("t5", "fused", 0.1, 1), ("diet_abs", "fused", 0.0, 0),
            ("shaw", "fused", 0.0, 1), ("shaw", "fused", 0.1, 1), ("shaw", "bias", 0.0, 0),
            ("huang2", "fused", 0.0, 1), ("huang2", "bias", 0.0, 0), ("huang3", "fused", 0.0, 0),
            ("xl", "fused", 0.0, 1), ("xl", "bias", 0.0, 0), ("huang4", "fused", 0.0, 1),
            ("huang4", "fused", 0.1, 1),
            # clips shorter than the 5 tokens: distances share a vector, the bias path
            (("xl", {"xl_clamp_len": 3}), "fused", 0.0, 0),
            (("huang4", {"huang4_clip": 2}), "fused", 0.0, 0),
        ]:
            calls.clear()
            encoding, flags = encoding if isinstance(encoding, tuple) else (encoding, {})
            attn = build_attention(encoding, causal=False, **flags).float().to(DEVICE)
            attn.distance_kernel = kernel
            attn.dropout_module.p = dropout
            attn.train()
            x = torch.randn(5, 2, attn.embed_dim, device=DEVICE)
            with attn.scope.open():
                attn(x, x, x, need_weights=False)
            assert len(calls) == expected, (encoding, kernel, dropout)


@pytest.mark.parametrize("encoding", ["t5", "tupe_r", "huang2", "shaw", "xl", "huang4"])
def test_models_with_the_fused_kernel(encoding):
    """A whole model (float32): the same outputs as with the bias, and incremental
    decoding (single-query steps take the explicit path) equals the fused full forward;
    the kernel runs in all 2 + 2 self-attention layers of the full forwards."""
    model, d = build_model(encoding)
    model.float().to(DEVICE)

    def choose(model, distance):
        set_kernels(model, distance, "concat" if distance == "fused" else "bias")

    with counting_calls() as calls:
        assert_kernels_agree(model, d, choose, "bias", "fused", 1e-4, DEVICE)
    assert len(calls) == 4


def test_self_check_passes_and_catches_a_wrong_kernel(monkeypatch):
    """``"auto"`` uses the kernel on a device only after it matched the reference there:
    the check passes for the kernel, and a kernel off by a little, or one that fails to
    compile, is refused with a warning."""
    self_check = kernel_module("self_check")
    dtype = torch.float16
    for family in (KernelFamily.DISTANCE, KernelFamily.DISTANCE_FACTOR, KernelFamily.CLIPPED,
                   KernelFamily.ROWS):
        assert self_check.self_check(family, False, torch.device(DEVICE), dtype)
        assert self_check.self_check(family, True, torch.device(DEVICE), dtype)

    def off(*args, **kwargs):
        out = kernels.distance_attention(*args, **kwargs)
        return out + 0.05 * out.detach().abs().max()

    monkeypatch.setattr(self_check, "distance_attention", off)
    with pytest.warns(RuntimeWarning, match="distance kernel is not used .* output "
                      "is off by .* tensors instead"):
        assert not self_check.self_check(KernelFamily.DISTANCE, False, torch.device(DEVICE),
                                         dtype)

    def broken(*args, **kwargs):
        raise RuntimeError("out of resource: shared memory")

    monkeypatch.setattr(self_check, "distance_attention", broken)
    with pytest.warns(RuntimeWarning, match="failed to run: .*shared memory"):
        assert not self_check.self_check(KernelFamily.DISTANCE, False, torch.device(DEVICE),
                                         dtype)


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


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 5e-5), (torch.float16, 2e-2)])
@pytest.mark.parametrize("name", list(SHAW_CONFIGS))
def test_clipped_relative_attention_is_shaws(name, dtype, tol):
    """Key term read per row by clipped distance, value term from the probabilities summed
    by clipped distance; outputs and the gradients of q, k, v, aK and aV."""
    for got, ref in zip(*run_shaw(SHAW_CONFIGS[name], dtype)):
        assert (got - ref).abs().max() < tol * max(1.0, ref.abs().max().item())


@pytest.mark.parametrize("name", ["encoder, two tiles, left padding",
                                  "decoder, causal, rows with no key"])
def test_clipped_relative_attention_with_dropout(name):
    """Both of Shaw's terms read the dropped probabilities."""
    for got, ref in zip(*run_shaw(SHAW_CONFIGS[name], torch.float32, dropout_p=0.3)):
        assert (got - ref).abs().max() < 5e-5 * max(1.0, ref.abs().max().item())


def test_auto_fuses_under_deterministic_algorithms(monkeypatch):
    """No atomic adds (a table per head: each distance stored once per query block, summed
    in torch; Shaw's rows: per row): ``torch.use_deterministic_algorithms(True)`` keeps
    the fused kernel."""
    import fairseq_posenc.plan as plan
    monkeypatch.setattr(plan, "auto_fuses", lambda family, call, verified=None: True)
    x = torch.randn(5, 2, 8, device=DEVICE)
    saved = torch.are_deterministic_algorithms_enabled()
    try:
        for deterministic in (False, True):
            torch.use_deterministic_algorithms(deterministic)
            with counting_calls() as calls:
                for encoding in ("t5", "shaw"):
                    attn = build_attention(encoding, causal=False).float().to(DEVICE)
                    with attn.scope.open():
                        attn(x, x, x, need_weights=False)
            assert len(calls) == 2, deterministic
    finally:
        torch.use_deterministic_algorithms(saved)


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
    "encoder, a multiple of the band (XL)": (2, 2, 64, 64, 0, False, False, 0),
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


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 5e-5), (torch.float16, 2e-2)])
@pytest.mark.parametrize("name", list(ROWS_CONFIGS))
def test_distance_rows_attention_is_the_written_out_sum(name, dtype, tol):
    """Rows per query (and per key) read at every distance: outputs and the gradients of
    q, k, v, x_q, A_q (and x_k, A_k)."""
    got, ref = run_rows(ROWS_CONFIGS[name], dtype)
    for n, (a, b) in enumerate(zip(got, ref)):
        assert (a - b).abs().max() < tol * max(1.0, b.abs().max().item()), n


@pytest.mark.parametrize("name", ["encoder, two tiles, left padding (Huang 4)",
                                  "decoder, causal, rows with no key (XL)"])
def test_distance_rows_attention_with_dropout(name):
    got, ref = run_rows(ROWS_CONFIGS[name], torch.float32, dropout_p=0.3)
    for n, (a, b) in enumerate(zip(got, ref)):
        assert (a - b).abs().max() < 5e-5 * max(1.0, b.abs().max().item()), n


@pytest.mark.parametrize("name", ["encoder, two tiles, left padding (Huang 4)",
                                  "decoder, causal, rows with no key (XL)",
                                  "queries after a cache"])
def test_rows_with_other_tile_shapes(name, monkeypatch):
    """The rows' tables are read the same whatever the tiles' shape (wider than high,
    higher than wide, square), in bands or in one table."""
    monkeypatch.setattr(kernel_launch, "FORWARD", kernels.Tiles(32, 16))
    monkeypatch.setattr(kernel_launch, "BACKWARD_DKDV", kernels.Tiles(16, 32))
    monkeypatch.setattr(kernel_launch, "BACKWARD_DQ", kernels.Tiles(32, 32))
    got, ref = run_rows(ROWS_CONFIGS[name], torch.float32)
    for n, (a, b) in enumerate(zip(got, ref)):
        assert (a - b).abs().max() < 5e-5 * max(1.0, b.abs().max().item()), n


def tables_made(monkeypatch):
    """A list that records each table per row the kernels' wrapper makes (a call of
    ``_table_rows``) as its band and its windows' shape."""
    made = []
    real = kernel_rows._table_rows
    monkeypatch.setattr(kernel_rows, "_table_rows",
                        lambda x, w, b: made.append((b, tuple(w.shape))) or real(x, w, b))
    return made


@pytest.mark.parametrize("band", [8, 16, 64])
@pytest.mark.parametrize("name", ["encoder, two tiles, left padding (Huang 4)",
                                  "encoder, one tile, wider rows (XL)",
                                  "queries after others, both directions",
                                  "encoder, a multiple of the band (XL)"])
def test_rows_in_bands_are_narrower_and_the_same_sums(name, band, monkeypatch):
    """Bidirectional rows are made in bands of ``ROW_BAND`` rows (and key columns), each
    over only the distances it meets: ``k_len + band - 1`` columns, rounded up to 16,
    where one table has every distance of the attention (bands only where narrower); the
    same outputs and gradients as the written-out sum, whether the band divides the
    length or not."""
    made = tables_made(monkeypatch)
    monkeypatch.setattr(kernel_rows, "ROW_BAND", band)
    config = ROWS_CONFIGS[name]
    got, ref = run_rows(config, torch.float32)
    q_len, k_len, extra = config[2], config[3], config[7]
    width = -(-(max(q_len, k_len) + band - 1) // 16) * 16
    one_table = -(-(q_len + k_len - 1 + extra) // 16) * 16
    times = 2 * (2 if config[6] else 1)  # forward and backward, per side
    assert [(b, w[-1]) for b, w in made] == (
        [(band, width)] if width < one_table else [(0, one_table)]) * times
    assert width < one_table or band == 64
    for n, (a, b) in enumerate(zip(got, ref)):
        assert (a - b).abs().max() < 5e-5 * max(1.0, b.abs().max().item()), n


@pytest.mark.parametrize("causal,banded", [(False, 0), (True, 16)])
def test_rows_as_one_table_where_not_banded(causal, banded, monkeypatch):
    """``ROW_BAND = 0``, and causal attention whatever it is: one table of every distance
    (``2T - 1`` or ``T``, rounded up to 16)."""
    made = tables_made(monkeypatch)
    monkeypatch.setattr(kernel_rows, "ROW_BAND", banded)
    config = (2, 2, 70, 70, 0, causal, True, 0)
    got, ref = run_rows(config, torch.float32)
    assert made == [(0, (2, 16, 80 if causal else 144))] * 4
    for n, (a, b) in enumerate(zip(got, ref)):
        assert (a - b).abs().max() < 5e-5 * max(1.0, b.abs().max().item()), n


def random_rows_configs(count, seed=0):
    """``count`` shapes of self-attention as the model makes them (keys: the cache and the
    queries; every third causal), with a band of 8, 16 or 32 rows each."""
    rng = random.Random(seed)
    configs = []
    for n in range(count):
        q_len, causal = rng.randint(1, 90), n % 3 == 2
        q_offset = rng.choice([0, rng.randint(1, 40)])
        configs.append(((rng.randint(1, 2), rng.randint(1, 3), q_len, q_offset + q_len,
                         q_offset, causal, rng.random() < 0.5, rng.randint(0, 5)),
                        rng.choice([8, 16, 32])))
    return configs


@pytest.mark.parametrize("config,band", random_rows_configs(8), ids=str)
def test_rows_at_random_shapes(config, band, monkeypatch):
    """Lengths, offsets, extra distances and bands drawn at random (seeded): the same
    sums as written out, in bands or in one table."""
    monkeypatch.setattr(kernel_rows, "ROW_BAND", band)
    got, ref = run_rows(config, torch.float32)
    for n, (a, b) in enumerate(zip(got, ref)):
        assert (a - b).abs().max() < 5e-5 * max(1.0, b.abs().max().item()), n


@pytest.mark.parametrize("start,step", [(-3, 4), (5, 4), (9, -4), (-2, -3)])
def test_band_windows_are_the_tables_columns(start, step):
    """Window ``n`` is columns ``start + n step + [0, width)`` of ``A``, zeros outside
    it; its gradient adds the overlapping windows back."""
    a = torch.randn(2, 3, 11, dtype=torch.float64, requires_grad=True)
    count, width = 4, 6
    windows = kernel_rows._band_windows(a, start, step, count, width).view(2, count, 3, width)
    padded = torch.nn.functional.pad(a, (40, 40))
    columns = torch.tensor([[start + n * step + w for w in range(width)]
                            for n in range(count)]) + 40
    naive = padded[:, :, columns].permute(0, 2, 1, 3)  # (H, count, d, width)
    assert torch.equal(windows, naive)
    weights = torch.randn_like(naive)
    (got,) = torch.autograd.grad((windows * weights).sum(), a)
    (ref,) = torch.autograd.grad((naive * weights).sum(), a)
    assert torch.allclose(got, ref)


def test_rows_that_miss_distances_are_refused():
    q = torch.zeros(1, 2, 4, 16, device=DEVICE)
    a = torch.zeros(2, 16, 6, device=DEVICE)
    with pytest.raises(ValueError, match=r"cover distances -2..3; this attention needs "
                       r"-3..3 \(no clipping\)"):
        kernels.distance_rows_attention(q, q, q, (q, a), -2)
    with pytest.raises(ValueError, match="the key rows have 5 distances, the query rows 7"):
        kernels.distance_rows_attention(q, q, q, (q, torch.zeros(2, 16, 7, device=DEVICE)),
                                        -3, key_rows=(q, torch.zeros(2, 16, 5, device=DEVICE)))
