"""The fused Triton kernels on a GPU. The distance-bias kernel: one self-attention call,
forward + backward, against stock's padding mask and the (B, H, T, T) bias with its
gradient, and a sweep of tile sizes and warps. Then training steps of whole models with
either kernel: the distance-bias and distance-factor encodings and Shaw's (bias or
explicit path / fused) and RoPE (complex64 / fused rotation).

    python docs/benchmark-gpu-runs/fused_kernels.py OUT_DIR

writes OUT_DIR/fused-kernels.json (one record per line printed as it goes).
Timings are medians of CUDA-event times over 30 calls after 3 warm-up calls; model steps
are interleaved with stock's, as posenc-benchmark does.
"""

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import fairseq_posenc.kernels.distance as K
from fairseq_posenc.attention import PositionalMultiheadAttention
from fairseq_posenc.benchmark.workload import (build_model, init_optimizer_state,
                                               make_batch, make_optimizer, train_step)
from fairseq_posenc.build import toy_dictionary
from fairseq_posenc.encodings.rope import Rope

dev = torch.device("cuda")
H, D = 8, 64
records = []


def emit(**record):
    records.append(record)
    print(json.dumps(record), flush=True)


def bench(fn, n=30):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(n):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def calls(B, T, dtype):
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, device=dev, dtype=dtype, generator=g).requires_grad_()
               for _ in range(3))
    with torch.no_grad():
        q.mul_(D ** -0.5)
    do = torch.randn(B, H, T, D, device=dev, dtype=dtype, generator=g)
    start = T - torch.randint(int(0.8 * T), T + 1, (B,), device=dev, generator=g)
    start[0] = 0
    pad = torch.arange(T, device=dev)[None] < start[:, None]  # left padding, as fairseq's
    padmask = torch.zeros(B, 1, 1, T, device=dev, dtype=dtype).masked_fill(
        pad[:, None, None], float("-inf"))
    table = (0.1 * torch.randn(H, 2 * T - 1, device=dev, generator=g)).to(dtype)
    table.requires_grad_()
    fixed = table.detach()
    rel = torch.arange(T, device=dev)[None] - torch.arange(T, device=dev)[:, None] + T - 1
    future = torch.triu(torch.full((T, T), float("-inf"), device=dev, dtype=dtype), 1)
    right = torch.zeros_like(pad)  # targets: right padding, none here
    cases = {
        "stock_padmask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=padmask),
        "bias_grad_padmask": lambda: F.scaled_dot_product_attention(
            q, k, v, attn_mask=table[:, rel][None] + padmask),
        "fused_grad": lambda: K.distance_attention(q, k, v, table, -(T - 1), 0, pad),
        "fused_factor_grad": lambda: K.distance_attention(q, k, v, table, -(T - 1), 0, pad,
                                                          factor=True),
        "fused_fixed_table": lambda: K.distance_attention(q, k, v, fixed, -(T - 1), 0,
                                                               pad),
        "stock_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "bias_grad_causal": lambda: F.scaled_dot_product_attention(
            q, k, v, attn_mask=(table[:, rel] + future)[None]),
        "fused_grad_causal": lambda: K.distance_attention(q, k, v, table, -(T - 1), 0,
                                                               right, causal=True),
    }
    for name, fn in cases.items():
        def run():
            for t in (q, k, v, table):
                t.grad = None
            fn().backward(do)
        try:
            emit(case=name, B=B, T=T, dtype=str(dtype)[6:], ms=bench(run))
        except Exception as exc:  # record and go on: one failure must not end the run
            emit(case=name, B=B, T=T, dtype=str(dtype)[6:], error=repr(exc)[:400])
    return cases, (q, k, v, table, do)


def sweep(B, T, dtype):
    """Tile sizes and warps of the fused kernel with its table's gradient."""
    cases, (q, k, v, table, do) = calls(B, T, dtype)
    saved = K.FORWARD_BLOCKS, K.BACKWARD_BLOCK, K.NUM_WARPS
    for fwd in ((64, 64), (128, 64), (128, 32)):
        for bwd in (32, 64):
            for warps in (4, 8):
                K.FORWARD_BLOCKS, K.BACKWARD_BLOCK, K.NUM_WARPS = fwd, bwd, warps

                def run():
                    for t in (q, k, v, table):
                        t.grad = None
                    cases["fused_grad"]().backward(do)
                config = f"fwd{fwd[0]}x{fwd[1]}_bwd{bwd}_w{warps}"
                try:
                    emit(case="fused_grad", config=config, B=B, T=T, dtype=str(dtype)[6:],
                         ms=bench(run))
                except Exception as exc:
                    emit(case="fused_grad", config=config, B=B, T=T, error=repr(exc)[:400])
    K.FORWARD_BLOCKS, K.BACKWARD_BLOCK, K.NUM_WARPS = saved


def set_distance_kernel(model, kernel):
    """``bias`` / ``fused``; ``fused-decoder``: also the causal ALiBi, which ``auto`` runs
    as two concatenated key dimensions (its low-rank form) instead."""
    for m in model.modules():
        if isinstance(m, PositionalMultiheadAttention):
            m.distance_kernel = "fused" if kernel == "fused-decoder" else kernel
            m.low_rank_kernel = "bias" if kernel == "fused-decoder" else "auto"


def set_rotation_kernel(model, kernel):
    for m in model.modules():
        if isinstance(m, Rope):
            m.kernel = kernel


#: encoding -> (how to choose its kernel, the choices: torch's path first, then fused ones)
VARIANTS = {
    **{name: (set_distance_kernel, ("bias", "fused"))
       for name in ("t5", "diet_rel", "tupe_r", "at5", "huang1", "huang2", "shaw")},
    "alibi": (set_distance_kernel, ("bias", "fused", "fused-decoder")),
    "rope": (set_rotation_kernel, ("complex", "fused")),
}


def model_steps(length, dtype, names=tuple(VARIANTS), reps=8):
    """Training steps (32k-token batches, base): each encoding with torch's path and with
    the fused kernel, each interleaved with stock's."""
    d = toy_dictionary(10000)
    batch = make_batch(d, 32768 // length, length, 1, dev)
    times = {"stock": []}
    for name in names:
        model = build_model(name, "base", d, 1, dev, dtype=dtype)
        stock = build_model("stock", "base", d, 1, dev, dtype=dtype)
        choose, kernels = VARIANTS[name]
        for kernel in kernels:
            choose(model, kernel)
            steps = []
            for net, out in ((model, steps), (stock, times["stock"])):
                opt = make_optimizer(net.parameters())
                init_optimizer_state(opt)
                train_step(net, opt, batch, d.pad())
                out_times = []
                for _ in range(reps):
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    train_step(net, opt, batch, d.pad())
                    torch.cuda.synchronize()
                    out_times.append(time.perf_counter() - t)
                out.append(statistics.median(out_times))
                del opt
            emit(case="train_step", encoding=name, kernel=kernel, length=length,
                 dtype=str(dtype)[6:], ms=1000 * steps[0],
                 ratio=steps[0] / times["stock"][-1])
        del model, stock
        torch.cuda.empty_cache()


if __name__ == "__main__":
    for B, T in ((64, 512), (256, 128)):
        for dtype in (torch.float16, torch.bfloat16):
            calls(B, T, dtype)
    sweep(64, 512, torch.bfloat16)
    for length in (128, 512):
        model_steps(length, torch.float16)
    json.dump(records, open(f"{sys.argv[1]}/fused-kernels.json", "w"), indent=1)
