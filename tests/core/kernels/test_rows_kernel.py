"""The fused kernel's rows entry point
(``fairseq_posenc.core.kernels.distance.distance_rows_attention``): Transformer-XL's and Huang et
al.'s method 4's content terms by distance against the sum written out in float64
(``tests/support/distance_kernel.py``), with padding, the causal mask, queries after a
cache, attention dropout and other tile shapes; one table per row over every distance, at
chosen and at random shapes; the tables' columns and their gradient; the refusals.

Without CUDA the kernels run in Triton's interpreter (``tests/support/interpreted.py``), in
float32 and float16; bfloat16 and the compiled kernels in ``tests/core/kernels/test_gpu.py``.
"""

from __future__ import annotations

import random

import pytest
import torch

from tests.support.distance_kernel import (ROWS_CONFIGS, kernel_launch, kernel_rows, kernels,
                                           run_rows)
from tests.support.interpreted import DEVICE


@pytest.mark.slow
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 5e-5), (torch.float16, 2e-2)])
@pytest.mark.parametrize("name", list(ROWS_CONFIGS))
def test_distance_rows_attention_is_the_written_out_sum(name, dtype, tol):
    """Rows per query (and per key) read at every distance: outputs and the gradients of
    q, k, v, x_q, A_q (and x_k, A_k)."""
    got, ref = run_rows(ROWS_CONFIGS[name], dtype)
    for n, (a, b) in enumerate(zip(got, ref)):
        assert (a - b).abs().max() < tol * max(1.0, b.abs().max().item()), n


@pytest.mark.slow
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
    higher than wide, square)."""
    monkeypatch.setattr(kernel_launch, "FORWARD", kernels.Tiles(32, 16))
    monkeypatch.setattr(kernel_launch, "BACKWARD_DKDV", kernels.Tiles(16, 32))
    monkeypatch.setattr(kernel_launch, "BACKWARD_DQ", kernels.Tiles(32, 32))
    got, ref = run_rows(ROWS_CONFIGS[name], torch.float32)
    for n, (a, b) in enumerate(zip(got, ref)):
        assert (a - b).abs().max() < 5e-5 * max(1.0, b.abs().max().item()), n


def tables_made(monkeypatch):
    """A list that records each table per row the kernels' wrapper makes (a call of
    ``_table_rows``) as its columns' shape."""
    made = []
    real = kernel_rows._table_rows
    monkeypatch.setattr(kernel_rows, "_table_rows",
                        lambda x, columns: made.append(tuple(columns.shape)) or real(x, columns))
    return made


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True])
def test_rows_are_one_table_of_every_distance(causal, monkeypatch):
    """Bidirectional or causal: one table per side over every distance of the attention
    (``2T - 1`` or ``T``, rounded up to 16), in the forward and again in the backward."""
    made = tables_made(monkeypatch)
    config = (2, 2, 70, 70, 0, causal, True, 0)
    got, ref = run_rows(config, torch.float32)
    assert made == [(2, 16, 80 if causal else 144)] * 4
    for n, (a, b) in enumerate(zip(got, ref)):
        assert (a - b).abs().max() < 5e-5 * max(1.0, b.abs().max().item()), n


def random_rows_configs(count, seed=0):
    """``count`` shapes of self-attention as the model makes them (keys: the cache and the
    queries; every third causal)."""
    rng = random.Random(seed)
    configs = []
    for n in range(count):
        q_len, causal = rng.randint(1, 90), n % 3 == 2
        q_offset = rng.choice([0, rng.randint(1, 40)])
        configs.append((rng.randint(1, 2), rng.randint(1, 3), q_len, q_offset + q_len,
                        q_offset, causal, rng.random() < 0.5, rng.randint(0, 5)))
    return configs


@pytest.mark.slow
@pytest.mark.parametrize("config", random_rows_configs(8), ids=str)
def test_rows_at_random_shapes(config):
    """Lengths, offsets and extra distances drawn at random (seeded): the same sums as
    written out."""
    got, ref = run_rows(config, torch.float32)
    for n, (a, b) in enumerate(zip(got, ref)):
        assert (a - b).abs().max() < 5e-5 * max(1.0, b.abs().max().item()), n


@pytest.mark.parametrize("key", [False, True])
def test_columns_and_their_gradient(key):
    """``A``'s columns: zeros up to the width after its distances (before them, reversed,
    for a key side); :func:`_columns_grad` is their backward."""
    a = torch.randn(2, 3, 11, dtype=torch.float64, requires_grad=True)
    columns = kernel_rows._columns(a, 16, key)
    zeros = torch.zeros(2, 3, 5, dtype=torch.float64)
    expected = torch.cat([zeros, a.flip(-1)] if key else [a, zeros], -1)
    assert torch.equal(columns, expected)
    weights = torch.randn_like(columns)
    (ref,) = torch.autograd.grad((columns * weights).sum(), a)
    assert torch.equal(kernel_rows._columns_grad(weights, 11, key), ref)


def test_rows_that_miss_distances_are_refused():
    q = torch.zeros(1, 2, 4, 16, device=DEVICE)
    a = torch.zeros(2, 16, 6, device=DEVICE)
    with pytest.raises(ValueError, match=r"cover distances -2..3; this attention needs "
                       r"-3..3 \(no clipping\)"):
        kernels.distance_rows_attention(q, q, q, (q, a), -2)
    with pytest.raises(ValueError, match="the key rows have 5 distances, the query rows 7"):
        kernels.distance_rows_attention(q, q, q, (q, torch.zeros(2, 16, 7, device=DEVICE)),
                                        -3, key_rows=(q, torch.zeros(2, 16, 5, device=DEVICE)))
