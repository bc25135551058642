"""Per-call attention microbenchmark (fwd+bwd), for choosing the distance-bias kernel.

python3 .gpu/attn_bench.py OUT.json
"""
import json
import sys
import time
import traceback

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

torch.backends.cuda.matmul.allow_tf32 = True
dev = torch.device("cuda")
H, D = 8, 64
results = []
out_path = sys.argv[1]
flex = torch.compile(flex_attention, dynamic=False)


def bench(fn, n=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


def record(**kw):
    results.append(kw)
    print(json.dumps(kw), flush=True)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)


for (B, T) in [(64, 512), (256, 128)]:
    for dtype in [torch.bfloat16]:
        g = torch.Generator(device=dev).manual_seed(0)
        q = torch.randn(B, H, T, D, device=dev, dtype=dtype, generator=g).requires_grad_()
        k = torch.randn(B, H, T, D, device=dev, dtype=dtype, generator=g).requires_grad_()
        v = torch.randn(B, H, T, D, device=dev, dtype=dtype, generator=g).requires_grad_()
        do = torch.randn(B, H, T, D, device=dev, dtype=dtype, generator=g)
        lengths = torch.randint(int(0.8 * T), T + 1, (B,), device=dev, generator=g)
        lengths[0] = T
        start = T - lengths  # left padded keys
        pad = torch.arange(T, device=dev)[None, :] < start[:, None]  # (B, T) True = padding
        padmask = torch.zeros(B, 1, 1, T, device=dev, dtype=dtype).masked_fill(
            pad[:, None, None, :], float("-inf"))
        table = (0.1 * torch.randn(H, 2 * T - 1, device=dev, dtype=torch.float32, generator=g)
                 ).requires_grad_()
        rel = torch.arange(T, device=dev)[None, :] - torch.arange(T, device=dev)[:, None] + T - 1
        causal = torch.triu(torch.full((T, T), float("-inf"), device=dev, dtype=dtype), 1)
        tag = dict(B=B, T=T, dtype=str(dtype).split(".")[-1])

        def fb(fwd):
            def run():
                for t in (q, k, v, table):
                    t.grad = None
                fwd().backward(do)
            return run

        cases = {
            "flash_nomask": lambda: F.scaled_dot_product_attention(q, k, v),
            "sdpa_padmask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=padmask),
            "sdpa_bias_grad_pad": lambda: F.scaled_dot_product_attention(
                q, k, v, attn_mask=(table[:, rel].to(dtype)[None] + padmask)),
            "sdpa_bias_grad_nopad": lambda: F.scaled_dot_product_attention(
                q, k, v, attn_mask=table[:, rel].to(dtype)[None]),
            "sdpa_concat128_pad": lambda: F.scaled_dot_product_attention(
                torch.cat([q, q], -1), torch.cat([k, k], -1), v, attn_mask=padmask),
            "sdpa_causal_pad": lambda: F.scaled_dot_product_attention(
                q, k, v, attn_mask=causal + padmask),
            "sdpa_causal_bias_grad": lambda: F.scaled_dot_product_attention(
                q, k, v, attn_mask=(table[:, rel].to(dtype)[None] + causal + padmask)),
        }
        for name, fn in cases.items():
            try:
                record(case=name, ms=bench(fb(fn)), **tag)
            except Exception as exc:  # noqa
                record(case=name, error=repr(exc)[:300], **tag)

        def pad_mod(b, h, q_idx, kv_idx):
            return kv_idx >= start[b]

        def causal_pad_mod(b, h, q_idx, kv_idx):
            return (kv_idx >= start[b]) & (kv_idx <= q_idx)

        t0 = time.time()
        bm = create_block_mask(pad_mod, B, None, T, T, device=dev)
        bmc = create_block_mask(causal_pad_mod, B, None, T, T, device=dev)
        record(case="block_mask_build_s", s=time.time() - t0, **tag)

        def by_table(score, b, h, q_idx, kv_idx):
            return score + table[h, kv_idx - q_idx + T - 1]

        def bias2d_mod(b2d):
            def mod(score, b, h, q_idx, kv_idx):
                return score + b2d[h, q_idx, kv_idx]
            return mod

        opts = {
            "o64": {"BLOCK_M": 64, "BLOCK_N": 64, "num_stages": 2},
            "o64_nodq": {"BLOCK_M": 64, "BLOCK_N": 64, "num_stages": 2, "WRITE_DQ": False},
            "o128x64w8": {"BLOCK_M": 128, "BLOCK_N": 64, "num_stages": 2, "num_warps": 8},
        }
        flex_cases = [
            ("flex_pad_only", "o64", lambda o: flex(q, k, v, block_mask=bm, kernel_options=o)),
            ("flex_table_grad", "o64",
             lambda o: flex(q, k, v, score_mod=by_table, block_mask=bm, kernel_options=o)),
            ("flex_table_grad", "o64_nodq",
             lambda o: flex(q, k, v, score_mod=by_table, block_mask=bm, kernel_options=o)),
            ("flex_bias2d_grad", "o64",
             lambda o: flex(q, k, v, score_mod=bias2d_mod(table[:, rel]), block_mask=bm,
                            kernel_options=o)),
            ("flex_bias2d_grad", "o64_nodq",
             lambda o: flex(q, k, v, score_mod=bias2d_mod(table[:, rel]), block_mask=bm,
                            kernel_options=o)),
            ("flex_bias2d_grad", "o128x64w8",
             lambda o: flex(q, k, v, score_mod=bias2d_mod(table[:, rel]), block_mask=bm,
                            kernel_options=o)),
            ("flex_bias2d_nograd", "o64",
             lambda o: flex(q, k, v, score_mod=bias2d_mod(table[:, rel].detach()), block_mask=bm,
                            kernel_options=o)),
            ("flex_causal_bias2d_grad", "o64",
             lambda o: flex(q, k, v, score_mod=bias2d_mod(table[:, rel]), block_mask=bmc,
                            kernel_options=o)),
        ]
        for name, oname, fn in flex_cases:
            t0 = time.time()
            try:
                f = fb(lambda: fn(opts[oname]))
                f()
                torch.cuda.synchronize()
                compile_s = time.time() - t0
                record(case=name, opts=oname, ms=bench(f), compile_s=compile_s, **tag)
            except Exception as exc:  # noqa
                record(case=name, opts=oname, error=traceback.format_exc()[-600:], **tag)
        # exactness of the bias2d flex against SDPA + bias (forward and table grad)
        try:
            ref = F.scaled_dot_product_attention(q, k, v, attn_mask=(table[:, rel].to(dtype)[None] + padmask))
            (ref.float() * do.float()).sum().backward()
            gref = table.grad.clone(); table.grad = None
            out = flex(q, k, v, score_mod=bias2d_mod(table[:, rel]), block_mask=bm,
                       kernel_options=opts["o64"])
            (out.float() * do.float()).sum().backward()
            record(case="agree_bias2d", out_diff=float((out - ref).abs().max()),
                   grad_diff=float((table.grad - gref).abs().max()),
                   grad_max=float(gref.abs().max()), **tag)
        except Exception as exc:  # noqa
            record(case="agree_bias2d", error=traceback.format_exc()[-600:], **tag)
        del q, k, v, do
        torch.cuda.empty_cache()
