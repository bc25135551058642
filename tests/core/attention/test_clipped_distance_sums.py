"""Shaw et al.'s sums by clipped distance (``fairseq_posenc.core.positions``): the value term
and the key term's gradient, both ways (``scatter_add`` on CPU, the masked sums CUDA
takes), against a loop over the keys, in float64."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("q_len,k_len,q_offset,r_lo,r_hi", [
    (9, 9, 0, -3, 3),     # encoder self-attention, clip 3
    (9, 9, 0, -16, 16),   # clip beyond the length: no key reaches the clipped rows
    (9, 9, 0, -3, 0),     # causal decoder's k + 1 rows
    (1, 7, 6, -3, 0),     # one decoding step
    (4, 7, 3, -1, 1),     # the last 4 queries, clip 1 (no distance inside the range)
])
def test_sums_by_clipped_distance_equal_the_naive_sums(q_len, k_len, q_offset, r_lo, r_hi):
    """Shaw's sums per clipped distance (the value term, and the key term's gradient),
    both ways (``scatter_add`` on CPU, the masked sums CUDA takes), against a loop over
    the keys, float64, values and gradients."""
    from fairseq_posenc.core.positions import (clipped_index, read_by_clipped_distance,
                                          relative_positions, sum_by_clipped_distance,
                                          sum_by_masks)
    g = torch.Generator().manual_seed(0)
    rows = r_hi - r_lo + 1
    index = clipped_index(relative_positions(q_len, k_len, q_offset), r_lo, r_hi)
    x = torch.randn(2, 3, q_len, k_len, dtype=torch.float64, generator=g)
    ref = torch.zeros(2, 3, q_len, rows, dtype=torch.float64)
    for i in range(q_len):
        for j in range(k_len):
            c = min(max(j - (q_offset + i), r_lo), r_hi)
            ref[:, :, i, c - r_lo] += x[:, :, i, j]
    assert torch.allclose(sum_by_clipped_distance(x, index, q_offset, r_lo, r_hi), ref,
                          rtol=0, atol=1e-12)
    assert torch.allclose(sum_by_masks(x, q_offset, r_lo, r_hi), ref, rtol=0, atol=1e-12)
    per_distance = torch.randn(2, 3, q_len, rows, dtype=torch.float64, generator=g,
                               requires_grad=True)
    out = read_by_clipped_distance(per_distance, index, q_offset, r_lo, r_hi)
    assert torch.equal(out, per_distance.gather(-1, index.expand_as(x)))
    (out * x).sum().backward()
    assert torch.allclose(per_distance.grad, ref, rtol=0, atol=1e-12)
