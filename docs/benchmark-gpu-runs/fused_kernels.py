"""The fused Triton kernels on a GPU, in stages (every one by default, in this order):

* ``calls``: the distance kernel, one self-attention call forward + backward (with the
  table's gradient, a fixed table, a factor, causal) against stock's padding mask or
  causal flag and SDPA with the (B, H, T, T) bias and its gradient;
* ``sweep``, ``sweep128``: each kernel's launch (tile shape, warps, pipelining stages),
  one kernel at a time from the defaults, then the best of each together;
* ``rope``: one rotation of a projection's view, the complex path against the kernel;
* ``train``, ``train_rope``, ``train_distance``, ``train_fixed``, ``train_fixed_more``:
  training steps of whole
  models with torch's path or the fused kernel, interleaved with stock's (distance, factor
  and Shaw's encodings; RoPE; the fixed tables of ALiBi and Sandwich, whose torch path is
  SDPA with one summed mask, which torch runs on cuDNN);
* ``translate``: beam-10 translation likewise.

    python docs/benchmark-gpu-runs/fused_kernels.py OUT_DIR [stage ...]

writes OUT_DIR/fused-kernels.json after each stage (one record per line printed as it
goes). Per-call timings are medians of CUDA-event times (30 calls after 3 warm-up calls;
15 in the sweeps); model steps are interleaved with stock's, as posenc-benchmark does.
"""

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import fairseq_posenc.core.kernels.distance as K
from fairseq_posenc.core.kernels.distance import launch
from fairseq_posenc.plugin.attention import PositionalMultiheadAttention
from fairseq_posenc.tools.benchmark.workload import (build_model, init_optimizer_state,
                                               make_batch, make_optimizer, train_step)
from fairseq_posenc.plugin.build import toy_dictionary
from fairseq_posenc.core.encodings.rope import Rope

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


def attention_inputs(B, T, dtype):
    """Scaled q, k, v (with gradients) and dO; left padding (as fairseq's) as a boolean
    ``(B, T)`` mask and as stock's float ``(B, 1, 1, T)`` mask; a table ``(H, 2T - 1)``
    with a gradient, and the same table without one."""
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, device=dev, dtype=dtype, generator=g).requires_grad_()
               for _ in range(3))
    with torch.no_grad():
        q.mul_(D ** -0.5)
    do = torch.randn(B, H, T, D, device=dev, dtype=dtype, generator=g)
    start = T - torch.randint(int(0.8 * T), T + 1, (B,), device=dev, generator=g)
    start[0] = 0
    pad = torch.arange(T, device=dev)[None] < start[:, None]
    padmask = torch.zeros(B, 1, 1, T, device=dev, dtype=dtype).masked_fill(
        pad[:, None, None], float("-inf"))
    table = (0.1 * torch.randn(H, 2 * T - 1, device=dev, generator=g)).to(dtype)
    table.requires_grad_()
    return q, k, v, do, pad, padmask, table, table.detach()


def calls(B, T, dtype, only=None):
    q, k, v, do, pad, padmask, table, fixed = attention_inputs(B, T, dtype)
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
        if only is not None and name not in only:
            continue

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
    """The three kernels' launches, one kernel at a time from the defaults (tile shape,
    warps, pipelining stages), with the table's gradient; then the best of each together."""
    cases, (q, k, v, table, do) = calls(B, T, dtype, only=("fused_grad",))
    defaults = {"FORWARD": launch.FORWARD, "BACKWARD_DKDV": launch.BACKWARD_DKDV,
                "BACKWARD_DQ": launch.BACKWARD_DQ}
    shapes = {"FORWARD": ((64, 64), (128, 64), (128, 32)),
              "BACKWARD_DKDV": ((32, 64), (64, 64), (32, 128), (64, 128)),
              "BACKWARD_DQ": ((32, 32), (64, 64))}

    def run():
        for t in (q, k, v, table):
            t.grad = None
        cases["fused_grad"]().backward(do)

    best = {}
    for kernel, options in shapes.items():
        timed = []
        for (bm, bn) in options:
            for warps in (4, 8):
                for stages in (2, 3):
                    tiles = K.Tiles(bm, bn, warps, stages)
                    setattr(launch, kernel, tiles)
                    try:
                        ms = bench(run, n=15)
                        timed.append((ms, tiles))
                        emit(case="sweep", kernel=kernel, tiles=str(tiles), B=B, T=T,
                             dtype=str(dtype)[6:], ms=ms)
                    except Exception as exc:
                        emit(case="sweep", kernel=kernel, tiles=str(tiles), B=B, T=T,
                             error=repr(exc)[:300])
        setattr(launch, kernel, defaults[kernel])
        best[kernel] = min(timed, key=lambda x: x[0])[1]
    for name, config in (("defaults", defaults), ("best", best)):
        for key, tiles in config.items():
            setattr(launch, key, tiles)
        emit(case="sweep_" + name, config={k: str(t) for k, t in config.items()}, B=B, T=T,
             dtype=str(dtype)[6:], ms=bench(run))
    for key, tiles in defaults.items():
        setattr(launch, key, tiles)
    return best


