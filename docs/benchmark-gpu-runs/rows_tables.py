"""``distance_rows_attention`` per call, forward + backward, both ways, interleaved, on one
GPU, and how far they agree: the rows made as one ``B x H x T x R`` tensor before the
kernel (``one-table``, ``ROW_BAND = 0``: what ``xl`` and ``huang4`` ran in runs 8-12), and
made in bands of ``ROW_BAND`` rows over the distances each band meets (``bands``, the
default since 2026-11-23; bidirectional attention only, so the causal case runs one table
either way).

    python docs/benchmark-gpu-runs/rows_tables.py OUT.json [--reps 30]

Shapes of the GPU benchmark's training batches (64 x 512 and 256 x 128 tokens, 8 heads, head dimension 64),
fp16 and bf16, as ``xl``'s encoder (every distance), its causal decoder, and ``huang4``'s
encoder (key rows too); queries laid out as fairseq's ``(T, B, H * d)`` projections.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from fairseq_posenc.kernels.distance import distance_rows_attention, rows

WAYS = ("one-table", "bands")
BAND = rows.ROW_BAND

CASES = {  # name: (causal, key rows)
    "xl encoder": (False, False),
    "xl decoder (causal)": (True, False),
    "huang4 encoder": (False, True),
}


def inputs(batch: int, length: int, dtype: torch.dtype, causal: bool, key_rows: bool):
    g = torch.Generator(device="cuda").manual_seed(0)
    heads, d = 8, 64

    def projection() -> torch.Tensor:  # (B, H, T, d) views of (T, B, H * d)
        x = torch.randn(length, batch, heads, d, generator=g, device="cuda") / d ** 0.5
        return x.to(dtype).permute(1, 2, 0, 3).requires_grad_()

    r = length if causal else 2 * length - 1
    table = lambda: (torch.randn(heads, d, r, generator=g, device="cuda") / d ** 0.5
                     ).to(dtype).requires_grad_()
    q, k, v, x_q = projection(), projection(), projection(), projection()
    a_q = table()
    keys = (projection(), table()) if key_rows else None
    pad = torch.zeros(batch, length, dtype=torch.bool, device="cuda")
    pad[0, : length // 10] = True  # left padding
    return q, k, v, (x_q, a_q), keys, pad, -(length - 1)


def call(args, causal: bool, way: str):
    q, k, v, query_rows, keys, pad, r_lo = args
    rows.ROW_BAND = 0 if way == "one-table" else BAND
    out = distance_rows_attention(q, k, v, query_rows, r_lo, 0, pad, causal, keys)
    leaves = [q, k, v, *query_rows, *(keys or ())]
    grads = torch.autograd.grad(out, leaves, torch.ones_like(out))
    return out, grads


def seconds(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--reps", type=int, default=30)
    opts = parser.parse_args()
    records = []
    for batch, length in ((64, 512), (256, 128)):
        for dtype in (torch.float16, torch.bfloat16):
            for name, (causal, key_rows) in CASES.items():
                args = inputs(batch, length, dtype, causal, key_rows)
                results = {way: call(args, causal, way) for way in WAYS}
                ref = [t.detach().float() for t in (results["one-table"][0],
                                                    *results["one-table"][1])]
                error = {}
                for way, (out, grads) in results.items():
                    got = [t.detach().float() for t in (out, *grads)]
                    error[way] = max(float((a - b).abs().max() / b.abs().max())
                                     for a, b in zip(got, ref))
                times = {way: [] for way in WAYS}
                for _ in range(3):  # warm-up, compilation
                    for way in times:
                        call(args, causal, way)
                for _ in range(opts.reps):
                    for way in times:
                        times[way].append(seconds(lambda: call(args, causal, way)))
                ms = {way: 1e3 * statistics.median(times[way]) for way in WAYS}
                records.append({"case": name, "batch": batch, "length": length,
                                "dtype": str(dtype).removeprefix("torch."), "ms": ms,
                                "ratio_to_one_table": {w: ms[w] / ms["one-table"] for w in WAYS},
                                "max_relative_difference_to_one_table": error})
                print(f"{name:22s} {batch:3d} x {length:3d} {records[-1]['dtype']:8s} "
                      + "  ".join(f"{w} {ms[w]:7.3f} ms ({ms[w] / ms['one-table']:.3f}, "
                                  f"{error[w]:.1e})" for w in WAYS), flush=True)
    with open(opts.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "band": BAND, "reps": opts.reps, "records": records}, f, indent=1)


if __name__ == "__main__":
    main()
