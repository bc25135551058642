"""The fused kernel's clipped entry point
(``fairseq_posenc.core.kernels.distance.clipped_relative_attention``) against Shaw et al.'s
eqs. (3)-(5) written out in float64 (``tests/support/distance_kernel.py``): the key term
read per row by clipped distance, the value term from the probabilities summed by clipped
distance, with padding, the causal mask, queries after a cache and attention dropout.

Without CUDA the kernels run in Triton's interpreter (``tests/support/interpreted.py``), in
float32 and float16; bfloat16 and the compiled kernels in ``tests/core/kernels/test_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.distance_kernel import SHAW_CONFIGS, run_shaw

pytestmark = pytest.mark.slow  # both run the interpreter at every shape, forward and back


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