def rope_calls(B=256, T=128, dtype=torch.float16):
    """One rotation of a ``(B, H, T, d)`` view of a ``(T, B, H * d)`` projection, forward
    and backward: the complex64 path and the fused kernel."""
    from fairseq_posenc.core.encodings.rope import rotate_pairs
    from fairseq_posenc.core.kernels.rotary import rotate
    x = torch.randn(T, B, H * D, device=dev, dtype=dtype).requires_grad_()
    theta = 10000.0 ** (-torch.arange(0, D, 2, device=dev, dtype=torch.float64) / D)
    angle = torch.arange(T, device=dev, dtype=torch.float64)[:, None] * theta
    rot = torch.polar(torch.ones_like(angle), angle).to(torch.complex64)
    dy = torch.randn(B, H, T, D, device=dev, dtype=dtype)
    for name, fn in (("complex", rotate_pairs), ("fused", rotate)):
        def run():
            x.grad = None
            view = x.view(T, B, H, D).permute(1, 2, 0, 3)
            fn(view, rot).backward(dy)
        emit(case="rope_call", kernel=name, B=B, T=T, dtype=str(dtype)[6:], ms=bench(run))
    emit(case="copy_reference", B=B, T=T, dtype=str(dtype)[6:],
         ms=bench(lambda: x.detach().clone()))


def set_distance_kernel(model, kernel):
    """``bias`` / ``fused``; ``fused-decoder``: also the causal ALiBi, which ``auto`` runs
    as two concatenated key dimensions (its low-rank form) instead; ``bias-fused-decoder``:
    the encoder on SDPA's summed mask, the decoder's causal ALiBi in the fused kernel."""
    for name, m in model.named_modules():
        if isinstance(m, PositionalMultiheadAttention):
            choice = kernel
            if kernel == "bias-fused-decoder":
                choice = "fused-decoder" if name.startswith("decoder") else "bias"
            m.distance_kernel = "fused" if choice == "fused-decoder" else choice
            m.low_rank_kernel = "bias" if choice == "fused-decoder" else "auto"


def set_rotation_kernel(model, kernel):
    for m in model.modules():
        if isinstance(m, Rope):
            m.kernel = kernel


#: encoding -> (how to choose its kernel, the choices: torch's path first, then fused ones)
VARIANTS = {
    **{name: (set_distance_kernel, ("bias", "fused"))
       for name in ("t5", "diet_rel", "tupe_r", "at5", "huang1", "huang2", "shaw", "sandwich")},
    "alibi": (set_distance_kernel, ("bias", "fused", "fused-decoder")),
    "rope": (set_rotation_kernel, ("complex", "fused")),
}


def model_steps(length, dtype, names=tuple(VARIANTS), reps=8, attention_dropout=0.0,
                kernels=None):
    """Training steps (32k-token batches, base): each encoding with torch's path and with
    the fused kernel (or ``kernels``), each interleaved with stock's (both with
    ``attention_dropout``)."""
    d = toy_dictionary(10000)
    batch = make_batch(d, 32768 // length, length, 1, dev)
    times = {"stock": []}
    for name in names:
        model = build_model(name, "base", d, 1, dev, dtype=dtype,
                            attention_dropout=attention_dropout)
        stock = build_model("stock", "base", d, 1, dev, dtype=dtype,
                            attention_dropout=attention_dropout)
        choose, choices = VARIANTS[name]
        for kernel in kernels or choices:
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
                 dtype=str(dtype)[6:], attention_dropout=attention_dropout,
                 ms=1000 * steps[0],
                 ratio=steps[0] / times["stock"][-1])
        del model, stock
        torch.cuda.empty_cache()


