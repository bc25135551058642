"""Shaw's sums by clipped distance on a CPU, the two ways of
``fairseq_posenc.core.positions``: ``scatter_add`` along the clipped index (what
``sum_by_clipped_distance`` runs off CUDA) against the masked sums (``sum_by_masks``, what it
runs on CUDA), at the CPU benchmark's training shapes (8 heads; 8 x 30 and 2 x 120 tokens)
and one larger. Prints the best of 5 means of 200 calls each.

    python docs/benchmark-cpu-runs/shaw_sums.py
"""

import time

import torch

from fairseq_posenc.core.positions import (clipped_index, relative_positions,
                                      sum_by_clipped_distance, sum_by_masks)


def best_mean_us(call, n: int = 200) -> float:
    for _ in range(10):
        call()
    means = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            call()
        means.append((time.perf_counter() - start) / n * 1e6)
    return min(means)


print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
for batch, length in [(8, 30), (2, 120), (8, 120)]:
    for r_lo, r_hi in [(-16, 16), (-16, 0)]:
        x = torch.randn(batch, 8, length, length)
        index = clipped_index(relative_positions(length, length), r_lo, r_hi)
        assert torch.allclose(sum_by_clipped_distance(x, index, 0, r_lo, r_hi),
                              sum_by_masks(x, 0, r_lo, r_hi), atol=1e-4)
        scatter = best_mean_us(lambda: sum_by_clipped_distance(x, index, 0, r_lo, r_hi))
        masks = best_mean_us(lambda: sum_by_masks(x, 0, r_lo, r_hi))
        print(f"B={batch} T={length} clip [{r_lo}, {r_hi}]: scatter_add {scatter:.0f} us, "
              f"masked sums {masks:.0f} us ({masks / scatter:.1f}x)")
