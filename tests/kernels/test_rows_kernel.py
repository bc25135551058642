"""The fused kernel's rows entry point
(``fairseq_posenc.kernels.distance.distance_rows_attention``): Transformer-XL's and Huang et
al.'s method 4's content terms by distance against the sum written out in float64
(``tests/support/distance_kernel.py``), with padding, the causal mask, queries after a
cache, attention dropout and other tile shapes; the tables per row made in bands or as one
table, at chosen and at random shapes; the bands' windows; the refusals.

Without CUDA the kernels run in Triton's interpreter (``tests/support/interpreted.py``), in
float32 and float16; bfloat16 and the compiled kernels in ``tests/kernels/test_gpu.py``.
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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