def translate_steps(length=128, dtype=torch.float16, names=("t5", "tupe_r", "huang1", "shaw",
                                                               "rope"), reps=3):
    """Beam-10 translation of 64 sentences (``posenc-benchmark``'s translate call): torch's
    path and the fused kernels, each interleaved with stock's."""
    from fairseq_posenc.tools.benchmark.workload import make_generator, translate
    d = toy_dictionary(10000)
    sources = make_batch(d, 64, length, 2, dev)
    stock = build_model("stock", "base", d, 1, dev, dtype=dtype)
    stock_gen = make_generator(stock, d, 10, length, half=True)
    for name in names:
        model = build_model(name, "base", d, 1, dev, dtype=dtype)
        gen = make_generator(model, d, 10, length, half=True)
        choose, kernels = VARIANTS[name]
        for kernel in kernels:
            choose(model, kernel)
            times = {"model": [], "stock": []}
            translate(model, gen, sources)
            translate(stock, stock_gen, sources)
            for _ in range(reps):
                for key, net, g in (("model", model, gen), ("stock", stock, stock_gen)):
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    translate(net, g, sources)
                    torch.cuda.synchronize()
                    times[key].append(time.perf_counter() - t)
            ms = 1000 * statistics.median(times["model"])
            emit(case="translate", encoding=name, kernel=kernel, length=length,
                 dtype=str(dtype)[6:], ms=ms,
                 ratio=ms / (1000 * statistics.median(times["stock"])))
        del model
        torch.cuda.empty_cache()


STAGES = {
    "calls": lambda: [calls(B, T, dt) for B, T in ((64, 512), (256, 128))
                      for dt in (torch.float16, torch.bfloat16)],
    "sweep": lambda: sweep(64, 512, torch.bfloat16),
    "sweep128": lambda: sweep(256, 128, torch.float16),
    "rope": lambda: [rope_calls(), rope_calls(64, 512)],
    "train": lambda: [model_steps(n, torch.float16) for n in (128, 512)],
    "train_rope": lambda: [model_steps(n, torch.float16, names=("rope",)) for n in (128, 512)],
    "train_distance": lambda: [model_steps(n, torch.float16, names=("t5", "diet_rel", "tupe_r"))
                               for n in (128, 512)],
    # fixed tables: torch's SDPA with the summed mask (cuDNN) against the fused kernel
    "train_fixed": lambda: [model_steps(n, torch.float16, names=("alibi", "sandwich"))
                            for n in (128, 512)],
    # the fixed tables at 256 tokens and with dropout (FIXED_TABLE_SDPA_MAX_LEN)
    "train_fixed_more": lambda: [
        model_steps(256, torch.float16, names=("alibi", "sandwich")),
        *(model_steps(n, torch.float16, names=("alibi", "sandwich"), attention_dropout=0.1)
          for n in (128, 256, 512))],
    # alibi's decoder: extra dimensions or the fused kernel, the encoder on SDPA's mask
    "train_alibi_decoder": lambda: [
        model_steps(n, torch.float16, names=("alibi",), attention_dropout=p,
                    kernels=("bias", "bias-fused-decoder", "fused-decoder"))
        for p in (0.0, 0.1) for n in (128, 256, 512)],
    "translate": translate_steps,
}

if __name__ == "__main__":
    # python fused_kernels.py OUT [stage ...]: every stage by default, in this order
    for stage in sys.argv[2:] or list(STAGES):
        try:
            STAGES[stage]()
        except Exception as exc:  # record and go on with the next stage
            emit(case=stage, error=repr(exc)[:400])
        json.dump(records, open(f"{sys.argv[1]}/fused-kernels.json", "w"), indent=1)
