"""How far the fused kernels are from the papers' formulas written out in float64, on the
same rounded inputs: max |error| / max |reference| for the output and every gradient,
without and with attention dropout.

    PYTHONPATH=. python docs/kernels/accuracy.py > docs/kernels/accuracy-cpu.txt
    (on a CUDA machine: > docs/kernels/accuracy-gpu.txt)

Uses the kernel tests' comparisons (``tests/support/distance_kernel.py``); without CUDA the
kernels run in Triton's interpreter (``tests/support/interpreted.py``), with CUDA compiled,
and then bfloat16 is measured too.
"""

import torch

from tests.support.interpreted import DEVICE
from tests.support.distance_kernel import (CONFIGS, ROWS_CONFIGS, SHAW_CONFIGS, run_both,
                                           run_rows, run_shaw)

DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE == "cuda" else [])


def relative(got, ref):
    return ", ".join(f"{float((a.cpu() - b).abs().max() / b.abs().max()):.1e}"
                     for a, b in zip(got, ref) if a is not None)


print(f"device: {DEVICE} ({'compiled' if DEVICE == 'cuda' else 'Triton interpreter'}), "
      f"torch {torch.__version__}")
print("distance kernel: output, dq, dk, dv, d_table")
for name in ("encoder, left padding", "decoder, causal, rows with no key",
             "queries after a cache, extra q.k dims", "a factor (Huang), two tiles"):
    for dtype in DTYPES:
        (out, grads), (ref_out, ref_grads) = run_both(CONFIGS[name], dtype)
        print(f"  {name}, {str(dtype)[6:]}: {relative([out, *grads], [ref_out, *ref_grads])}")
print("Shaw's terms by clipped distance: output, dq, dk, dv, d_aK, d_aV")
for name in SHAW_CONFIGS:
    for dtype in DTYPES:
        got, ref = run_shaw(SHAW_CONFIGS[name], dtype)
        print(f"  {name}, {str(dtype)[6:]}: {relative(got, ref)}")
print("Content by distance (Transformer-XL, Huang 4): output, dq, dk, dv, dx_q, dA_q "
      "(, dx_k, dA_k)")
for name in ROWS_CONFIGS:
    for dtype in DTYPES:
        got, ref = run_rows(ROWS_CONFIGS[name], dtype)
        print(f"  {name}, {str(dtype)[6:]}: {relative(got, ref)}")
print("With attention dropout 0.1, against the formulas dropping where the kernels' mask "
      "does: output and every gradient")
for dtype in DTYPES:
    (out, grads), (ref_out, ref_grads) = run_both(CONFIGS["encoder, left padding"], dtype,
                                                  dropout_p=0.1)
    print(f"  distance, encoder, left padding, {str(dtype)[6:]}: "
          f"{relative([out, *grads], [ref_out, *ref_grads])}")
    name = "decoder, causal, rows with no key"
    print(f"  Shaw, {name}, {str(dtype)[6:]}: "
          f"{relative(*run_shaw(SHAW_CONFIGS[name], dtype, dropout_p=0.1))}")
    name = "encoder, two tiles, left padding (Huang 4)"
    print(f"  content by distance, {name}, {str(dtype)[6:]}: "
          f"{relative(*run_rows(ROWS_CONFIGS[name], dtype, dropout_p=0.1))}")
