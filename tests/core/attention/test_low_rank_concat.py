"""The attention's kernels for one kind of position term compute the same numbers.

A ``LOW_RANK`` term (``diet_abs``, ``tupe_a``, ``tupe_r``'s absolute part, and causal
``alibi``, whose bias is exactly rank 1 under the causal mask) runs on CUDA as extra query
and key dimensions (the ``"concat"`` kernel) and on CPU as a bias read from the
``P_Q P_K^T`` product (``"bias"``). Here both run on CPU, in float64, on left-padded
sources and right-padded causal targets: outputs and the gradients of every parameter
agree, and whole models give the same outputs and the same incremental decoding.
The bias path itself is checked against naive loops of each paper's formula in
``tests/core/encodings/`` (``test_*_formulas.py``, ``test_tupe.py``) and in
``tests/core/attention/test_decoding.py``.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.layers import layer_run
from tests.support.low_rank import CASES, set_kernel
from tests.support.model_utils import assert_kernels_agree, build_attention, build_model

TOL = 1e-10


@pytest.mark.parametrize("encoding,flags,causal", CASES)
def test_concatenated_low_rank_kernel_equals_the_bias(encoding, flags, causal):
    attn = build_attention(encoding, causal=causal, max_positions=12, **flags)
    attn.train()  # dropout is 0: training mode, with gradients, is deterministic
    T, B = 9, 3
    x = torch.randn(T, B, attn.embed_dim, dtype=torch.float64)
    padding = torch.zeros(B, T, dtype=torch.bool)
    if causal:
        padding[0, -3:] = True  # targets are padded on the right
    else:
        padding[0, :3] = True  # sources on the left
        padding[2, :1] = True
    results = {}
    for kernel in ("bias", "concat"):
        attn.low_rank_kernel = kernel
        results[kernel] = layer_run(attn, x, causal, padding)
    (out_b, grads_b), (out_c, grads_c) = results["bias"], results["concat"]
    assert (out_b - out_c).abs().max() < TOL
    assert len(grads_b) == len(grads_c)
    for g_b, g_c in zip(grads_b, grads_c):
        assert (g_b is None) == (g_c is None)
        if g_b is not None:
            assert (g_b - g_c).abs().max() < TOL


def test_concat_is_used_only_where_exact():
    """The kernel choice: low-rank terms on the fused path; causal ALiBi only with its
    causal mask; the encoder's symmetric ALiBi never; ``"bias"`` and CPU ``"auto"`` never."""
    calls = []
    import fairseq_posenc.core.attention_core as attention

    original = attention.concat_low_rank
    attention.concat_low_rank = lambda *a: calls.append(1) or original(*a)
    try:
        for encoding, causal, kernel, expected in [
            ("diet_abs", False, "concat", 1), ("diet_abs", False, "auto", 0),
            ("diet_abs", False, "bias", 0), ("alibi", True, "concat", 1),
            ("alibi", False, "concat", 0), ("t5", False, "concat", 0),
        ]:
            calls.clear()
            attn = build_attention(encoding, causal=causal)
            attn.low_rank_kernel = kernel
            x = torch.randn(5, 2, attn.embed_dim, dtype=torch.float64)
            mask = torch.triu(torch.full((5, 5), float("-inf"), dtype=x.dtype), 1)
            with attn.scope.open():
                attn(x, x, x, attn_mask=mask if causal else None, need_weights=False)
            assert len(calls) == expected, (encoding, causal, kernel)
    finally:
        attention.concat_low_rank = original


@pytest.mark.parametrize("encoding", ["diet_abs", "tupe_a", "tupe_r", "alibi"])
def test_models_with_the_concatenated_kernel(encoding):
    """A whole model: the same outputs with either kernel, and incremental decoding (its
    single-query steps take the explicit path) equals the concat kernel's full forward."""
    model, d = build_model(encoding)
    assert_kernels_agree(model, d, set_kernel, "bias", "concat", 1e-5)


def test_read_rows_equals_indexing_values_and_gradients():
    """The one-hot product that reads a low-rank term's rows at real positions equals
    ``table[:, positions]``, forward and backward (float64)."""
    from fairseq_posenc.core.encodings.absolute_tables import read_rows
    g = torch.Generator().manual_seed(0)
    table = torch.randn(3, 7, 5, dtype=torch.float64, generator=g, requires_grad=True)
    positions = torch.randint(0, 7, (4, 6), generator=g)
    weights = torch.randn(4, 3, 6, 5, dtype=torch.float64, generator=g)
    (read_rows(table, positions) * weights).sum().backward()
    got = table.grad.clone()
    table.grad = None
    ref = table[:, positions].transpose(0, 1)
    (ref * weights).sum().backward()
    assert torch.equal(read_rows(table, positions), ref)
    assert torch.allclose(got, table.grad, rtol=0, atol=1e-12)


def test_concatenated_dimensions_are_padded_to_a_multiple_of_8():
    """The fused CUDA kernels take head dimensions in multiples of 8; zeros fill up."""
    from fairseq_posenc.plugin.attention import concat_low_rank
    q, k = torch.randn(2, 3, 5, 64), torch.randn(2, 3, 5, 64)
    p_q, p_k = torch.randn(1, 1, 5, 2), torch.randn(1, 1, 5, 2)
    cq, ck = concat_low_rank(q, k, [(p_q, p_k)])
    assert cq.shape[-1] == ck.shape[-1] == 72
    assert torch.allclose(cq @ ck.transpose(-1, -2), q @ k.transpose(-1, -2) + p_q @ p_k.transpose(-1, -2),
                          atol=1e-5)
