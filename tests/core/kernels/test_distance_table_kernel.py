"""The fused distance-bias kernel's table entry point
(``fairseq_posenc.core.kernels.distance.distance_attention``): the attention and the gradients
that a naive softmax with the table written out computes, for a table added to the logits
or a factor of them, with padding, the causal mask, queries after a cache, other tile
shapes, and attention dropout drawn in the tiles.

Without CUDA the kernels run in Triton's interpreter (``tests/support/interpreted.py``), in
float32 and float16; the interpreter's ``tl.dot`` reads
bfloat16 inputs wrongly (a product of 16 x 16 bf16 matrices came out ~1e10 off), so
bfloat16, and the compiled kernels, are checked by ``tests/core/kernels/test_gpu.py``.

References (``tests/support/distance_kernel.py``) are independent of the kernel:
``softmax(q k^T + table[j - i] + masks) v`` in float64 with autograd, the padding and causal
masks as booleans, and rows that see no key set to zero.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.distance_kernel import CONFIGS, kernel_launch, kernels, run_both
from tests.support.interpreted import DEVICE


@pytest.mark.parametrize("name", list(CONFIGS))
def test_kernel_equals_the_naive_softmax_float32(name):
    (out, grads), (ref_out, ref_grads) = run_both(CONFIGS[name], torch.float32)
    assert (out - ref_out).abs().max() < 2e-5 * max(1.0, ref_out.abs().max().item())
    for got, ref in zip(grads, ref_grads):
        assert (got is None) == (ref is None)
        if got is not None:
            assert (got.cpu() - ref).abs().max() < 5e-5 * max(1.0, ref.abs().max().item())


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("name", DROPOUT_CASES)
def test_dropout_equals_the_naive_softmax_with_its_mask(name):
    (out, grads), (ref_out, ref_grads) = run_both(CONFIGS[name], torch.float32, dropout_p=0.3)
    assert (out - ref_out).abs().max() < 2e-5 * max(1.0, ref_out.abs().max().item())
    for got, ref in zip(grads, ref_grads):
        assert (got is None) == (ref is None)
        if got is not None:
            assert (got.cpu() - ref).abs().max() < 5e-5 * max(1.0, ref.abs().max().item())


@pytest.mark.slow
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
