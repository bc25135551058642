"""The attention layer and the model with the fused distance kernels: outputs and gradients
equal to the attention's bias path (``distance_kernel="bias"``), with attention dropout,
in whole models and incremental decoding; which layers ``"auto"`` and ``--pos-kernels``
fuse, under deterministic algorithms too; the self-check that ``"auto"`` runs first.

The bias path is itself checked against each paper's formula under ``tests/core/encodings/``
(``test_bias_formulas.py``, ``test_huang_formulas.py``, ``test_shaw_formulas.py``,
``test_huang3_xl.py``, ``test_tupe.py``, ``test_at5.py``). Without CUDA the kernels run in
Triton's interpreter (``tests/support/interpreted.py``); half precision on CUDA in
``tests/core/kernels/test_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch

from fairseq_posenc.core.context import KernelFamily
from tests.support.distance_kernel import counting_calls, kernel_launch, kernels, set_kernels
from tests.support.interpreted import DEVICE, kernel_module
from tests.support.model_utils import assert_kernels_agree, build_attention, build_model
from tests.support.layers import layer_run


# (encoding, flags, causal): every DISTANCE_BIAS and DISTANCE_SCALE encoding, Shaw's,
# Transformer-XL's and Huang 4's terms; TUPE-R's low-rank part joins as extra q.k
# dimensions; the decoder's ALiBi stays the concatenated kernel; FIRE within its threshold.
LAYER_CASES = [
    ("t5", {}, False), ("t5", {}, True),
    ("diet_rel", {}, False), ("diet_rel", {"diet_rel_sharing": "head"}, True),
    ("at5", {}, False),
    ("tupe_r", {}, False), ("tupe_r", {}, True),
    ("alibi", {}, False),
    ("kerple_log", {}, False), ("kerple_log", {}, True),
    ("kerple_power", {}, False), ("kerple_power", {}, True),
    ("sandwich", {}, False), ("sandwich", {"sandwich_dim": 16}, True),
    ("huang1", {}, False), ("huang1", {"huang1_clip": 5}, True),
    ("huang2", {}, False), ("huang2", {}, True),
    ("shaw", {}, False), ("shaw", {"shaw_clip": 4}, True),
    ("shaw", {"shaw_no_value": True}, False),
    ("xl", {}, False), ("xl", {"xl_untie_r": True}, True),
    ("huang4", {}, False), ("huang4", {}, True),
    # FIRE below its threshold (70 tokens; L = |l 512| with l drawn as the other
    # parameters, 398 here): its table by distance, whose gradient reaches the MLP, c, L
    ("fire", {}, False), ("fire", {}, True),
]


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


@pytest.mark.slow
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


@pytest.mark.slow
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
            # the reference asks for the weights: the explicit path, whose dropout is
            # fairseq's module, on every device (on CUDA the float mask would go to SDPA)
            results[distance] = layer_run(attn, x, causal, padding,
                                          need_weights=distance == "bias")
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
    import fairseq_posenc.core.kernels as package_kernels
    from fairseq_posenc.core.kernel_choice import choose_kernels
    from tests.support.batches import random_source

    monkeypatch.setattr(package_kernels, "auto_fuses", lambda *args: True)
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
            ("huang4", "fused", 0.1, 1), ("fire", "fused", 0.0, 1),
            # FIRE's threshold (|l 3.5| with l drawn: 1.5) below the last position: by pair
            (("fire", {"fire_init_l": 3.5}), "fused", 0.0, 0),
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


def test_auto_fuses_under_deterministic_algorithms(monkeypatch):
    """No atomic adds (a table per head: each distance stored once per query block, summed
    in torch; Shaw's rows: per row): ``torch.use_deterministic_algorithms(True)`` keeps
    the fused kernel."""
    import fairseq_posenc.core.kernels as package_kernels
    monkeypatch.setattr(package_kernels, "auto_fuses", lambda *args: True)
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


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["t5", "tupe_r", "huang2", "shaw", "xl", "huang4",
                                      "kerple_power", "sandwich"])
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


@pytest.mark.slow
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
